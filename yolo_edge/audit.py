"""The fourth runtime trigger, precision: the reference's "compare key outputs with an FP32 reference", while the
model runs. On a sample of frames (``runtime.audit_every``; ``audit_every_failed`` after a failed audit) an
accelerator unit's outputs are compared with its FP32 CPU twin's on the same inputs, on a worker thread: a frame
never waits for its audit (an audit that finds the worker busy is skipped, and counted), the audit may lag.

An audit fails when the unit's error (1 - the cosine of its outputs with the twin's) is more than :data:`SLACK`
times the error at its floor: the lowest cosine the deploy measured on its calibration and judging images
(units.json's ``audit_floor``), so a frame fails when it is clearly worse than anything the proof accepted, not at
an arbitrary constant. ``audit_failures`` failed audits of the last
``audit_window`` are a ``precision`` event. Its action (``audit_action``): ``move_to_cpu`` runs the unit's frames on
its CPU twin from then on, while the audits keep running the accelerator on those frames' inputs (off the path)
and move it back after ``recover_probes`` passing audits in a row (``recovered``); ``alert`` only says so. The
audit thread runs at a lower priority (nice 10), so its cost goes where the CPU is idle where it can.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from yolo_edge.backends.base import NpuError
from yolo_edge.codec import plain
from yolo_edge.config import RuntimeConfig

if TYPE_CHECKING:
    from yolo_edge.runtime import EventLog, Unit

Tensors = Mapping[str, np.ndarray]
QUEUE = 2  # audits waiting for the worker; one more is skipped (never a frame delayed)
# An audit fails when the unit's error (1 - cosine) is over SLACK times the worst the deploy accepted: that worst is
# the largest of ~100 frames, which a frame like them exceeds about once in a hundred (benchmarks/audit.py).
SLACK = 2.0


def outputs_cosine(got: Tensors, want: Tensors) -> tuple[float, float]:
    """The lowest cosine between ``got`` and ``want`` over their shared outputs, and the largest absolute error."""
    worst, err = 1.0, 0.0
    for name, w in want.items():
        g = np.asarray(got[name], dtype=np.float64).ravel()
        w64 = np.asarray(w, dtype=np.float64).ravel()
        norm = float(np.linalg.norm(g) * np.linalg.norm(w64))
        cos = float(g @ w64 / norm) if norm > 0 else float(np.array_equal(g, w64))
        worst, err = min(worst, cos), max(err, float(np.abs(g - w64).max(initial=0.0)))
    return worst, err


def audit_floors(units: Sequence[Unit], frames: Sequence[Tensors]) -> dict[str, float]:
    """Each accelerator unit's floor: its outputs' lowest cosine with its FP32 twin's over ``frames`` (each with the
    model's inputs), the units run in order as the executor runs them: an accelerator unit's inputs are what the
    units before it put out, its own outputs go on, its twin runs beside it on the same inputs."""
    seen: dict[str, list[float]] = {}
    for frame in frames:
        tensors = dict(frame)
        for unit in units:
            feeds = {n: tensors[n] for n in unit.input_names}
            if unit.npu is None:
                tensors.update(unit.cpu.run(feeds))
                continue
            outs = unit.npu.run(feeds)
            seen.setdefault(unit.name, []).append(outputs_cosine(outs, unit.cpu.run(feeds))[0])
            tensors.update(outs)
    return {name: min(cosines) for name, cosines in seen.items()}


@dataclass
class UnitAudit:
    """What the audits of one unit found (figures for the summary, the metrics and ``run --json``)."""

    floor: float
    window: int
    audits: int = 0
    failed: int = 0
    skipped: int = 0
    last_cosine: float | None = None
    min_cosine: float | None = None
    max_abs_error: float | None = None
    on_cpu: bool = False  # moved to the CPU by a precision event
    good: int = 0  # passing audits in a row while on the CPU
    recent: deque[bool] = field(default_factory=deque)

    def to_dict(self) -> dict[str, object]:
        return plain({k: v for k, v in self.__dict__.items() if k not in ("recent", "window", "good")})


class Auditor:
    """The audit worker of one executor: ``offer`` after a unit's run; ``close`` with the executor."""

    def __init__(self, cfg: RuntimeConfig, events: EventLog) -> None:
        self.cfg = cfg
        self.events = events
        self.units: dict[str, UnitAudit] = {}
        self._jobs: queue.Queue[tuple[int, Unit, dict[str, np.ndarray], dict[str, np.ndarray], bool] | None] = (
            queue.Queue(maxsize=QUEUE)
        )
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def figures(self) -> dict[str, dict[str, object]]:
        with self._lock:
            return {name: a.to_dict() for name, a in self.units.items()}

    def offer(
        self, unit: Unit, frame: int, feeds: dict[str, np.ndarray], outs: dict[str, np.ndarray], npu: bool
    ) -> None:
        """A unit's run of ``frame``: audited if it is due (``npu``: ``outs`` are the accelerator's; else they are
        the CPU twin's of a unit the audit moved there, and the audit runs the accelerator to probe it)."""
        if unit.audit_floor is None or not self.cfg.audit_every or (not npu and not unit.precision_parked):
            return
        with self._lock:
            a = self.units.setdefault(unit.name, UnitAudit(unit.audit_floor, self.cfg.audit_window))
            every = self.cfg.audit_every_failed if a.on_cpu or (a.recent and not a.recent[-1]) else self.cfg.audit_every
            if frame % every:
                return
            try:
                self._jobs.put_nowait((frame, unit, feeds, outs, npu))
            except queue.Full:
                a.skipped += 1
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="yolo-edge-audit", daemon=True)
                self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            with contextlib.suppress(queue.Full):
                self._jobs.put(None, timeout=1.0)
            self._thread.join(timeout=10.0)

    def _work(self) -> None:
        with contextlib.suppress(OSError, AttributeError):  # a lower priority where the OS has one per thread
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        while (job := self._jobs.get()) is not None:
            frame, unit, feeds, outs, npu = job
            try:
                got, want = (outs, unit.cpu.run(feeds)) if npu else (unit.npu.run(feeds), outs)  # type: ignore[union-attr]
            except NpuError:  # the accelerator failing its probe: not back yet
                got, want = None, outs
            cos, err = (-1.0, float("inf")) if got is None else outputs_cosine(got, want)
            self._judge(frame, unit, cos, err)
            self._jobs.task_done()

    def _judge(self, frame: int, unit: Unit, cos: float, err: float) -> None:
        cfg = self.cfg
        with self._lock:
            a = self.units[unit.name]
            ok = 1.0 - cos <= SLACK * (1.0 - a.floor)
            a.audits, a.failed = a.audits + 1, a.failed + (not ok)
            a.last_cosine, a.max_abs_error = cos, err if a.max_abs_error is None else max(a.max_abs_error, err)
            a.min_cosine = cos if a.min_cosine is None else min(a.min_cosine, cos)
            shown = f"cosine {cos:.5f} with the FP32 twin, floor {a.floor:.5f} (the lowest the deploy accepted)"
            if a.on_cpu:
                a.good = a.good + 1 if ok else 0
                if a.good >= cfg.recover_probes:
                    a.on_cpu, a.good, unit.precision_parked = False, 0, False
                    a.recent.clear()
                    why = f"{cfg.recover_probes} passing audits in a row; last {shown}"
                    self.events.add(frame, unit.name, "recovered", "move_to_npu", why)
                return
            a.recent.append(ok)
            while len(a.recent) > a.window:
                a.recent.popleft()
            if a.recent.count(False) < cfg.audit_failures:
                return
            moved = cfg.audit_action == "move_to_cpu"
            a.recent.clear()
            a.on_cpu = unit.precision_parked = moved
            self.events.add(
                frame,
                unit.name,
                "precision",
                "move_to_cpu" if moved else "alert",
                f"{cfg.audit_failures} of the last {cfg.audit_window} audits with over {SLACK:g}x the floor's error; "
                f"last {shown}",
            )
