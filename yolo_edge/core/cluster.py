"""Ray, the engine of ``yolo-edge sweep`` and of sharded validation: started in this process on this machine by
default (no cluster to set up), or joined as a client of an existing cluster (``address``).

A local Ray advertises, besides the CPUs, the custom resource of every device usable here (a profile's
``node_resource``: ``rk3588`` where Rockchip's toolchain is installed), so a configuration that needs a device runs
only where it is, locally as on a lab's cluster, whose nodes advertise their own (``ray start --resources
'{"rk3588": 1}'``). The session ends with the command: a local Ray is shut down (no Ray process outlives it, Ctrl-C
included); a cluster is only disconnected from.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from yolo_edge.core.errors import YoloEdgeError

INSTALL = "pip install 'yolo-edge[ray]'"
# Ray refuses a client without the cluster's token with only a log line ("InvalidAuthToken") and a
# ConnectionError, so the error names both causes
JOIN_HINT = (
    "is it up, and does this machine hold the cluster's token? Ray's token authentication: "
    "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN, or the head's ~/.ray/auth_token copied here"
)


def ray_module() -> Any:
    """The ``ray`` package, or a one-line error saying how to get it."""
    try:
        import ray
    except ImportError:
        raise YoloEdgeError(f"this needs Ray, which is not installed: {INSTALL} (or --no-ray to run in turn)") from None
    return ray


@contextmanager
def ray_session(
    address: str | None, workers: int | None = None, resources: dict[str, float] | None = None
) -> Iterator[Any]:
    """Ray for the length of the block: a new local instance with ``workers`` CPUs (default: this machine's) and
    ``resources``, or the cluster at ``address``. Already initialised by the caller: used as it is."""
    ray = ray_module()
    if ray.is_initialized():
        yield ray
        return
    quiet = {"logging_level": logging.WARNING, "log_to_driver": False}
    if address:
        probe(address)
    # a local Ray's workers keep their temporary files in one folder of this session's, removed with it: a worker
    # killed mid-deploy (Ctrl-C, SIGTERM) leaves nothing in TMPDIR
    scratch = None if address else tempfile.mkdtemp(prefix="yolo-edge-ray-")
    handlers = _signal_handlers()
    try:
        if address:
            ray.init(address=address, **quiet)
        else:  # "local": a new instance even where RAY_ADDRESS names a cluster
            cpus = workers or os.cpu_count() or 1
            ray.init(
                address="local",
                num_cpus=cpus,
                resources=resources or {},
                include_dashboard=False,
                runtime_env={"env_vars": {"TMPDIR": str(scratch)}},
                **quiet,
            )
    except BaseException as exc:  # Ctrl-C while Ray starts too: nothing of this session's is left
        _restore(handlers)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        # Ray's refusals: a cluster that does not answer or take us, a local one that cannot start (its socket
        # paths under a TMPDIR longer than AF_UNIX allows are an OSError)
        if not isinstance(exc, ConnectionError | RuntimeError | ValueError | OSError):
            raise
        said = (str(exc).splitlines() or [""])[0]
        if not address:
            raise YoloEdgeError(f"cannot start a local Ray: {said}") from None
        raise YoloEdgeError(f"cannot join the Ray cluster at {address}: {said} ({JOIN_HINT})") from None
    _restore(handlers)  # Ray's SIGTERM handler dumps a C++ stack and aborts (134); yolo-edge's unwinds and cleans up
    try:
        yield ray
    finally:
        ray.shutdown()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _signal_handlers() -> list[Any]:
    return [signal.getsignal(s) for s in _SIGNALS]


def _restore(handlers: list[Any]) -> None:
    """The handlers the command had before Ray replaced them (only the main thread may set them)."""
    if threading.current_thread() is threading.main_thread():
        for sig, handler in zip(_SIGNALS, handlers):
            if handler is not None:
                signal.signal(sig, handler)


def gcs_endpoint(address: str) -> tuple[str, int] | None:
    """(host, port) of a cluster ``address`` (``host:port``, ``ray://host:port``); ``None`` for ``auto``, which is
    Ray's to resolve. A one-line error for anything else."""
    if address == "auto":
        return None
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise YoloEdgeError(f"expected host:port (the head's GCS port, 6379 by default), got {address!r}")
    return host.strip("[]"), int(port)


HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # and SETTINGS


def probe(address: str, timeout_s: float = 5.0) -> None:
    """A one-line error within ``timeout_s`` unless a Ray head answers at ``address``: something must accept the
    connection and answer the HTTP/2 preface with a SETTINGS frame, as Ray's GCS and client servers (gRPC) do. Ray
    itself retries a closed port, or a server of another protocol, for minutes before it gives up; this is called
    before any work (``deploy``, ``check``, ``val``, ``sweep``)."""
    endpoint = gcs_endpoint(address)
    if endpoint is None:
        return
    hint = "is the head up (`ray start --head`), and is this its address and port?"
    try:
        with socket.create_connection(endpoint, timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            try:
                sock.sendall(HTTP2_PREFACE)
                frame = sock.recv(9)
            except OSError as exc:
                frame = b""
                if not isinstance(exc, TimeoutError | ConnectionError):
                    raise
    except OSError as exc:
        raise YoloEdgeError(
            f"cannot join the Ray cluster at {address}: nothing answers there ({exc.strerror or exc}); {hint}"
        ) from None
    if len(frame) < 9 or frame[3] != 0x04:  # an HTTP/2 frame header whose type is SETTINGS
        raise YoloEdgeError(
            f"cannot join the Ray cluster at {address}: something answers there but it is not Ray (no gRPC answer "
            f"within {timeout_s:g} s); {hint}"
        )


def node_cpus(ray: Any) -> float:
    """The CPUs of the smallest node with any: what a configuration whose latency is measured holds, so that
    nothing shares the CPU it is timed on."""
    return min(
        (n["Resources"].get("CPU", 0.0) for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU")), default=1.0
    )


def has_resource(ray: Any, name: str) -> bool:
    """Some live node of the cluster advertises the custom resource ``name``."""
    return any(n["Alive"] and n["Resources"].get(name, 0) > 0 for n in ray.nodes())
