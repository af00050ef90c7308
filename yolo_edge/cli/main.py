"""Entry point of the ``yolo-edge`` console script.

Every way a command can end is one line on stderr and a documented exit code: 0 success, 1 a verdict
that fails (deploy, check, plan --strict), 2 bad input (a :class:`YoloEdgeError` or a bad argument),
3 a bug in yolo-edge (its traceback, and a request to report it), 130 interrupted (Ctrl-C), 143 terminated
(SIGTERM). An interrupt or SIGTERM unwinds the command like
an exception, so temporary folders are removed and no half-written bundle is left.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import traceback
from collections.abc import Sequence
from types import FrameType
from typing import NoReturn

from yolo_edge.cli import bench, check, deploy, devices, export, plan, run, split, sweep, toolchain, val
from yolo_edge.errors import InternalError, YoloEdgeError
from yolo_edge.version import __version__

SUBCOMMANDS = (export, split, plan, deploy, sweep, run, val, bench, check, devices, toolchain)

# storage faults: what the user can do about each (the command has already removed what it had half-written)
STORAGE_FAULTS = {
    errno.ENOSPC: "free space there, or point TMPDIR / --out / YOLO_EDGE_CACHE elsewhere, and run it again",
    errno.EDQUOT: "your disk quota is used up there; free space or write elsewhere",
    errno.EROFS: "that file system is read-only; write elsewhere",
    errno.EBUSY: "it is in use or a mount point; name a folder inside it",
    errno.EACCES: "no permission to write there; write elsewhere",
    errno.EPERM: "no permission to write there; write elsewhere",
    errno.EFBIG: "a file there would exceed the file-size limit (ulimit -f); write elsewhere",
}


class Parser(argparse.ArgumentParser):
    """argparse with its usage errors on one line (``yolo-edge deploy: error: argument --imgsz: ...``), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that the command unwinds and cleans up."""


_SIGNALLED: list[int] = []  # the signals this command received: a C extension may turn the exception they raise
# into one of its own (torch's exporter re-raises a KeyboardInterrupt as a RuntimeError), which still means them


def _terminate(signum: int, _frame: FrameType | None) -> None:
    _SIGNALLED.append(signum)
    raise Terminated(signum)


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    _SIGNALLED.append(signum)
    raise KeyboardInterrupt


def _signalled(command: str) -> int:
    """The one line and exit code of a command ended by SIGINT (130) or SIGTERM (143)."""
    if _SIGNALLED and _SIGNALLED[0] == signal.SIGTERM:
        print(
            f"yolo-edge {command}: terminated (SIGTERM); temporary files removed, nothing half-written left",
            file=sys.stderr,
        )
        return 143
    print(f"yolo-edge {command}: interrupted; temporary files removed, nothing half-written left", file=sys.stderr)
    return 130


def _internal(command: str) -> int:
    """A bug (any exception but a user error, a storage fault or a signal): its traceback, and exit code 3."""
    traceback.print_exc()
    print(
        f"yolo-edge {command}: internal error, a bug in yolo-edge {__version__} and not in what you asked for: "
        "please report it with the traceback above",
        file=sys.stderr,
    )
    return InternalError.exit_code


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="yolo-edge", description="Split, place, run and prove YOLOv8 on edge NPU + CPU.")
    parser.add_argument("--version", action="version", version=f"yolo-edge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _SIGNALLED.clear()
    previous = signal.signal(signal.SIGTERM, _terminate), signal.signal(signal.SIGINT, _interrupt)
    try:
        return int(args.func(args))
    except (KeyboardInterrupt, Terminated):
        return _signalled(args.command)
    except YoloEdgeError as exc:
        if _SIGNALLED:  # a signal that an extension turned into an error we report as bad input
            return _signalled(args.command)
        print(f"yolo-edge {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        if _SIGNALLED:
            return _signalled(args.command)
        if exc.errno not in STORAGE_FAULTS:
            return _internal(args.command)
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"yolo-edge {args.command}: error: {exc.strerror}{where}: {STORAGE_FAULTS[exc.errno]}", file=sys.stderr)
        return 2
    except Exception:
        if _SIGNALLED:
            return _signalled(args.command)
        return _internal(args.command)
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])


def entry() -> NoReturn:
    """The console script: ``main()``'s exit code, 130 included. CPython kills itself with SIGINT at exit when a
    KeyboardInterrupt ever passed through code that C extensions evaluate (torch's export does), even one that
    was caught and handled; after an interrupt, everything is already cleaned up, so leave at once with 130."""
    code = main()
    if code == 130:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
