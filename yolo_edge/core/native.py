"""What native code prints: file descriptors 1 and 2 captured for a block (C++ runtimes and compilers log there,
past any Python redirect)."""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Iterator


@contextlib.contextmanager
def native_output() -> Iterator[io.BytesIO]:
    """File descriptors 1 and 2 into a temporary file for the block; what was written there is in the yielded
    buffer once the block ends (torch's exporter logs its whole IR graph from C++ when it fails; ONNX Runtime's
    execution providers log which nodes they refuse)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved, got = [os.dup(1), os.dup(2)], io.BytesIO()
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 1)
        os.dup2(captured.fileno(), 2)
        try:
            yield got
        finally:
            for fd, old in zip((1, 2), saved):
                os.dup2(old, fd)
                os.close(old)
            captured.seek(0)
            got.write(captured.read())
            got.seek(0)
