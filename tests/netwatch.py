"""A network watcher that sees native code: a command runs in a network namespace of its own (loopback only, so
nothing it tries can leave the machine, not even during the test) under ``strace``, which records every
``connect``/``sendto``/``sendmsg`` the process tree makes, from Python or from a runtime's C++ core alike.

:func:`beyond_loopback` reads the record: a DNS query (port 53, to any address: a resolver on 127.0.0.53 is still
a lookup of a name beyond the machine), a lookup through nscd or systemd-resolved's socket, or a connection or
datagram to an address that is not loopback. A refused attempt counts: the namespace refuses it, the code tried.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

TOOLS = ("strace", "unshare", "ip")
_CALL = re.compile(r"\b(connect|sendto|sendmsg|sendmmsg)\(")
_INET = re.compile(
    r'sa_family=AF_INET6?, sin6?_port=htons\((\d+)\).*?(?:inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)")'
)
_RESOLVERS = ("nscd", "systemd/resolve")


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def watched(
    cmd: Sequence[str], env: Mapping[str, str], trace: Path, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in a new user and network namespace (only ``lo``, brought up) under ``strace -f``, its network
    calls written to ``trace``."""
    strace = [
        "strace",
        "-f",
        "-qq",
        "--seccomp-bpf",
        "-e",
        "trace=connect,sendto,sendmsg,sendmmsg",
        "-e",
        "signal=none",
    ]
    inner = [*strace, "-o", str(trace), *cmd]
    script = 'ip link set lo up && exec "$@"'
    return subprocess.run(
        ["unshare", "--net", "--map-root-user", "sh", "-c", script, "sh", *inner],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _loopback(address: str) -> bool:
    return address.startswith("127.") or address in ("::1", "::ffff:127.0.0.1", "0.0.0.0", "::")


def beyond_loopback(trace: Path) -> list[str]:
    """The recorded calls that look a name up or reach beyond loopback, as strace wrote them."""
    found = []
    for line in trace.read_text(errors="replace").splitlines():
        if not _CALL.search(line):
            continue
        m = _INET.search(line)
        if "sun_path=" in line and any(p in line for p in _RESOLVERS):
            found.append(line)
        elif m and (m[1] == "53" or not _loopback(m[2] or m[3])):
            found.append(line)
    return found
