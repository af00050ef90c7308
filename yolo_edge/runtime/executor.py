"""SplitExecutor: runs the placed units, hands boundary tensors over, times everything, and absorbs
the NPU's failures so that no frame is lost.

Per frame, an NPU unit that raises, exceeds ``unit_timeout_s`` or returns NaN/Inf is re-run on the
CPU in FP32 for that frame. A circuit breaker moves the whole graph to the CPU after K consecutive
NPU failures and lets one half-open probe through after a cool-down; a successful probe closes it.
Performance fallback uses hysteresis: a unit moves to the CPU after N consecutive frames slower
than ``slow_ratio`` times its CPU estimate, confirmed by timing the CPU twin on the Nth frame (a busy
machine slows both; the estimate is refreshed instead), and moves back after M consecutive good probes. Every
decision is a :class:`FallbackEvent` in a JSONL log.

Units are independently callable and thread-safe (``run_unit``), so a pipelined stream can run
different units of different frames in different threads.
"""

from __future__ import annotations

import queue
import statistics
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx

from yolo_edge.backends.base import Executable, NpuError, NpuTimeout, median_run_s
from yolo_edge.core.codec import dumps, plain
from yolo_edge.core.config import BOARD, Device, DeviceProfile, RuntimeConfig
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.devices.board import BoardCpu
from yolo_edge.devices.cost import transfer_time
from yolo_edge.model.graph import TensorInfo
from yolo_edge.runtime.audit import Auditor

Trigger = Literal[
    "unsupported_op", "memory", "performance", "runtime_error", "timeout", "nan", "precision", "recovered"
]
Action = Literal[
    "retry_cpu",
    "open_breaker",
    "close_breaker",
    "reopen_breaker",
    "move_to_cpu",
    "move_to_npu",
    "compile_on_cpu",
    "alert",
]


@dataclass(frozen=True)
class FallbackEvent:
    time: float
    frame: int
    unit: str
    trigger: Trigger
    action: Action
    detail: str = ""
    run: str = ""  # the run's id (EventLog.run): one log file can hold many runs
    before_ms: float | None = None  # the unit's median time over its last AROUND runs before the event


@dataclass(frozen=True)
class EventSummary:
    """How many fallback events, by trigger, unit and action."""

    total: int
    by_trigger: dict[str, int]
    by_unit: dict[str, int]
    by_action: dict[str, int]

    def to_dict(self) -> dict[str, object]:
        return plain(self)


KEPT_EVENTS = 1000  # the fallback events an EventLog keeps in memory (all are counted, and all written to its file)
AROUND = 30  # a unit's runs whose median is its time before an event, and after a move (yolo-edge events)
MOVES: frozenset[str] = frozenset({"move_to_cpu", "move_to_npu", "open_breaker", "close_breaker", "reopen_breaker"})


