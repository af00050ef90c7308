"""The pipe protocol between yolo-edge and a toolchain worker. Standard library and numpy only: the worker
side imports this file by path inside the toolchain's own environment (other numpy, no yolo-edge).

A message is a 4-byte big-endian length, a JSON header of that length, then the raw bytes of each array
the header lists (``{"arrays": [[name, dtype, shape], ...]}``, C order). Arrays never go through pickle,
whose format differs between the numpy versions on each side.

A worker module defines handlers ``op(args, arrays) -> (result, arrays)`` and calls :func:`serve`, which
answers each request with ``{"ok": true, "result": ..., "log": ...}`` or ``{"ok": false, "error": ...,
"log": ...}``. ``log`` is everything the toolchain printed while handling it (file descriptors 1 and 2
are captured, so native code's prints are caught too, and the protocol's own stdout stays clean).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import struct
import sys
import tempfile
import traceback
from collections.abc import Callable
from typing import Any, BinaryIO

import numpy as np

Arrays = dict[str, np.ndarray]
Handler = Callable[[dict[str, Any], Arrays], tuple[dict[str, Any], Arrays]]
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_HEADER = struct.Struct(">I")
_LIBC = ctypes.CDLL(None)


class WireClosed(EOFError):
    """The other side closed the pipe (a worker that exited or crashed)."""


def send(stream: BinaryIO, header: dict[str, Any], arrays: Arrays | None = None) -> None:
    arrays = arrays or {}
    arrs = {k: np.require(v, requirements="C") for k, v in arrays.items()}  # (ascontiguousarray makes 0-d 1-d)
    header = {**header, "arrays": [[k, v.dtype.str, list(v.shape)] for k, v in arrs.items()]}
    body = json.dumps(header).encode()
    _write_all(stream, _HEADER.pack(len(body)) + body)
    for v in arrs.values():
        _write_all(stream, v.data.cast("B") if v.ndim and v.size else v.tobytes())
    stream.flush()


def _write_all(stream: BinaryIO, data: bytes | memoryview) -> None:
    """Write all of ``data``: an unbuffered pipe may take it in parts."""
    view = memoryview(data)
    while view:
        written = stream.write(view)
        view = view[written if written is not None else len(view) :]


def _read_exact(stream: BinaryIO, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise WireClosed("pipe closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(stream: BinaryIO) -> tuple[dict[str, Any], Arrays]:
    (size,) = _HEADER.unpack(_read_exact(stream, _HEADER.size))
    header = json.loads(_read_exact(stream, size))
    arrays: Arrays = {}
    for name, dtype, shape in header.pop("arrays", []):
        dt = np.dtype(dtype)
        count = int(np.prod(shape)) if shape else 1
        arrays[name] = np.frombuffer(_read_exact(stream, count * dt.itemsize), dtype=dt).reshape(shape).copy()
    return header, arrays


class _Capture:
    """Redirects file descriptors 1 and 2 to a temporary file for one request; ``text`` is what was printed."""

    def __enter__(self) -> _Capture:
        sys.stdout.flush()
        sys.stderr.flush()
        self._file = tempfile.TemporaryFile()
        self._saved = (os.dup(1), os.dup(2))
        os.dup2(self._file.fileno(), 1)
        os.dup2(self._file.fileno(), 2)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        _LIBC.fflush(None)  # native code's buffered stdio (a compiler's C++ messages) into the capture too
        os.dup2(self._saved[0], 1)
        os.dup2(self._saved[1], 2)
        for fd in self._saved:
            os.close(fd)
        self._file.seek(0)
        self.text = _ANSI.sub("", self._file.read().decode(errors="replace"))
        self._file.close()


def serve(handlers: dict[str, Handler]) -> None:
    """Answer requests on stdin until it closes. The protocol writes to a private copy of stdout; fd 1 itself
    goes to stderr between requests, so a stray print cannot corrupt a message."""
    inp = os.fdopen(os.dup(0), "rb")
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    while True:
        try:
            request, arrays = receive(inp)
        except WireClosed:
            return
        op = request.get("op", "")
        capture = _Capture()
        try:
            with capture:
                if op not in handlers:
                    raise ValueError(f"unknown op '{op}'; this worker has {sorted(handlers)}")
                result, out_arrays = handlers[op](request.get("args", {}), arrays)
            send(out, {"ok": True, "result": result, "log": capture.text}, out_arrays)
        except BaseException as exc:  # the toolchain may raise SystemExit on a refusal: report it, keep serving
            if isinstance(exc, KeyboardInterrupt):
                raise
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            send(out, {"ok": False, "error": detail, "log": getattr(capture, "text", "")})
