"""The client side of a toolchain worker: one process, started on the first call, restarted after a crash.

``Worker.call(op, args, arrays)`` sends one request and returns the :class:`Reply`. A refusal by the
toolchain (the worker answered ``ok: false``) is a :class:`WorkerError` carrying the toolchain's log; a
worker that died, closed its pipe or did not answer in time is a :class:`WorkerCrashed`, and the next call
starts a fresh worker (``generation`` counts the starts, so callers know to rebuild what the dead one held).
Calls are serialized: a worker runs one request at a time.
"""

from __future__ import annotations

import logging
import os
import selectors
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.registry import Toolchain
from yolo_edge.toolchains.wire import Arrays, WireClosed, receive, send

# a call still running says so every HEARTBEAT_S on this logger (deploy and plan show it as their progress): a
# vendor compiler's step can take many minutes (an Ethos-U plan took 22 in silence)
LOG = logging.getLogger("yolo_edge.toolchains")
HEARTBEAT_S = 60.0


class WorkerCrashed(RuntimeError):
    """The worker process died or stopped answering."""


class WorkerError(RuntimeError):
    """The toolchain refused the request; ``log`` is what it printed while trying."""

    def __init__(self, op: str, error: str, log: str) -> None:
        super().__init__(f"{op}: {error}")
        self.op, self.error, self.log = op, error, log


@dataclass
class Reply:
    result: dict[str, Any]
    arrays: Arrays = field(default_factory=dict)
    log: str = ""


class Worker:
    started: ClassVar[int] = 0  # worker processes this interpreter started (what a deploy's worker-count test reads)

    def __init__(self, toolchain: Toolchain) -> None:
        self.toolchain = toolchain
        self.generation = 0  # incremented at every start
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self.stderr_path = toolchain.env_dir / "worker.log"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def start(self) -> int:
        """Start the worker if it is not running; returns its ``generation``. Raises :class:`WorkerCrashed` once
        for a worker that died since the last call (the next call starts a fresh one)."""
        with self._lock:
            self._start()
            return self.generation

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is not None:
            if self._proc.poll() is None:
                return self._proc
            code = self._kill()
            raise WorkerCrashed(f"{self.toolchain.name} worker exited (code {code}) since its last answer")
        python = self.toolchain.python_path
        if not python.is_file():
            raise YoloEdgeError(
                f"{self.toolchain.name}: no environment at {python.parent.parent}; {self.toolchain.install_hint}"
            )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        env["PYTHONUNBUFFERED"] = "1"
        with open(self.stderr_path, "ab") as err:
            self._proc = subprocess.Popen(
                [str(python), "-I", str(self.toolchain.worker_path), str(Path(__file__).parent)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                bufsize=0,
                env=env,
            )
        self.generation += 1
        Worker.started += 1
        return self._proc

    def call(
        self, op: str, args: dict[str, Any] | None = None, arrays: Arrays | None = None, timeout_s: float = 600
    ) -> Reply:
        with self._lock:
            proc = self._start()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                send(proc.stdin, {"op": op, "args": args or {}}, arrays)  # type: ignore[arg-type]
                with selectors.DefaultSelector() as sel:
                    sel.register(proc.stdout, selectors.EVENT_READ)
                    started = time.monotonic()
                    while not sel.select(min(HEARTBEAT_S, max(0.0, started + timeout_s - time.monotonic()))):
                        waited = time.monotonic() - started
                        if waited >= timeout_s:
                            self._kill()
                            raise WorkerCrashed(
                                f"{self.toolchain.name} worker gave no answer to {op} in {timeout_s:.0f} s"
                            )
                        name, most = self.toolchain.name, timeout_s / 60
                        LOG.info(f"{name}: {op} still running ({waited / 60:.0f} min, at most {most:.0f})")
                header, out = receive(proc.stdout)  # type: ignore[arg-type]
            except (WireClosed, BrokenPipeError, OSError, ValueError) as exc:
                code = self._kill()
                raise WorkerCrashed(
                    f"{self.toolchain.name} worker exited (code {code}) during {op}"
                    + (f": {exc}" if not isinstance(exc, WireClosed | BrokenPipeError) else "")
                ) from None
        if not header.get("ok"):
            raise WorkerError(op, str(header.get("error", "")), str(header.get("log", "")))
        return Reply(header.get("result") or {}, {k: np.asarray(v) for k, v in out.items()}, str(header.get("log", "")))

    def _kill(self) -> int | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
        code = proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()
        return code

    def close(self) -> None:
        """Ask the worker to exit (it does when its stdin closes) and reap it."""
        with self._lock:
            proc, self._proc = self._proc, None
            if proc is None:
                return
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