class EventLog:
    """Thread-safe record of fallback events: every one counted (by trigger, unit and action) and mirrored to a JSONL
    file when ``path`` is given; the last :data:`KEPT_EVENTS` kept in memory, so a run of months that falls back
    every frame holds no more than one of minutes."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else None
        self.run = uuid.uuid4().hex[:12]
        self.events: deque[FallbackEvent] = deque(maxlen=KEPT_EVENTS)
        self._counts: dict[str, Counter[str]] = {"trigger": Counter(), "unit": Counter(), "action": Counter()}
        self.write_error: str | None = None  # the file stopped taking events: a problem of the run, not a crash
        self.latency = "measured"  # how the unit times are obtained (config.FrameKind): set by the executor
        self._lock = threading.Lock()
        self._recent: dict[str, deque[float]] = {}  # unit -> its last AROUND times
        self._after: list[tuple[FallbackEvent, list[float]]] = []  # events whose unit's next AROUND times are due
        self.unit_time: dict[str, dict[str, list[float]]] = {}  # unit -> device -> [runs, total ms]

    def add(self, frame: int, unit: str, trigger: Trigger, action: Action, detail: str = "") -> None:
        with self._lock:
            recent = self._recent.get(unit)
            before = statistics.median(recent) if recent else None
            ev = FallbackEvent(time.time(), frame, unit, trigger, action, detail, self.run, before)
            self.events.append(ev)
            for key, value in (("trigger", trigger), ("unit", unit), ("action", action)):
                self._counts[key][value] += 1
            if self.path and action in MOVES:
                self._after.append((ev, []))
            self._write(ev, f"events from frame {frame} on are not in it")

    def timed(self, unit: str, device: Device, ms: float) -> None:
        """One run of ``unit`` on ``device`` took ``ms`` (the board's model where it is modelled)."""
        with self._lock:
            self._recent.setdefault(unit, deque(maxlen=AROUND)).append(ms)
            acc = self.unit_time.setdefault(unit, {}).setdefault(device, [0, 0.0])
            acc[0], acc[1] = acc[0] + 1, acc[1] + ms
            if not self._after:
                return
            for ev, after in self._after:
                if ev.unit == unit:
                    after.append(ms)
            for ev, after in [x for x in self._after if len(x[1]) >= AROUND]:
                self._after.remove((ev, after))
                self._write_after(ev, after)

    def finish(self, frames: int, seconds: float, audits: dict[str, dict[str, object]]) -> None:
        """The run's end in the file: its frames, each unit's time per device and how it was obtained (``latency``,
        which the executor writing here sets: a simulated board's are modelled), the audits, and the time after the
        events whose unit had not run AROUND times since (``yolo-edge events`` reads it back)."""
        with self._lock:
            for ev, after in self._after:
                if after:
                    self._write_after(ev, after)
            self._after = []
            record = {"record": "run", "run": self.run, "time": time.time(), "frames": frames, "seconds": seconds}
            record["latency"] = self.latency
            units = {u: {d: {"runs": n, "ms": ms} for d, (n, ms) in by.items()} for u, by in self.unit_time.items()}
            self._write({**record, "units": units, "audits": audits}, "its end is not in it")

    def _write_after(self, ev: FallbackEvent, after: list[float]) -> None:
        record = {"record": "after", "run": self.run, "frame": ev.frame, "unit": ev.unit, "trigger": ev.trigger}
        self._write({**record, "after_ms": statistics.median(after), "runs": len(after)}, "")

    def _write(self, record: object, lost: str) -> None:
        """One JSON line to the file (under the lock); a file that stops taking them is the run's problem."""
        if not self.path or self.write_error is not None:
            return
        try:
            with self.path.open("a") as f:
                f.write(dumps(record, indent=None) + "\n")
        except OSError as exc:
            self.write_error = f"--events {self.path}: {exc.strerror or exc}; {lost or 'the rest is not in it'}"

    def to_jsonl(self) -> str:
        with self._lock:
            return "".join(dumps(e, indent=None) + "\n" for e in self.events)

    def summary(self) -> EventSummary:
        with self._lock:
            counts = {k: dict(c) for k, c in self._counts.items()}
        return EventSummary(sum(counts["trigger"].values()), counts["trigger"], counts["unit"], counts["action"])


class CircuitBreaker:
    """closed -> (K consecutive failures) -> open -> (cool-down) -> half_open probe -> closed | open."""

    def __init__(
        self, failures: int, cooldown_s: float, events: EventLog, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.failures = failures
        self.cooldown_s = cooldown_s
        self.events = events
        self.clock = clock
        self.state = "closed"
        self.consecutive = 0
        self.opened_at = 0.0
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            if self.state == "open" and self.clock() - self.opened_at >= self.cooldown_s:
                self.state = "half_open"
            return self.state != "open"

    def record(self, ok: bool, frame: int, unit: str, trigger: Trigger | None) -> None:
        with self._lock:
            if ok:
                self.consecutive = 0
                if self.state == "half_open":
                    self.state = "closed"
                    self.events.add(frame, unit, "recovered", "close_breaker", "half-open probe succeeded")
                return
            self.consecutive += 1
            if self.state == "half_open":
                self.state, self.opened_at = "open", self.clock()
                self.events.add(frame, unit, trigger or "runtime_error", "reopen_breaker", "half-open probe failed")
            elif self.state == "closed" and self.consecutive >= self.failures:
                self.state, self.opened_at = "open", self.clock()
                self.events.add(
                    frame,
                    unit,
                    trigger or "runtime_error",
                    "open_breaker",
                    f"{self.consecutive} consecutive NPU failures: whole graph to the CPU",
                )


class DeferredTwin:
    """A CPU twin compiled off the path to the first frame: on a thread of its own once started (the executor
    starts it after the unit's first frame), or at once when something needs it first (a fallback). ``then``
    runs on that thread after it is built (timing it: the hysteresis' estimate)."""

    def __init__(self, make: Callable[[], Executable]) -> None:
        self._make = make
        self._then: Callable[[Executable], None] = lambda _exe: None
        self._future: Future[Executable] = Future()
        self._started = False
        self._lock = threading.Lock()

    def then(self, after: Callable[[Executable], None]) -> None:
        self._then = after

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        # not a daemon: the interpreter waits for it at exit (a runtime killed mid-compile aborts the process)
        threading.Thread(target=self._build, name="twin", daemon=False).start()

    def _build(self) -> None:
        try:
            exe = self._make()
        except BaseException as exc:  # raised again to whoever asks for the twin
            self._future.set_exception(exc)
            return
        self._future.set_result(exe)
        self._then(exe)

    def result(self) -> Executable:
        self.start()
        return self._future.result()


@dataclass
class Unit:
    """One executable unit (a subgraph, fused subgraphs, or an op-level piece) with its CPU twin. The twin may
    still be compiling (a loaded bundle's accelerator unit: not on the path to the first frame); ``cpu`` waits
    for it, and the hysteresis judges nothing before ``cpu_estimate_s`` is measured."""

    name: str
    subgraphs: tuple[str, ...]  # the subgraphs it runs (of which it is a piece)
    twin: Executable | DeferredTwin
    npu: Executable | None
    cpu_estimate_s: float | None  # the twin's seconds on this machine: what the hysteresis judges against
    modelled_s: float | None = None  # simulated NPU: modelled latency
    board_cpu_s: float | None = None  # a simulated board: the twin's modelled seconds on the board's CPU
    board: BoardCpu | None = None  # that board's CPU (its builder's), which the executor hands the detector
    parked: bool = False
    audit_floor: float | None = None  # the lowest cosine with its FP32 twin the deploy accepted (audit.py)
    graph: onnx.ModelProto | None = None  # its FP32 graph, which the audit compiles its own twin of
    precision_parked: bool = False  # moved to the CPU by a precision event: only audits run the accelerator
    slow_run: list[float] = field(default_factory=list)  # accelerator seconds of the current run of slow frames
    good_probes: int = 0
    since_probe: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def cpu(self) -> Executable:
        """The FP32 CPU twin (compiled now, or waited for, if it is deferred)."""
        return self.twin.result() if isinstance(self.twin, DeferredTwin) else self.twin

    @property
    def _shape(self) -> Executable:
        """An executable with this unit's inputs and outputs, without waiting for a deferred twin."""
        return self.npu if isinstance(self.twin, DeferredTwin) and self.npu is not None else self.cpu

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self._shape.inputs]

    @property
    def outputs(self) -> tuple[TensorInfo, ...]:
        return self._shape.outputs

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]


