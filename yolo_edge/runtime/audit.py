"""The fourth runtime trigger, precision: the reference's "compare key outputs with an FP32 reference", while the
model runs. On a sample of frames (``runtime.audit_every``; ``audit_every_failed`` after a failed audit), on a worker
thread (a frame never waits for its audit: one that finds the worker busy is skipped, and counted; the audit may
lag), two audits:

- **units**: an accelerator unit's outputs against its FP32 twin's on the same inputs. An audit fails when the
  unit's error (1 - cosine) is over :data:`SLACK` times the error at its floor: the lowest cosine the deploy
  measured on its calibration and judging images (units.json's ``audit_floor``). ``audit_failures`` failed audits
  of the last ``audit_window`` are a ``precision`` event of the unit.
- **frames**: the frame's detections against the FP32 chain's on the same feeds, boxes kept as deploy counts them,
  judged against the loss rate the deploy proved (meta.json's ``boxes_kept``, its upper bound): the last
  ``audit_window`` audited frames' losses (the most improbable run ending at the newest), improbable at that rate,
  are a ``precision`` event of ``frames``.
  A unit's numerics can stay as close to FP32 as the proof saw while its boxes go (dark frames: scores near the
  threshold flip); this audit sees that.

The proof saw frames of some brightness and contrast (meta.json's ``lighting``: the range of its calibration and
judging images'); a frame far outside it (:class:`Lighting`) is where the proof did not look, and is audited as
often, and with as large a budget, as after a failed audit.

The event's action (``audit_action``): ``move_to_cpu`` runs the unit (a frames' event: every accelerator unit) on its
FP32 twin from then on, while the audits keep running the accelerator on those frames (off the path) and move it
back once they pass again (``recovered``); ``alert`` only says so. The audit's own FP32 sessions run on its one
thread, scheduled only where a CPU is idle (Linux SCHED_IDLE; elsewhere nice 10), its budget charged in the CPU
seconds it used.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from yolo_edge.backends.base import Executable, NpuError
from yolo_edge.backends.onnxruntime.backend import OnnxRuntimeBackend
from yolo_edge.core.codec import plain
from yolo_edge.core.config import RuntimeConfig

if TYPE_CHECKING:
    from yolo_edge.runtime.executor import EventLog, Unit

Tensors = Mapping[str, np.ndarray]
QUEUE = 8  # audits waiting for the worker (an audited frame offers one per accelerator unit and one of its boxes);
# one more is skipped, never waited for
FRAMES = "frames"  # the frames' audit, in figures and events (where a unit's name goes)
# An audit fails when the unit's error (1 - cosine) is over SLACK times the worst the deploy accepted: that worst is
# the largest of ~100 frames, which a frame like them exceeds about once in a hundred (benchmarks/audit.py).
SLACK = 2.0
# An error (1 - cosine) this small is arithmetic, not precision: a unit whose floor is 1 (an FP32 or FP16 graph on the
# accelerator) differs from its twin by reassociation alone, which twice nothing would call a failure.
NOISE = 1e-4


LIGHT_FACTOR = 2.0  # a frame is unlike the proof's when its luma mean or spread is under half its lowest or over
# twice its highest: night (x0.1 brightness) is, calibration-like frames (x0.85 to x1.15) are not (benchmarks/audit.py)


def light(image: np.ndarray) -> tuple[float, float]:
    """A BGR image's brightness and contrast: its luma's (BT.601) mean and standard deviation, every 8th pixel each
    way."""
    luma = image[::8, ::8].astype(np.float32) @ np.array([0.114, 0.587, 0.299], np.float32)
    return float(luma.mean()), float(luma.std())


@dataclass(frozen=True)
class Lighting:
    """The brightness and contrast ranges the proof saw (meta.json's ``lighting``), and whether a frame is far
    outside them: the frames the audit looks at more often."""

    mean: tuple[float, float]
    std: tuple[float, float]

    @classmethod
    def of(cls, images: Sequence[np.ndarray]) -> Lighting:
        seen = np.array([light(image) for image in images])
        lo, hi = seen.min(0), seen.max(0)
        return cls((float(lo[0]), float(hi[0])), (float(lo[1]), float(hi[1])))

    def unseen(self, image: np.ndarray) -> bool:
        """Whether ``image``'s brightness or contrast is under 1/:data:`LIGHT_FACTOR` of the lowest the proof saw
        or over :data:`LIGHT_FACTOR` times the highest."""
        m, s = light(image)
        lo_m, hi_m = self.mean
        lo_s, hi_s = self.std
        return not (lo_m / LIGHT_FACTOR <= m <= hi_m * LIGHT_FACTOR and lo_s / LIGHT_FACTOR <= s <= hi_s * LIGHT_FACTOR)

    def to_dict(self) -> dict[str, list[float]]:
        return {"mean": list(self.mean), "std": list(self.std)}


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


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), in logs (no scipy on a board): above the mean, the terms from k on until
    they no longer count; below it, one less the terms under k. A few terms either way where losses are few."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    log_p, log_q, head = math.log(p), math.log1p(-p), math.lgamma(n + 1)

    def term(i: int) -> float:
        return math.exp(head - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q)

    if k <= n * p:
        return max(0.0, 1.0 - sum(term(i) for i in range(k)))
    total = 0.0
    for i in range(k, n + 1):  # past the mode: each term smaller than the one before
        t = term(i)
        total += t
        if t <= total * 1e-17:
            break
    return min(1.0, total)


def loss_bound(lost: int, of: int, level: float = 0.975) -> float:
    """The Clopper-Pearson upper bound of a loss rate seen as ``lost`` of ``of``: the rate at which seeing
    ``lost`` or fewer has probability ``1 - level``."""
    lo, hi = lost / of, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if binomial_tail(lost + 1, of, mid) < level else (lo, mid)
    return hi


@dataclass
class FrameAudit:
    """The frames' audits: each audited frame's detections against the FP32 chain's (boxes kept), judged against
    the loss rate the deploy proved (its upper bound: ``rate``). A frame whose losses are improbable at that rate
    (p < :data:`FRAME_P`) has failed; the most improbable run of the last ``window`` audited frames' losses (one
    test per run ending at the newest, :meth:`scan`), improbable at p < :data:`EVENT_P`, is a ``precision`` event."""

    proven: tuple[int, int]  # the deploy's boxes kept, of the FP32 reference's, on its judging images
    window: int
    rate: float = 0.0
    frames: int = 0  # frames offered
    unseen: int = 0  # of them, unlike the frames the proof saw (Lighting)
    audits: int = 0
    failed: int = 0
    skipped: int = 0
    kept: int = 0
    of: int = 0
    parked: bool = False  # the accelerator units moved to their twins by a frames' event
    recent: deque[tuple[int, int]] = field(default_factory=deque)  # (kept, of) of the last ``window`` audits

    def __post_init__(self) -> None:
        kept, of = self.proven
        self.rate = loss_bound(of - kept, of)

    def to_dict(self) -> dict[str, object]:
        share = self.kept / self.of if self.of else None
        return plain(
            {
                "audits": self.audits,
                "failed": self.failed,
                "skipped": self.skipped,
                "frames": self.frames,
                "unseen": self.unseen,
                "boxes_kept": {"kept": self.kept, "of": self.of, "share": share},
                "proven": {"kept": self.proven[0], "of": self.proven[1], "loss_bound": self.rate},
                "on_cpu": self.parked,
            }
        )

    def record(self, kept: int, of: int) -> bool:
        """One audited frame's boxes: counted, in the window; whether it failed (its losses improbable)."""
        self.audits, self.kept, self.of = self.audits + 1, self.kept + kept, self.of + of
        failed = binomial_tail(of - kept, of, self.rate) < FRAME_P
        self.failed += failed
        self.recent.append((kept, of))
        while len(self.recent) > (PARKED_KEEP if self.parked else self.window):
            self.recent.popleft()
        return failed

    def scan(self) -> tuple[float, float, str]:
        """The window's most improbable run of losses ending at the newest audit, at the proven rate: its p, that
        p times the runs tried (each a test), and what to say of it. A run, not the whole window: losses that began
        a few audits ago are not diluted by the frames before them."""
        best, lost, of, runs = 1.0, 0, 0, 0
        k = n = 0
        for kept_i, of_i in reversed(self.recent) if not self.parked else ():  # parked: suspect until passing
            k, n = k + of_i - kept_i, n + of_i
            if of_i:
                runs += 1
                p = binomial_tail(k, n, self.rate)
                if p < best:
                    best, lost, of = p, k, n
        return (
            best,
            min(1.0, best * max(runs, 1)),
            (
                f"{lost} of the FP32 chain's {of} boxes lost over recent audited frames "
                f"(p = {best:.2g} at the proven loss rate's bound {self.rate:.2%}, {runs} runs tried)"
            ),
        )

    def passing(self) -> str | None:
        """What says the accelerator is back, if anything does: the newest audits (while parked, more than a
        window's, up to :data:`PARKED_KEEP`) whose boxes bound the loss rate (at 97.5 %) under :meth:`tolerance`:
        enough boxes kept to say so, not just too few boxes to say it is not."""
        tol, kept, of = self.tolerance(), 0, 0
        for i, (kept_i, of_i) in enumerate(reversed(self.recent)):
            kept, of = kept + kept_i, of + of_i
            # the loss rate's upper bound under tol: at tol, losing this few is improbable (p <= 2.5 %)
            if i + 1 >= self.window and of and 1.0 - binomial_tail(of - kept + 1, of, tol) <= 0.025:
                return f"{kept} of the FP32 chain's {of} boxes kept over the last {i + 1} audited frames"
        return None

    def tolerance(self) -> float:
        """The loss rate a parked accelerator must be shown under to come back: 3x the proven bound, at least 5 %."""
        return max(3 * self.rate, 0.05)


