"""User errors versus bugs.

A :class:`YoloEdgeError` is a problem with what the user asked for (a missing file, a bad option, a model
that is not a YOLOv8 detector). The CLI prints its message on one line and exits with code 2. Anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations


class YoloEdgeError(Exception):
    """A user error: the message says what was wrong and how to fix it, on one line."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class InternalError(Exception):
    """A bug in yolo-edge, not in what the user asked for: the CLI prints the traceback, asks for a report and
    exits with code 3."""

    exit_code = 3