@dataclass(frozen=True)
class UnitRun:
    unit: str
    device: Device
    ms: float  # measured wall time of the run that produced the result (plus a failed NPU try, if any)
    modelled_ms: float | None


@dataclass(frozen=True)
class Transfer:
    """One boundary hand-over in a frame: ``producer -> consumer`` (``input`` for the image). On the host it
    costs nothing more: every backend returns host arrays, read in place by the next unit (its copy out of
    the accelerator is inside that unit's time). Over the profile's link it takes ``modelled_ms``."""

    boundary: str
    bytes: int
    modelled_ms: float  # over the profile's link (0 without a profile)


@dataclass(frozen=True)
class FrameResult:
    outputs: dict[str, np.ndarray]
    units: tuple[UnitRun, ...]
    transfers: tuple[Transfer, ...]

    @property
    def transfer_bytes(self) -> int:
        return sum(t.bytes for t in self.transfers)

    @property
    def transfer_modelled_ms(self) -> float:
        return sum(t.modelled_ms for t in self.transfers)

    @property
    def model_ms(self) -> float:
        """Measured wall time of the units (hand-overs are in place)."""
        return sum(s.ms for s in self.units)


class DaemonPool:
    """Accelerator calls on daemon threads, each call's result a :class:`Future`. Not a ThreadPoolExecutor: the
    interpreter joins those at exit, so one accelerator call that never returns (a hung driver) would keep a
    ``run`` from ever ending after its summary; a daemon thread stuck in such a call is left behind at exit.
    Up to ``workers`` threads, started as calls come; a hung one is replaced by the next idle one."""

    def __init__(self, workers: int, name: str) -> None:
        self.workers, self.name = workers, name
        self._calls: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the accelerator call pool is shut down")
            if self._idle == 0 and len(self._threads) < self.workers:
                t = threading.Thread(target=self._work, name=f"{self.name}-{len(self._threads)}", daemon=True)
                self._threads.append(t)
                t.start()
            else:
                self._idle -= 1 if self._idle else 0
        self._calls.put((future, fn, args))
        return future

    def _work(self) -> None:
        while True:
            item = self._calls.get()
            if item is None:
                return
            future, fn, args = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:  # handed to the caller, which decides (a bug propagates there)
                    future.set_exception(exc)
            with self._lock:
                self._idle += 1

    def shutdown(self) -> None:
        """No more calls; idle threads end, a thread still in a call is left to the process's exit."""
        with self._lock:
            self._closed = True
            threads = len(self._threads)
        for _ in range(threads):
            self._calls.put(None)