PARKED_KEEP = 1000  # audits a parked accelerator's recovery may look back over (a sparse scene needs many)
FRAME_P = 0.05  # a frame's losses this improbable at the proven rate: failed, audited more often
EVENT_P = 1e-3  # the window's most improbable run of losses this improbable (times the runs tried): an event


class Twins:
    """The audit's own FP32 sessions of the units, compiled on first use on the worker's one thread; the seconds
    of the worker's CPU spent compiling them (``clock``; the budget does not charge them)."""

    def __init__(self, units: Sequence[Unit], clock: Callable[[], float]) -> None:
        self.units, self.clock = list(units), clock
        self.compile_s = 0.0
        self._built: dict[str, Executable] = {}
        self._last: dict[tuple[str, bool], tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = {}

    def of(self, unit: Unit) -> Executable:
        if unit.name not in self._built:
            assert unit.graph is not None, f"unit {unit.name} keeps no FP32 graph to audit against"
            t0 = self.clock()
            self._built[unit.name] = OnnxRuntimeBackend(threads=1).compile(unit.graph, "fp32")
            self.compile_s += self.clock() - t0
        return self._built[unit.name]

    def run(self, unit: Unit, ins: dict[str, np.ndarray], accelerator: bool) -> dict[str, np.ndarray]:
        """``unit`` on ``ins``, its accelerator's (``accelerator``, where it has one) or its FP32 twin: what its
        last run of the same kind on these very arrays put out, if that was the last (a frame's unit audit and its
        frames' audit share the first units' runs), else run now."""
        key = (unit.name, accelerator and unit.npu is not None)
        last = self._last.get(key)
        if last is not None and last[0].keys() == ins.keys() and all(last[0][n] is ins[n] for n in ins):
            return last[1]
        outs = unit.npu.run(ins) if key[1] and unit.npu is not None else self.of(unit).run(ins)
        self._last[key] = (ins, outs)
        return outs

    def chain(self, feeds: dict[str, np.ndarray], accelerator: bool) -> dict[str, np.ndarray]:
        """Every unit in order on ``feeds``: the accelerator's where it has one (``accelerator``), else the FP32
        twin; every tensor."""
        tensors = dict(feeds)
        for unit in self.units:
            tensors.update(self.run(unit, {n: tensors[n] for n in unit.input_names}, accelerator))
        return tensors


def _close_at_exit(ref: weakref.ref[Worker]) -> None:
    worker = ref()
    if worker is not None:
        worker.close()


class Worker:
    """The audits' one thread, scheduled only where a CPU is idle (Linux SCHED_IDLE; elsewhere nice 10), within a
    share of a core (``budget()``, read at each use: it grows the moment frames turn suspect) charged in the CPU
    seconds its jobs used (``cpu_clock``, less ``uncharged()``'s growth: a twin's compile is once). A job that finds
    the queue full is skipped (the caller counts it); one put off by the budget is owed, and due on the next frame."""

    def __init__(
        self,
        budget: Callable[[], float],
        clock: Callable[[], float],
        cpu_clock: Callable[[], float],
        uncharged: Callable[[], float],
    ) -> None:
        self.budget, self.clock, self.cpu_clock, self.uncharged = budget, clock, cpu_clock, uncharged
        self._rest = (0.0, 0.0)  # when the jobs since the worker last rested began, their CPU seconds
        self._owed: dict[str, bool] = {}
        self._queued = -1  # the frame of the last job queued
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=QUEUE)
        self._thread: threading.Thread | None = None
        self._closing = False
        self._lock = threading.Lock()

    def due(self, key: str, frame: int, every: int) -> bool:
        """``key``'s audit on every ``every``-th frame from the ``every``-th on (not the first: a one-image predict
        exits without waiting on one), while the worker is within its budget and has no job of an earlier frame left
        (its cost is not known before it ran; one frame's audits share work); one put off is owed, and taken on the
        first frame after."""
        with self._lock:
            owed = self._owed.pop(key, False) or (frame + 1) % every == 0
            busy = self._jobs.unfinished_tasks > 0 and self._queued != frame
            if owed and (busy or self.clock() < self._free_at()):
                self._owed[key] = True
                return False
            return owed

    def put(self, frame: int, job: Callable[[], None]) -> bool:
        """Queue ``frame``'s ``job`` (the thread started on the first), or say it was skipped (never wait)."""
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            return False
        with self._lock:
            self._queued = frame
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="yolo-edge-audit", daemon=True)
                self._thread.start()
                # an interpreter that exits under a running audit aborts in the runtime's native code: stop it first
                atexit.register(_close_at_exit, weakref.ref(self))
        return True

    def drain(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the jobs queued so far."""
        deadline = time.monotonic() + timeout_s
        while self._jobs.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)

    def close(self) -> None:
        """Drop the jobs not started, wait for the one running (native code cannot be interrupted)."""
        if self._thread is not None:
            self._closing = True
            with contextlib.suppress(queue.Full):
                self._jobs.put(None, timeout=1.0)
            self._thread.join(timeout=30.0)

    def _free_at(self) -> float:
        """When the next job may start: the CPU seconds of the jobs since the worker last rested, over the budget
        now, after they began."""
        start, spent = self._rest
        return start + spent / self.budget()

    def _work(self) -> None:
        try:  # Linux: this thread runs only on a CPU nothing else wants (pid 0: the calling thread)
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except (OSError, AttributeError):  # elsewhere: a lower priority, where the OS has one per thread
            with contextlib.suppress(OSError, AttributeError):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        while (job := self._jobs.get()) is not None:
            if not self._closing:
                t0, c0, once = self.clock(), self.cpu_clock(), self.uncharged()
                job()
                # rest in proportion to the CPU the job used, not to the time it waited for one at its priority
                spent = self.cpu_clock() - c0 - (self.uncharged() - once)
                with self._lock:
                    start, used = self._rest
                    self._rest = (t0, spent) if t0 >= self._free_at() else (start, used + spent)
            self._jobs.task_done()


class Auditor:
    """The audit worker of one executor: ``offer`` after a unit's run, ``offer_frame`` after a frame's
    detections; ``close`` with the executor. Its twins are FP32 sessions of its own, on one thread (the worker's,
    idle-scheduled): the frames' sessions and their thread pools are not shared with the audit."""

    def __init__(
        self,
        cfg: RuntimeConfig,
        events: EventLog,
        units: Sequence[Unit],
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self.cfg = cfg
        self._failing = False  # the last unit audit failed (or a unit is moved): a larger budget
        self._suspect = False  # the frames' audits: a run of losses improbable at p < FRAME_P, or parked
        self._shifted = False  # the last frame offered was unlike the proof's (Lighting)
        self.lighting: Lighting | None = None  # set by ``prove``: what the proof saw
        self.events = events
        self.chain_units = list(units)
        self.units: dict[str, UnitAudit] = {}
        self.frames: FrameAudit | None = None  # set by ``prove``: a bundle that stores what its deploy proved
        self.twins = Twins(units, cpu_clock)
        self.worker = Worker(self._budget, clock, cpu_clock, lambda: self.twins.compile_s)
        self._lock = threading.Lock()

    def prove(self, kept: int, of: int, lighting: Lighting | None) -> None:
        """The deploy's boxes kept of the FP32 reference's (what the frames' audits judge against) and the lighting
        of the frames it saw (a bundle older than it stores none: no frame is then unlike the proof's)."""
        if of > 0 and any(u.npu is not None for u in self.chain_units):
            self.frames = FrameAudit((kept, of), self.cfg.audit_window)
            self.lighting = lighting

    def figures(self, wait_s: float = 0.0) -> dict[str, dict[str, Any]]:
        """Each audited unit's figures and the frames' (after waiting up to ``wait_s`` for the audits offered)."""
        self.worker.drain(wait_s)
        with self._lock:
            found = {name: a.to_dict() for name, a in self.units.items()}
            return found if self.frames is None else {**found, FRAMES: self.frames.to_dict()}

    def offer(
        self, unit: Unit, frame: int, feeds: dict[str, np.ndarray], outs: dict[str, np.ndarray], npu: bool
    ) -> None:
        """A unit's run of ``frame``: audited if it is due (``npu``: ``outs`` are the accelerator's; else they are
        the CPU twin's of a unit the audit moved there, and the audit runs the accelerator to probe it)."""
        if unit.audit_floor is None or not self.cfg.audit_every or (not npu and not unit.precision_parked):
            return
        with self._lock:
            a = self.units.setdefault(unit.name, UnitAudit(unit.audit_floor, self.cfg.audit_window))
            failing = a.on_cpu or bool(a.recent and not a.recent[-1]) or self._shifted
            if not self.worker.due(unit.name, frame, self._every(failing)):
                return
            if not self.worker.put(frame, lambda: self._unit_job(frame, unit, feeds, outs, npu)):
                a.skipped += 1

    def offer_frame(self, frame: int, image: np.ndarray, boxes: Callable[[bool], tuple[int, int]]) -> None:
        """A frame's detections, audited if due (more often where ``image``, the frame as the network sees it
        without padding, is unlike the proof's): ``boxes(parked)`` runs the other chain (the FP32 twins', or the
        accelerator's while a frames' event has parked it) and returns the reference's boxes kept and their
        number."""
        f = self.frames
        if f is None or not self.cfg.audit_every:
            return
        unseen = self.lighting is not None and self.lighting.unseen(image)
        with self._lock:
            f.frames, f.unseen, self._shifted = f.frames + 1, f.unseen + unseen, unseen
            if not self.worker.due(FRAMES, frame, self._every(self._suspect or self._shifted)):
                return
            if not self.worker.put(frame, lambda: self._frame_job(frame, boxes)):
                f.skipped += 1

    def drain(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the audits offered so far (a run's end, before its figures are read)."""
        self.worker.drain(timeout_s)

    def close(self) -> None:
        """Drop the audits not started, wait for the one running."""
        self.worker.close()

    def _every(self, failing: bool) -> int:
        return self.cfg.audit_every_failed if failing else self.cfg.audit_every

    def _budget(self) -> float:
        """The worker's share of a core: ``audit_budget``, and as many times more while frames are suspect as audits
        are then more frequent (``audit_every / audit_every_failed``)."""
        cfg = self.cfg
        more = self._failing or self._suspect or self._shifted
        return min(1.0, cfg.audit_budget * (cfg.audit_every / cfg.audit_every_failed if more else 1.0))

    def _unit_job(
        self, frame: int, unit: Unit, feeds: dict[str, np.ndarray], outs: dict[str, np.ndarray], npu: bool
    ) -> None:
        assert unit.npu is not None  # only accelerator units are audited
        try:
            got, want = (outs, self.twins.run(unit, feeds, False)) if npu else (self.twins.run(unit, feeds, True), outs)
        except NpuError:  # the accelerator failing its probe: not back yet
            got, want = None, outs
        cos, err = (-1.0, float("inf")) if got is None else outputs_cosine(got, want)
        self._judge(frame, unit, cos, err)

    def _frame_job(self, frame: int, boxes: Callable[[bool], tuple[int, int]]) -> None:
        f = self.frames
        assert f is not None
        try:
            kept, of = boxes(f.parked)
        except NpuError:  # the accelerator failing its probe: a frame lost
            kept, of = 0, 1
        with self._lock:
            f.record(kept, of)
            p, corrected, shown = f.scan()
            self._suspect = f.parked or corrected < FRAME_P  # parked: probed as often as a suspect accelerator is
            if f.parked:
                back = f.passing()
                if back is not None:
                    f.parked = False
                    f.recent.clear()
                    for unit in self.chain_units:  # but those a units' event moved
                        own = self.units.get(unit.name)
                        unit.precision_parked = own is not None and own.on_cpu
                    self.events.add(frame, FRAMES, "recovered", "move_to_npu", f"frames' audits pass again: {back}")
                return
            if corrected >= EVENT_P:
                return
            moved = self.cfg.audit_action == "move_to_cpu"
            f.recent.clear()
            if moved:
                f.parked = self._suspect = True
                for unit in self.chain_units:
                    unit.precision_parked = unit.precision_parked or unit.npu is not None
            self.events.add(frame, FRAMES, "precision", "move_to_cpu" if moved else "alert", shown)

    def _judge(self, frame: int, unit: Unit, cos: float, err: float) -> None:
        cfg = self.cfg
        with self._lock:
            a = self.units[unit.name]
            ok = 1.0 - cos <= max(SLACK * (1.0 - a.floor), NOISE)
            a.audits, a.failed = a.audits + 1, a.failed + (not ok)
            self._failing = not ok or a.on_cpu
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
