"""Entry point of the ``yolo-edge`` console script.

Every way a command can end is one line on stderr and a documented exit code: 0 success, 1 a verdict
that fails (deploy, check, plan --strict), 2 bad input (a :class:`YoloEdgeError` or a bad argument),
3 a bug in yolo-edge (its traceback, and a request to report it), 4 ``check`` undecided (a verdict within the
machine's noise: neither passed nor failed), 130 interrupted (Ctrl-C), 141 the reader
of stdout went away (``yolo-edge devices --json | head``: nothing more is said), 143 terminated (SIGTERM).
An interrupt or SIGTERM unwinds the command like an exception, so temporary folders are removed and no
half-written bundle is left.
"""

from __future__ import annotations

import argparse
import atexit
import errno
import io
import os
import select
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from types import FrameType
from typing import NoReturn

from yolo_edge.cli import bench, check, deploy, devices, events, export, plan, run, split, sweep, toolchain, val
from yolo_edge.core.errors import InternalError, YoloEdgeError
from yolo_edge.core.files import printable
from yolo_edge.core.version import __version__

SUBCOMMANDS = (export, split, plan, deploy, sweep, run, events, val, bench, check, devices, toolchain)

# storage faults: what the user can do about each (the command has already removed what it had half-written)
STORAGE_FAULTS = {
    errno.ENOSPC: "free space there, or point TMPDIR / --out / YOLO_EDGE_CACHE elsewhere, and run it again",
    errno.EDQUOT: "your disk quota is used up there; free space or write elsewhere",
    errno.EROFS: "that file system is read-only; write elsewhere",
    errno.EBUSY: "it is in use or a mount point; name a folder inside it",
    errno.EACCES: "no permission to write there; write elsewhere",
    errno.EPERM: "no permission to write there; write elsewhere",
    errno.EFBIG: "a file there would exceed the file-size limit (ulimit -f); write elsewhere",
    errno.ENAMETOOLONG: "a name in that path is longer than the file system takes (255 bytes); use a shorter one",
}


ERROR_CHARS = 1000  # an error is one line: a file name's control characters shown as ?, a quoted value cut short


class Parser(argparse.ArgumentParser):
    """argparse with its usage errors on one line (``yolo-edge deploy: error: argument --imgsz: ...``), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {printable(message, ERROR_CHARS)} (see {self.prog} --help)\n")


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that the command unwinds and cleans up."""


_SIGNALLED: list[int] = []  # the signals this command received: a C extension may turn the exception they raise
# into one of its own (torch's exporter re-raises a KeyboardInterrupt as a RuntimeError), which still means them


_OWNER: list[int] = []  # the pid that installed the handlers below: a forked child (a library's helper) inherits them


def _forked_child(signum: int) -> bool:
    """In a child forked while the handlers were installed (OpenVINO's telemetry sender), the signal does what it
    would have done there: ends the child, without a traceback or this command's cleanup."""
    if _OWNER and os.getpid() != _OWNER[0]:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return True
    return False


def _terminate(signum: int, _frame: FrameType | None) -> None:
    if _forked_child(signum):
        return
    _SIGNALLED.append(signum)
    raise Terminated(signum)


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    if _forked_child(signum):
        return
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


def _reader_gone() -> bool:
    """stdout is a pipe whose reader has closed it (``| head`` read what it wanted): poll says POLLERR."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by an object without a descriptor
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(event & select.POLLERR for _fd, event in poller.poll(0))


def _stdout_gone() -> int:
    """The reader of stdout left: say nothing more (stdout now goes nowhere, so no later flush fails) and end as
    a command killed by SIGPIPE does, 141."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


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


def _standard_streams() -> None:
    """A command started with stdin, stdout or stderr closed (``yolo-edge run ... >&-``) gets /dev/null there, as a
    daemon does: what it prints goes nowhere instead of failing at the exit-time flush, and the next file it opens
    (a bundle's) cannot take descriptor 1 and receive what a native library prints."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    # closed when Python started: None (descriptor 1 may since be a file an import opened, so not that)
    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  for the life of the process
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115


def main(argv: Sequence[str] | None = None) -> int:
    _standard_streams()
    for stream in (sys.stdout, sys.stderr):  # a file name is any bytes: one that is not UTF-8 prints, escaped
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    parser = build_parser()
    args = parser.parse_args(argv)
    _SIGNALLED.clear()
    _OWNER[:] = [os.getpid()]
    previous = signal.signal(signal.SIGTERM, _terminate), signal.signal(signal.SIGINT, _interrupt)
    try:
        return int(args.func(args))
    except (KeyboardInterrupt, Terminated):
        return _signalled(args.command)
    except YoloEdgeError as exc:
        if _SIGNALLED:  # a signal that an extension turned into an error we report as bad input
            return _signalled(args.command)
        print(f"yolo-edge {args.command}: error: {printable(exc, ERROR_CHARS)}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        if _SIGNALLED:
            return _signalled(args.command)
        if exc.errno == errno.EPIPE and _reader_gone():
            return _stdout_gone()
        if exc.errno not in STORAGE_FAULTS:
            return _internal(args.command)
        where = f" ({printable(exc.filename, ERROR_CHARS)})" if exc.filename else ""
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
    """The console script: ``main()``'s exit code. When ``main()`` returns, everything the command opened is closed
    and written; what would remain is the interpreter's teardown, in which the native runtimes' thread pools and
    static objects (OpenVINO, onnxruntime, OpenCV) are destroyed in an order none of them controls. Seen once in
    CI: a ``run`` that had delivered every frame and printed its summary aborted there ("terminate called without
    an active exception", SIGABRT instead of exit 0). So the threads are joined and the exit handlers run as at any
    exit (a library's helper thread finishes; toolchain workers and Ray stop), the streams are flushed, and the
    process ends with the code, skipping that teardown. After Ctrl-C (130) or SIGTERM (143) the command has already
    cleaned up (its temporary folders, Ray) and leaves at once, waiting for no thread (an accelerator call that
    hangs) and running no library's exit handler (Ray's, run again after a SIGTERM that landed in its shutdown, ended
    the process with 1); that also keeps CPython from killing itself with SIGINT at exit after a KeyboardInterrupt
    passed through code that C extensions evaluate, as torch's export does."""
    code = main()
    if code not in (130, 143):
        getattr(threading, "_shutdown")()  # noqa: B009  the interpreter's first step at exit; not in typeshed
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # the reader left after the last line: nothing more can be said to it
            pass
    os._exit(code)


if __name__ == "__main__":
    entry()
