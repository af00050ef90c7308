"""Vendor NPU toolchains in their own pinned environments, driven through a worker process.

A vendor compiler pins an old stack (rknn-toolkit2 2.5.0: numpy<=1.26.4, onnx<=1.18, torch<=2.4) that
cannot share yolo-edge's environment. A backend's spec names its :class:`~yolo_edge.core.registry.Toolchain` (pinned
install steps and a worker module in the vendor's folder, standard library, numpy and the toolchain only:
``yolo_edge/backends/rknn/worker.py``); ``install_toolchain`` builds the environment once per toolchain version in
the user's cache, and :class:`Worker` runs the worker module in it and talks to it over pipes (``wire``, which the
worker imports from the folder it is given as its argument).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from yolo_edge.core.codec import dumps
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.registry import Toolchain, toolchains
from yolo_edge.toolchains.worker import Reply, Worker, WorkerCrashed, WorkerError

__all__ = [
    "Reply",
    "ToolchainStatus",
    "Worker",
    "WorkerCrashed",
    "WorkerError",
    "get_toolchain",
    "install_toolchain",
    "toolchain_status",
]

_COMPLETE = ".complete"  # written last by install: an environment without it is partial


def get_toolchain(name: str) -> Toolchain:
    """The registered toolchain ``name`` (a backend's spec names it); a one-line error naming the known ones."""
    known = toolchains()
    try:
        return known[name]
    except KeyError:
        raise YoloEdgeError(f"unknown toolchain '{name}'; known: {', '.join(known)}") from None


@dataclass(frozen=True)
class ToolchainStatus:
    toolchain: Toolchain
    installed: bool
    usable: bool
    detail: str  # the versions it reports, or why it cannot be used and how to fix that


def toolchain_status(tc: Toolchain, probe: bool = True, worker: Worker | None = None) -> ToolchainStatus:
    """Whether ``tc`` is installed and (``probe``) answers: ``worker`` (a backend's, which keeps it running; else
    one started for the question and closed) is asked its versions."""
    if not (tc.env_dir / _COMPLETE).is_file():
        partial = " (a partial install is there)" if tc.env_dir.exists() else ""
        return ToolchainStatus(tc, False, False, f"{tc.name} {tc.version} not installed{partial}; {tc.install_hint}")
    if not probe:
        return ToolchainStatus(tc, True, True, f"installed in {tc.env_dir}")
    asked = worker or Worker(tc)
    try:
        versions = asked.call("hello", timeout_s=120).result
    except (WorkerCrashed, WorkerError) as exc:
        return ToolchainStatus(
            tc, True, False, f"installed in {tc.env_dir} but does not start ({exc}); reinstall with --force"
        )
    finally:
        if worker is None:
            asked.close()
    shown = ", ".join(f"{k} {v}" for k, v in versions.items())
    return ToolchainStatus(tc, True, True, f"{shown}; in {tc.env_dir}")


def _hello(tc: Toolchain) -> dict[str, str]:
    """The versions a fresh worker of ``tc`` reports; the worker is closed after."""
    worker = Worker(tc)
    try:
        return dict(worker.call("hello", timeout_s=300).result)
    finally:
        worker.close()


def _find_python(tc: Toolchain, python: str | None) -> str:
    """An interpreter of the toolchain's Python version: ``python``, this one, or ``python<X.Y>`` on PATH."""
    candidates = [python] if python else [sys.executable, shutil.which(f"python{tc.python}")]
    for cand in candidates:
        if not cand:
            continue
        try:
            out = subprocess.run(
                [cand, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except OSError:
            continue
        if out.returncode == 0 and out.stdout.strip() == tc.python:
            return cand
    raise YoloEdgeError(
        f"{tc.name} {tc.version} needs Python {tc.python} (its wheels are built for it) and none was found"
        f"{f' at {python}' if python else ''}; install python{tc.python} or pass --python /path/to/python{tc.python}"
    )


_PIP_PROGRESS = ("Collecting ", "Installing collected packages", "Successfully installed")


def _pip(env_python: Path, args: tuple[str, ...], log: list[str], tmp: Path, say: Callable[[str], None]) -> None:
    """pip install ``args`` with its temporary folders (GBs of wheels) in ``tmp``, which the caller removes even
    when the install is interrupted (pip killed by Ctrl-C leaves its own behind in TMPDIR). Its progress (each
    package it collects, then the install) is said as it comes: a toolchain takes minutes."""
    cmd = [str(env_python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input", *args]
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONUNBUFFERED": "1"}
    out: list[str] = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.append(line)
            if line.startswith(_PIP_PROGRESS):
                say(f"  {line.strip()[:150]}")
    log.append("".join(out))
    if proc.returncode != 0:
        lines = [ln for ln in out if ln.strip() and "WARNING" not in ln]
        last = lines[-1].strip() if lines else "no output"
        raise YoloEdgeError(f"pip install {' '.join(args)} failed (exit {proc.returncode}): {last}")


def install_toolchain(
    name: str, python: str | None = None, force: bool = False, say: Callable[[str], None] = print
) -> ToolchainStatus:
    """Build ``name``'s pinned environment (reused when complete, unless ``force``); returns its status.

    A failed install leaves no environment that looks complete: the marker file is written last, and the
    folder of a failed attempt is removed."""
    tc = get_toolchain(name)
    if (tc.env_dir / _COMPLETE).is_file() and not force:
        return toolchain_status(tc)
    interpreter = _find_python(tc, python)
    if tc.env_dir.exists():
        shutil.rmtree(tc.env_dir)
    tc.env_dir.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    log: list[str] = []
    pip_tmp = Path(tempfile.mkdtemp(prefix=f".{tc.name}-pip-", dir=tc.env_dir.parent))
    try:
        subprocess.run([interpreter, "-m", "venv", str(tc.env_dir)], check=True, capture_output=True)
        for k, step in enumerate(tc.steps, 1):
            say(f"{tc.name}: step {k}/{len(tc.steps)}: pip install {' '.join(step)}")
            _pip(tc.python_path, step, log, pip_tmp, say)
        versions = _hello(tc)
    except BaseException as exc:
        shutil.rmtree(tc.env_dir, ignore_errors=True)
        if isinstance(exc, subprocess.CalledProcessError):
            raise YoloEdgeError(f"{interpreter} -m venv {tc.env_dir} failed: {exc.stderr.decode().strip()}") from None
        if isinstance(exc, WorkerCrashed | WorkerError):
            raise YoloEdgeError(f"{tc.name} installed but its worker does not start: {exc}") from None
        raise
    finally:
        shutil.rmtree(pip_tmp, ignore_errors=True)
    seconds = time.monotonic() - t0
    size = sum(p.stat().st_size for p in tc.env_dir.rglob("*") if p.is_file() and not p.is_symlink())
    record = {"versions": versions, "install_s": seconds, "bytes": size, "python": interpreter}
    (tc.env_dir / _COMPLETE).write_text(dumps(record))
    say(f"{tc.name}: installed in {seconds:.0f} s, {size / 2**30:.1f} GiB, in {tc.env_dir}")
    return toolchain_status(tc)
