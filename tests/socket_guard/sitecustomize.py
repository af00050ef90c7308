"""A socket guard for a process under test (on its PYTHONPATH, Python imports this at start): every DNS lookup of
a name other than localhost and every connection beyond loopback is refused and written, with its stack, to
``$YOLO_EDGE_GUARD_LOG``: a tool that deploys a user's private model must send nothing anywhere."""

import os
import socket
import traceback

_LOG = os.environ["YOLO_EDGE_GUARD_LOG"]
_getaddrinfo, _connect = socket.getaddrinfo, socket.socket.connect


def _local(host: object) -> bool:
    text = host.decode() if isinstance(host, bytes) else str(host or "")
    return text in ("", "localhost", "::1", "0.0.0.0") or text.startswith("127.")


def _note(what: str, target: object) -> None:
    with open(_LOG, "a") as f:
        f.write(f"{what} {target!r}\n{''.join(traceback.format_stack()[:-2])}\n")


def getaddrinfo(host, *args, **kwargs):  # type: ignore[no-untyped-def]
    if not _local(host):
        _note("dns", host)
        raise socket.gaierror(socket.EAI_NONAME, "refused by the test's socket guard")
    return _getaddrinfo(host, *args, **kwargs)


def connect(self, address):  # type: ignore[no-untyped-def]
    if self.family in (socket.AF_INET, socket.AF_INET6) and not _local(address[0]):
        _note("connect", address)
        raise OSError("refused by the test's socket guard")
    return _connect(self, address)


socket.getaddrinfo = getaddrinfo
socket.socket.connect = connect
