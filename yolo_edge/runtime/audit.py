"""The fourth runtime trigger, precision: the reference's "compare key outputs with an FP32 reference", while the
model runs. On a sample of frames (``runtime.audit_every``; ``audit_every_failed`` after a failed audit), on a worker
thread (a frame never waits for its audit: one that finds the worker busy is skipped, and counted; the audit may
lag), two audits:

- **units**: an accelerator unit's outputs against its FP32 twin's on the same inputs. An audit fails when the
  unit's error (1 - cosine) is over :data:`SLACK` times the error at its floor: a low quantile of the cosines the
  deploy measured on its calibration and judging images (units.json's ``audit_floor``). ``audit_failures`` failed audits
  of the last ``audit_window`` are a ``precision`` event of the unit.
- **frames**: the frame's detections against the FP32 chain's on the same feeds, both ways: the FP32 boxes it keeps
  and its boxes the FP32 chain keeps (boxes lost, boxes added), as deploy counts them, each judged against the rate
  the deploy proved (meta.json's ``boxes_kept`` and ``boxes_added``, their upper bounds): the last ``audit_window``
  audited frames' losses or additions (the most improbable run ending at the newest), improbable at that rate, are a
  ``precision`` event of ``frames``.
  A unit's numerics can stay as close to FP32 as the proof saw while its boxes go (dark frames: scores near the
  threshold flip); this audit sees that.

The proof saw frames of some brightness and contrast (meta.json's ``lighting``: the range of its calibration and
judging images'); a frame far outside it (:class:`Lighting`) is where the proof did not look, and is audited as
often, and with as large a budget, as after a failed audit.

The event's action (``audit_action``): ``move_to_cpu`` runs the unit (a frames' event: every accelerator unit) on its
FP32 twin from then on, while the audits keep running the accelerator on those frames (off the path) and move it
back once they pass again (``recovered``); ``alert`` only says so. The audit's own FP32 sessions run on its one
thread at a lower priority (nice 10: on a saturated CPU it still runs), its budget charged in the CPU seconds it used.
Each audit's figures count the audits ``due`` by the schedule beside those done: an audit put off past the run's end
(a busy CPU, a full queue) lowers the trigger's coverage, and the run says so.
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
from typing import Any

import numpy as np

from yolo_edge.backends.base import Executable, NpuError
from yolo_edge.backends.onnxruntime.backend import OnnxRuntimeBackend
from yolo_edge.core.codec import plain
from yolo_edge.core.config import RuntimeConfig
from yolo_edge.runtime.events import EventLog
from yolo_edge.runtime.units import Unit

Tensors = Mapping[str, np.ndarray]
QUEUE = 8  # audits waiting for the worker (an audited frame offers one per accelerator unit and one of its boxes);
# one more is skipped, never waited for
FRAMES = "frames"  # the frames' audit, in figures and events (where a unit's name goes)
# An audit fails when the unit's error (1 - cosine) is over SLACK times the error at the unit's floor, the error that
# FLOOR_QUANTILE of the deploy's frames exceeded: a frame like them fails an audit at most that often, and an event
# needs audit_failures of audit_window audits to fail.
SLACK = 2.0
FLOOR_QUANTILE = 0.05
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
    """Each accelerator unit's floor: a low quantile (:data:`FLOOR_QUANTILE`, an observed value) of its outputs'
    cosines with its FP32 twin's over ``frames`` (each with the model's inputs), not their minimum, which one outlier
    frame sets (with :data:`SLACK` it would pass an accelerator far off); the units run in order as the executor
    runs them: an accelerator unit's inputs are what the units before it put out, its own outputs go on, its twin
    runs beside it on the same inputs."""
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
    return {name: float(np.quantile(cosines, FLOOR_QUANTILE, method="lower")) for name, cosines in seen.items()}


@dataclass
class UnitAudit:
    """What the audits of one unit found (figures for the summary, the metrics and ``run --json``)."""

    floor: float
    window: int
    due: int = 0  # audits the schedule called for: those not done (a busy CPU, a full queue) are its coverage
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


TAIL_SDS = 40.0  # terms further than this many standard deviations from the mean are below e^-800 of the largest


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), in logs (no scipy on a board): above the mean, the terms from k on; below
    it, one less the terms under k; in either case only those within :data:`TAIL_SDS` standard deviations of the
    mean (the rest do not count in a double), so the work is bounded by the spread, not by ``n``: a bundle's
    numbers cannot make it run for minutes."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    mean = n * p
    reach = TAIL_SDS * math.sqrt(mean * (1.0 - p)) + TAIL_SDS
    lo, hi = max(0, math.floor(mean - reach)), min(n, math.ceil(mean + reach))
    if k <= lo:
        return 1.0
    if k > hi:
        return 0.0
    first, last = (k, hi) if k > mean else (lo, k - 1)
    # log of each term from the first by the ratio of neighbours: t(i+1) / t(i) = (n - i) / (i + 1) * p / (1 - p)
    i = np.arange(first, last, dtype=np.float64)
    steps = np.log((n - i) / (i + 1)) + (math.log(p) - math.log1p(-p))
    log_first = (
        math.lgamma(n + 1) - math.lgamma(first + 1) - math.lgamma(n - first + 1)
        + first * math.log(p) + (n - first) * math.log1p(-p)
    )  # fmt: skip
    total = float(np.exp(log_first + np.concatenate(([0.0], np.cumsum(steps)))).sum())
    return min(1.0, total) if k > mean else max(0.0, 1.0 - total)


def loss_bound(lost: int, of: int, level: float = 0.975) -> float:
    """The Clopper-Pearson upper bound of a loss rate seen as ``lost`` of ``of``: the rate at which seeing
    ``lost`` or fewer has probability ``1 - level``."""
    lo, hi = lost / of, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if binomial_tail(lost + 1, of, mid) < level else (lo, mid)
    return hi


Seen = tuple[int, int, int, int]  # one audited frame: FP32 boxes kept, of FP32 boxes; the plan's boxes kept, of its


@dataclass
class FrameAudit:
    """The frames' audits: each audited frame's detections against the FP32 chain's, both ways: the FP32 boxes the
    frame keeps (boxes lost) and the frame's boxes the FP32 chain keeps (boxes added), each judged against the rate
    the deploy proved for it (its upper bound: ``rate``, ``rate_added``; a bundle that proved only the losses judges
    additions at their rate). A frame whose losses or additions are improbable at that rate (p < :data:`FRAME_P`)
    has failed; the most improbable run of the last ``window`` audited frames' (one test per run ending at the newest
    and per direction, :meth:`scan`), improbable at p < :data:`EVENT_P`, is a ``precision`` event."""

    proven: tuple[int, int]  # the deploy's boxes kept, of the FP32 reference's, on its judging images
    window: int
    proven_added: tuple[int, int] | None = None  # the deploy's boxes added, of the plan's (None: an older bundle)
    rate: float = 0.0
    rate_added: float = 0.0
    frames: int = 0  # frames offered
    unseen: int = 0  # of them, unlike the frames the proof saw (Lighting)
    due: int = 0  # audits the schedule called for: those not done (a busy CPU, a full queue) are its coverage
    audits: int = 0
    failed: int = 0
    skipped: int = 0
    kept: int = 0
    of: int = 0
    added: int = 0
    boxes: int = 0
    parked: bool = False  # the accelerator units moved to their twins by a frames' event
    recent: deque[Seen] = field(default_factory=deque)  # the last ``window`` audits

    def __post_init__(self) -> None:
        kept, of = self.proven
        self.rate = loss_bound(of - kept, of)
        self.rate_added = self.rate if self.proven_added is None else loss_bound(*self.proven_added)

    def to_dict(self) -> dict[str, object]:
        share = self.kept / self.of if self.of else None
        proven = {"kept": self.proven[0], "of": self.proven[1], "loss_bound": self.rate}
        if self.proven_added is not None:
            proven.update({"added": self.proven_added[0], "boxes": self.proven_added[1]})
        return plain(
            {
                "due": self.due,
                "audits": self.audits,
                "failed": self.failed,
                "skipped": self.skipped,
                "frames": self.frames,
                "unseen": self.unseen,
                "boxes_kept": {"kept": self.kept, "of": self.of, "share": share},
                "boxes_added": {"added": self.added, "of": self.boxes},
                "proven": {**proven, "added_bound": self.rate_added},
                "on_cpu": self.parked,
            }
        )

    def record(self, kept: int, of: int, matched: int = 0, boxes: int = 0) -> bool:
        """One audited frame: ``kept`` of the FP32 chain's ``of`` boxes, ``matched`` of its own ``boxes`` kept by
        the FP32 chain; counted, in the window; whether it failed (its losses or additions improbable)."""
        self.audits, self.kept, self.of = self.audits + 1, self.kept + kept, self.of + of
        self.added, self.boxes = self.added + boxes - matched, self.boxes + boxes
        failed = min(
            binomial_tail(of - kept, of, self.rate), binomial_tail(boxes - matched, boxes, self.rate_added)
        ) < FRAME_P  # fmt: skip
        self.failed += failed
        self.recent.append((kept, of, matched, boxes))
        while len(self.recent) > (PARKED_KEEP if self.parked else self.window):
            self.recent.popleft()
        return failed

    def scan(self) -> tuple[float, float, str]:
        """The window's most improbable run of losses or of additions ending at the newest audit, at the proven
        rate: its p, that p times the runs tried (each a test), and what to say of it. A run, not the whole window:
        losses that began a few audits ago are not diluted by the frames before them."""
        best, said, runs = 1.0, "", 0
        for direction, rate in ((0, self.rate), (2, self.rate_added)):
            k = n = 0
            for seen in reversed(self.recent) if not self.parked else ():  # parked: suspect until passing
                good, of_i = seen[direction], seen[direction + 1]
                k, n = k + of_i - good, n + of_i
                if of_i:
                    runs += 1
                    p = binomial_tail(k, n, rate)
                    if p < best:
                        best, said = p, _said(direction, k, n, p, rate)
        return best, min(1.0, best * max(runs, 1)), f"{said} ({runs} runs tried)"

    def passing(self) -> str | None:
        """What says the accelerator is back, if anything does: the newest audits (while parked, more than a
        window's, up to :data:`PARKED_KEEP`) whose boxes bound the loss rate and the rate of additions (at 97.5 %)
        under :meth:`tolerance`: enough boxes kept to say so, not just too few boxes to say it is not."""
        tol, kept, of, matched, boxes = self.tolerance(), 0, 0, 0, 0
        for i, (kept_i, of_i, matched_i, boxes_i) in enumerate(reversed(self.recent)):
            kept, of, matched, boxes = kept + kept_i, of + of_i, matched + matched_i, boxes + boxes_i
            # each rate's upper bound under tol: at tol, losing (adding) this few is improbable (p <= 2.5 %)
            if i + 1 >= self.window and of and _bounded(of - kept, of, tol) and _bounded(boxes - matched, boxes, tol):
                return (
                    f"{kept} of the FP32 chain's {of} boxes kept, {boxes - matched} of {boxes} boxes added, over the "
                    f"last {i + 1} audited frames"
                )
        return None

    def tolerance(self) -> float:
        """The rate a parked accelerator must be shown under to come back: 3x the proven bound, at least 5 %."""
        return max(3 * max(self.rate, self.rate_added), 0.05)


def _bounded(k: int, n: int, rate: float) -> bool:
    """``k`` events of ``n`` bound their rate under ``rate`` at 97.5 % (no boxes: nothing against it)."""
    return n == 0 or 1.0 - binomial_tail(k + 1, n, rate) <= 0.025


def _said(direction: int, k: int, n: int, p: float, rate: float) -> str:
    if direction == 0:
        return (
            f"{k} of the FP32 chain's {n} boxes lost over recent audited frames "
            f"(p = {p:.2g} at the proven loss rate's bound {rate:.2%})"
        )
    return (
        f"{k} of the accelerator's {n} boxes added (no FP32 box like them) over recent audited frames "
        f"(p = {p:.2g} at the proven rate's bound {rate:.2%})"
    )


def coverage(audit: Mapping[str, Any]) -> str:
    """What an audit's figures say of the trigger's coverage: nothing where every audit due was done."""
    due, done = int(audit.get("due", 0)), int(audit["audits"])
    if due <= done:
        return ""
    return (
        f" ({due - done} of {due} due not done: the CPU was too busy for the audit's share, coverage {done / due:.0%})"
    )


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


NICE = 10  # the audit thread's priority: it yields to the frames' threads, and still runs when they fill the CPU


class Worker:
    """The audits' one thread, at a lower priority (:data:`NICE`), within a share of a core (``budget()``, read at
    each use: it grows the moment frames turn suspect) charged in the CPU seconds its jobs used (``cpu_clock``, less
    ``uncharged()``'s growth: a twin's compile is once). A job that finds the queue full is skipped (the caller
    counts it); one put off by the budget is owed, and due on the next frame."""

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
        # a lower priority (Linux: per thread), not SCHED_IDLE: on a board whose CPU is saturated decoding streams an
        # idle-only thread never runs and the trigger would stop in silence; the budget bounds what it takes
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
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
    at a lower priority): the frames' sessions and their thread pools are not shared with the audit."""

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

    def prove(self, kept: tuple[int, int], added: tuple[int, int] | None, lighting: Lighting | None) -> None:
        """The deploy's boxes kept of the FP32 reference's and boxes added of the plan's (what the frames' audits
        judge against; an older bundle's proof has no additions) and the lighting of the frames it saw (a bundle
        older than it stores none: no frame is then unlike the proof's)."""
        if kept[1] > 0 and any(u.npu is not None for u in self.chain_units):
            self.frames = FrameAudit(kept, self.cfg.audit_window, added)
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
            every = self._every(failing)
            a.due += (frame + 1) % every == 0
            if not self.worker.due(unit.name, frame, every):
                return
            if not self.worker.put(frame, lambda: self._unit_job(frame, unit, feeds, outs, npu)):
                a.skipped += 1

    def offer_frame(self, frame: int, image: np.ndarray, boxes: Callable[[bool], Seen]) -> None:
        """A frame's detections, audited if due (more often where ``image``, the frame as the network sees it
        without padding, is unlike the proof's): ``boxes(parked)`` runs the other chain (the FP32 twins', or the
        accelerator's while a frames' event has parked it) and returns the FP32 boxes kept and their number, the
        accelerator's boxes the FP32 chain keeps and theirs."""
        f = self.frames
        if f is None or not self.cfg.audit_every:
            return
        unseen = self.lighting is not None and self.lighting.unseen(image)
        with self._lock:
            f.frames, f.unseen, self._shifted = f.frames + 1, f.unseen + unseen, unseen
            every = self._every(self._suspect or self._shifted)
            f.due += (frame + 1) % every == 0
            if not self.worker.due(FRAMES, frame, every):
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

    def _frame_job(self, frame: int, boxes: Callable[[bool], Seen]) -> None:
        f = self.frames
        assert f is not None
        try:
            seen = boxes(f.parked)
        except NpuError:  # the accelerator failing its probe: a frame lost
            seen = (0, 1, 0, 0)
        with self._lock:
            f.record(*seen)
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