def frame_outputs(units: Sequence[Unit]) -> tuple[TensorInfo, ...]:
    """A frame's result: what no later unit reads (the head's raw outputs, which the detector decodes; or output0
    where one unit runs the whole model)."""
    read_later: set[str] = set()
    final: list[TensorInfo] = []
    for unit in reversed(units):
        final[:0] = [t for t in unit.outputs if t.name not in read_later]
        read_later.update(unit.input_names)
    return tuple(final)


def answer_within(call: Future[dict[str, np.ndarray]], limit: float, npu: Executable) -> dict[str, np.ndarray]:
    """A pool call's outputs within ``limit`` seconds, else :class:`FutureTimeout`; past it, waited for as long as a
    simulator is still computing numerics on this host (``npu.host_busy``: a loaded host's wall time is not the
    board's, and must not fire the board's timeout trigger; its worker's own call timeout bounds it)."""
    while True:
        try:
            return call.result(timeout=limit)
        except FutureTimeout:
            if not npu.host_busy:
                raise


class SplitExecutor:
    """Runs the units of a plan frame by frame with the fallbacks above. ``clock`` (seconds, monotonic) times
    the accelerator calls for the hysteresis and the breaker's cool-down; tests inject a fake one. ``as_placed``:
    no unit moves to the CPU for being slow (a failing accelerator still falls back): what the verdict, val and the
    gate measure, so a busy machine changes none of their figures. ``owns``: what compiled the units (a builder),
    closed with the executor; ``borrowed``: the units' executables belong to a builder the caller closes later (a
    deploy's, shared by the search's trials): the executor closes neither."""

    def __init__(
        self,
        units: Sequence[Unit],
        cfg: RuntimeConfig,
        profile: DeviceProfile | None = None,
        events: EventLog | None = None,
        clock: Callable[[], float] = time.perf_counter,
        owns: ExitStack | None = None,
        as_placed: bool = False,
        borrowed: bool = False,
    ) -> None:
        self.units = list(units)
        self._owned = owns or ExitStack()  # what the units were compiled by (a builder): closed after them
        self._borrowed = borrowed or owns is not None  # the units' executables are closed by what compiled them
        self.cfg = cfg
        self.profile = profile
        # a simulated board: its CPU phases (letterbox, NMS; the units' board_cpu_s) modelled, as its accelerator is;
        # found once, by the builder that compiled the units
        self.board = self.units[0].board
        # how its unit times are obtained (config.FrameKind): a simulated board's modelled, else measured
        self.latency_kind = (
            BOARD
            if self.board is not None
            else "modelled NPU + measured CPU"
            if any(u.npu is not None and u.npu.modelled_s is not None for u in self.units)
            else "measured"
        )
        self.events = events or EventLog()
        self.events.latency = self.latency_kind
        self.clock = clock
        self.breaker = CircuitBreaker(cfg.breaker_failures, cfg.breaker_cooldown_s, self.events, clock)
        self._pool = DaemonPool(8, "npu")
        self.input_name = self.units[0].input_names[0]  # the image
        self.outputs = frame_outputs(self.units)
        self.output_names = tuple(t.name for t in self.outputs)
        self.placement_problems: list[str] = []  # units that could not be placed as the plan says (Bundle.executor)
        # the `cpu` profile's accelerator is the CPU reference itself: moving a unit to the CPU gains nothing,
        # and timing one engine against itself only measures noise
        self.performance_fallback = not as_placed and (profile is None or profile.kind != "cpu")
        # the precision trigger, off the frames' path; not where the figures are measured as placed (val, check)
        self.auditor = Auditor(replace(cfg, audit_every=0) if as_placed else cfg, self.events, self.units, clock)

    @property
    def takes_pixels(self) -> bool:
        """The first unit's accelerator takes the image as the letterbox's pixels (yolo_edge.core.pixels): a frame is
        fed them, and a CPU twin taking that unit over normalises them in its own call."""
        npu = self.units[0].npu
        return npu is not None and self.input_name in npu.pixel_inputs

    def close(self) -> None:
        """Stop the accelerator call pool and release the units' accelerator executables (a toolchain worker's
        compiled graphs), or leave them to the builder they are borrowed from; the executor is not used after this."""
        self.auditor.close()
        self._pool.shutdown()
        for unit in self.units if not self._borrowed else ():
            if unit.npu is not None:
                unit.npu.close()
        self._owned.close()

    def __enter__(self) -> SplitExecutor:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- one unit
    def _npu_call(
        self, unit: Unit, feeds: dict[str, np.ndarray], frame: int
    ) -> tuple[dict[str, np.ndarray] | None, float]:
        """Run the NPU twin with a timeout; returns (outputs or None on failure, seconds spent)."""
        assert unit.npu is not None
        npu = unit.npu
        t0 = self.clock()
        limit = self.cfg.unit_timeout_s + npu.host_slack_s  # a simulator's own time on this host is not the board's
        try:
            if npu.bounded:  # its runtime waits with the deadline and cancels the call past it
                outs = npu.run(feeds, limit)
            else:  # on a pool thread, given up on past the deadline (a hung driver's thread is left behind)
                outs = answer_within(self._pool.submit(npu.run, feeds), limit, npu)
        except (FutureTimeout, NpuTimeout):
            self.events.add(frame, unit.name, "timeout", "retry_cpu", f"no answer in {limit:.3g} s")
            self.breaker.record(False, frame, unit.name, "timeout")
            return None, self.clock() - t0
        except NpuError as exc:  # the accelerator's failure: this frame re-runs on the CPU (a bug propagates)
            self.events.add(frame, unit.name, "runtime_error", "retry_cpu", f"{type(exc).__name__}: {exc}")
            self.breaker.record(False, frame, unit.name, "runtime_error")
            return None, self.clock() - t0
        elapsed = self.clock() - t0
        if not all(np.isfinite(a).all() for a in outs.values()):
            self.events.add(frame, unit.name, "nan", "retry_cpu", "NaN/Inf in the NPU output")
            self.breaker.record(False, frame, unit.name, "nan")
            return None, elapsed
        self.breaker.record(True, frame, unit.name, None)
        return outs, elapsed

    def _hysteresis(self, unit: Unit, elapsed: float, probing: bool, frame: int, feeds: dict[str, np.ndarray]) -> None:
        if unit.cpu_estimate_s is None:  # not estimated: nothing to judge against (a CPU profile, modelled latency)
            return
        slow = elapsed > self.cfg.slow_ratio * unit.cpu_estimate_s
        with unit.lock:
            if probing:
                unit.good_probes = 0 if slow else unit.good_probes + 1
                if unit.good_probes >= self.cfg.recover_probes:
                    unit.parked, unit.good_probes, unit.slow_run = False, 0, []
                    self.events.add(
                        frame, unit.name, "recovered", "move_to_npu", f"{self.cfg.recover_probes} good probes in a row"
                    )
                return
            unit.slow_run = [*unit.slow_run, elapsed] if slow else []
            if len(unit.slow_run) < self.cfg.slow_frames:
                return
            npu_s, unit.slow_run = statistics.median(unit.slow_run), []
            # Before moving: time the CPU twin now, on this frame. A busy machine slows the CPU as much as the
            # accelerator; measured against an estimate from a quiet minute, that would move the unit for nothing.
            cpu_now_s = median_run_s(unit.cpu, feeds)
            if npu_s <= self.cfg.slow_ratio * cpu_now_s:
                unit.cpu_estimate_s = cpu_now_s
                return
            unit.parked, unit.since_probe = True, 0
            self.events.add(
                frame,
                unit.name,
                "performance",
                "move_to_cpu",
                f"{self.cfg.slow_frames} frames over {self.cfg.slow_ratio}x the CPU estimate: the accelerator's median "
                f"{npu_s * 1e3:.2f} ms against {cpu_now_s * 1e3:.2f} ms for the CPU on this frame",
            )

    def run_unit(self, unit: Unit, tensors: dict[str, np.ndarray], frame: int) -> tuple[dict[str, np.ndarray], UnitRun]:
        """Run one unit for one frame (NPU with fallback, or CPU); thread-safe; its time to the event log."""
        feeds = {n: tensors[n] for n in unit.input_names}
        spent = 0.0
        if unit.npu is not None and not unit.precision_parked:
            with unit.lock:
                probing = unit.parked
                if probing:
                    unit.since_probe += 1
                    due = unit.since_probe >= self.cfg.probe_every
                    if due:
                        unit.since_probe = 0
            if (not probing or due) and self.breaker.allow():
                outs, spent = self._npu_call(unit, feeds, frame)
                if frame > 0 and isinstance(unit.twin, DeferredTwin):  # the first frame is out: build the fallback
                    unit.twin.start()
                if outs is not None:
                    # a simulated accelerator's time is modelled: how long the host takes to simulate it (Rockchip's
                    # simulator: tens of ms) says nothing about the board, so only a real one can be slow
                    if self.performance_fallback and unit.modelled_s is None:
                        self._hysteresis(unit, spent, probing, frame, feeds)
                    modelled = None if unit.modelled_s is None else unit.modelled_s * 1e3
                    self.auditor.offer(unit, frame, feeds, outs, npu=True)
                    self.events.timed(unit.name, "npu", spent * 1e3 if modelled is None else modelled)
                    return outs, UnitRun(unit.name, "npu", spent * 1e3, modelled)
        try:
            outs = unit.cpu.run(feeds)
        except NpuError as exc:  # the CPU runtime failed: no fallback is left (a damaged graph, no memory for it)
            raise YoloEdgeError(
                f"unit {unit.name} failed on the CPU, where nothing can take it over ({exc}); its graph cannot run "
                "here: deploy it again, or free memory"
            ) from None
        board = None if unit.board_cpu_s is None else unit.board_cpu_s * 1e3
        self.auditor.offer(unit, frame, feeds, outs, npu=False)  # a unit a precision event moved here: probed
        self.events.timed(unit.name, "cpu", (spent + unit.cpu.last_run_s) * 1e3 if board is None else board)
        return outs, UnitRun(unit.name, "cpu", (spent + unit.cpu.last_run_s) * 1e3, board)

    # ---------------------------------------------------------------- one frame
    def run(self, feeds: dict[str, np.ndarray], frame: int = 0) -> FrameResult:
        tensors = dict(feeds)
        runs = []
        for unit in self.units:
            outs, run = self.run_unit(unit, tensors, frame)
            tensors.update(outs)
            runs.append(run)
        for unit in self.units:  # the frame is out: build the deferred fallbacks now
            if isinstance(unit.twin, DeferredTwin):
                unit.twin.start()
        return self.result(tensors, runs)

    def result(self, tensors: dict[str, np.ndarray], runs: Sequence[UnitRun]) -> FrameResult:
        """A frame's result from its units' ``runs`` (in the units' order, by this executor or a stream's stages)
        and every tensor they saw: its outputs, and its hand-overs (:func:`_hand_overs`)."""
        assert [r.unit for r in runs] == [u.name for u in self.units], "a run per unit, in order"
        transfers = _hand_overs(self, tensors, runs)
        return FrameResult({n: tensors[n] for n in self.output_names}, tuple(runs), transfers)


def _hand_overs(ex: SplitExecutor, tensors: dict[str, np.ndarray], runs: Sequence[UnitRun]) -> tuple[Transfer, ...]:
    """Each tensor read by a unit on another device than the one holding it (decode and NMS on the CPU), by
    boundary, priced over the profile's link (read in place on the host: nothing more there)."""
    where = {ex.input_name: "cpu"}  # device holding each tensor
    owner = {ex.input_name: "input"}  # unit that produced it
    moved: dict[str, list[float]] = {}  # boundary -> [bytes, modelled seconds]

    def hand_over(name: str, boundary: str) -> None:
        n_bytes = tensors[name].nbytes
        acc = moved.setdefault(boundary, [0, 0.0])
        acc[0] += n_bytes
        acc[1] += transfer_time(n_bytes, ex.profile.link) if ex.profile is not None else 0.0

    for unit, run in zip(ex.units, runs):
        for name in unit.input_names:
            if where[name] != run.device:
                hand_over(name, f"{owner[name]}->{unit.name}")
                where[name] = run.device
        where.update({n: run.device for n in unit.output_names})
        owner.update({n: unit.name for n in unit.output_names})
    for name in ex.output_names:
        if where[name] != "cpu":
            hand_over(name, f"{owner[name]}->nms")
    return tuple(Transfer(k, int(v[0]), v[1] * 1e3) for k, v in moved.items())
