"""SplitExecutor: runs the placed stages, hands boundary tensors over, times everything, and absorbs
the NPU's failures so that no frame is lost.

Per frame, an NPU stage that raises, exceeds ``stage_timeout_s`` or returns NaN/Inf is re-run on the
CPU in FP32 for that frame. A circuit breaker moves the whole graph to the CPU after K consecutive
NPU failures and lets one half-open probe through after a cool-down; a successful probe closes it.
Performance fallback uses hysteresis: a stage moves to the CPU after N consecutive frames slower
than ``slow_ratio`` times its CPU estimate and moves back after M consecutive good probes. Every
decision is a :class:`FallbackEvent` in a JSONL log.

Stages are independently callable and thread-safe (``run_stage``), so a pipelined stream can run
different stages of different frames in different threads.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx

from yolo_edge.backends import cpu_backend, create_backend
from yolo_edge.backends.base import Backend, Executable, NpuCompileError, NpuOutOfMemory
from yolo_edge.config import DeviceProfile, RuntimeConfig
from yolo_edge.devices.cost import transfer_time
from yolo_edge.graph import STAGES
from yolo_edge.plan.placement import PlacementPlan, op_level_groups
from yolo_edge.split import SplitModel, cut

TRIGGERS = ("unsupported_op", "memory", "precision", "performance", "runtime_error", "timeout", "nan", "recovered")


@dataclass(frozen=True)
class FallbackEvent:
    time: float
    frame: int
    stage: str
    trigger: str
    action: str  # retry_cpu, open_breaker, close_breaker, reopen_breaker, move_to_cpu, move_to_npu, compile_on_cpu
    detail: str = ""


class EventLog:
    """Thread-safe list of fallback events, mirrored to a JSONL file when ``path`` is given."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else None
        self.events: list[FallbackEvent] = []
        self._lock = threading.Lock()

    def add(self, frame: int, stage: str, trigger: str, action: str, detail: str = "") -> None:
        ev = FallbackEvent(time.time(), frame, stage, trigger, action, detail)
        with self._lock:
            self.events.append(ev)
            if self.path:
                with self.path.open("a") as f:
                    f.write(json.dumps(asdict(ev)) + "\n")

    def to_jsonl(self) -> str:
        with self._lock:
            return "".join(json.dumps(asdict(e)) + "\n" for e in self.events)

    def summary(self) -> dict[str, object]:
        with self._lock:
            events = list(self.events)
        return {
            "total": len(events),
            "by_trigger": dict(Counter(e.trigger for e in events)),
            "by_stage": dict(Counter(e.stage for e in events)),
            "by_action": dict(Counter(e.action for e in events)),
        }


class CircuitBreaker:
    """closed -> (K consecutive failures) -> open -> (cool-down) -> half_open probe -> closed | open."""

    def __init__(self, failures: int, cooldown_s: float, events: EventLog, clock: Callable[[], float] = time.monotonic) -> None:
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

    def record(self, ok: bool, frame: int, stage: str, trigger: str) -> None:
        with self._lock:
            if ok:
                self.consecutive = 0
                if self.state == "half_open":
                    self.state = "closed"
                    self.events.add(frame, stage, "recovered", "close_breaker", "half-open probe succeeded")
                return
            self.consecutive += 1
            if self.state == "half_open":
                self.state, self.opened_at = "open", self.clock()
                self.events.add(frame, stage, trigger, "reopen_breaker", "half-open probe failed")
            elif self.state == "closed" and self.consecutive >= self.failures:
                self.state, self.opened_at = "open", self.clock()
                self.events.add(frame, stage, trigger, "open_breaker", f"{self.consecutive} consecutive NPU failures: whole graph to the CPU")


@dataclass
class Stage:
    """One executable unit (a subgraph, or an op-level piece) with its CPU twin."""

    name: str
    cpu: Executable
    npu: Executable | None
    cpu_estimate_s: float
    modelled_s: float | None = None  # simulated NPU: modelled latency
    parked: bool = False
    slow_run: int = 0
    good_probes: int = 0
    since_probe: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.cpu.inputs]

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.cpu.outputs]


@dataclass(frozen=True)
class StageRun:
    stage: str
    device: str  # "npu" or "cpu"
    ms: float  # measured wall time of the run that produced the result (plus a failed NPU try, if any)
    modelled_ms: float | None


@dataclass(frozen=True)
class Transfer:
    """One boundary hand-over in a frame: ``producer -> consumer`` (``input`` for the image)."""

    boundary: str
    bytes: int
    copy_ms: float  # measured host copy
    modelled_ms: float  # over the profile's link (0 without a profile)


@dataclass(frozen=True)
class FrameResult:
    outputs: dict[str, np.ndarray]
    stages: tuple[StageRun, ...]
    transfers: tuple[Transfer, ...]

    @property
    def transfer_bytes(self) -> int:
        return sum(t.bytes for t in self.transfers)

    @property
    def transfer_ms(self) -> float:
        return sum(t.copy_ms for t in self.transfers)

    @property
    def transfer_modelled_ms(self) -> float:
        return sum(t.modelled_ms for t in self.transfers)

    @property
    def model_ms(self) -> float:
        return sum(s.ms for s in self.stages) + self.transfer_ms


class SplitExecutor:
    def __init__(self, stages: Sequence[Stage], cfg: RuntimeConfig, profile: DeviceProfile | None = None,
                 events: EventLog | None = None) -> None:
        self.stages = list(stages)
        self.cfg = cfg
        self.profile = profile
        self.events = events or EventLog()
        self.breaker = CircuitBreaker(cfg.breaker_failures, cfg.breaker_cooldown_s, self.events)
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="npu")
        self.output_name = self.stages[-1].output_names[-1]
        self.placement_problems: list[str] = []  # units that could not be placed as the plan says (Bundle.executor)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ---------------------------------------------------------------- one stage
    def _npu_call(self, stage: Stage, feeds: dict[str, np.ndarray], frame: int) -> tuple[dict[str, np.ndarray] | None, float]:
        """Run the NPU twin with a timeout; returns (outputs or None on failure, seconds spent)."""
        assert stage.npu is not None
        npu = stage.npu
        t0 = time.perf_counter()
        future = self._pool.submit(npu.run, feeds)
        try:
            outs = future.result(timeout=self.cfg.stage_timeout_s)
        except FutureTimeout:
            self.events.add(frame, stage.name, "timeout", "retry_cpu", f"no answer in {self.cfg.stage_timeout_s} s")
            self.breaker.record(False, frame, stage.name, "timeout")
            return None, time.perf_counter() - t0
        except Exception as exc:  # any NPU runtime failure: this frame re-runs on the CPU
            self.events.add(frame, stage.name, "runtime_error", "retry_cpu", f"{type(exc).__name__}: {exc}")
            self.breaker.record(False, frame, stage.name, "runtime_error")
            return None, time.perf_counter() - t0
        elapsed = time.perf_counter() - t0
        if not all(np.isfinite(a).all() for a in outs.values()):
            self.events.add(frame, stage.name, "nan", "retry_cpu", "NaN/Inf in the NPU output")
            self.breaker.record(False, frame, stage.name, "nan")
            return None, elapsed
        self.breaker.record(True, frame, stage.name, "")
        return outs, elapsed

    def _hysteresis(self, stage: Stage, elapsed: float, probing: bool, frame: int) -> None:
        slow = elapsed > self.cfg.slow_ratio * stage.cpu_estimate_s
        with stage.lock:
            if probing:
                stage.good_probes = 0 if slow else stage.good_probes + 1
                if stage.good_probes >= self.cfg.recover_probes:
                    stage.parked, stage.good_probes, stage.slow_run = False, 0, 0
                    self.events.add(frame, stage.name, "recovered", "move_to_npu", f"{self.cfg.recover_probes} good probes in a row")
                return
            stage.slow_run = stage.slow_run + 1 if slow else 0
            if stage.slow_run >= self.cfg.slow_frames:
                stage.parked, stage.slow_run, stage.since_probe = True, 0, 0
                self.events.add(frame, stage.name, "performance", "move_to_cpu",
                                f"{self.cfg.slow_frames} frames over {self.cfg.slow_ratio}x the CPU estimate ({stage.cpu_estimate_s * 1e3:.2f} ms)")

    def run_stage(self, stage: Stage, tensors: dict[str, np.ndarray], frame: int) -> tuple[dict[str, np.ndarray], StageRun]:
        """Run one stage for one frame (NPU with fallback, or CPU); thread-safe."""
        feeds = {n: tensors[n] for n in stage.input_names}
        spent = 0.0
        if stage.npu is not None:
            with stage.lock:
                probing = stage.parked
                if probing:
                    stage.since_probe += 1
                    due = stage.since_probe >= self.cfg.probe_every
                    if due:
                        stage.since_probe = 0
            if (not probing or due) and self.breaker.allow():
                outs, spent = self._npu_call(stage, feeds, frame)
                if outs is not None:
                    self._hysteresis(stage, spent, probing, frame)
                    modelled = None if stage.modelled_s is None else stage.modelled_s * 1e3
                    return outs, StageRun(stage.name, "npu", spent * 1e3, modelled)
        outs = stage.cpu.run(feeds)
        return outs, StageRun(stage.name, "cpu", (spent + stage.cpu.last_run_s) * 1e3, None)

    # ---------------------------------------------------------------- one frame
    def run(self, feeds: dict[str, np.ndarray], frame: int = 0) -> FrameResult:
        tensors = dict(feeds)
        where = {n: "cpu" for n in feeds}  # device holding each tensor
        owner = {n: "input" for n in feeds}  # stage that produced it
        runs = []
        moved: dict[str, list[float]] = {}  # boundary -> [bytes, copy seconds, modelled seconds]

        def hand_over(name: str, boundary: str, copy: bool) -> None:
            t0 = time.perf_counter()
            if copy:
                tensors[name] = np.ascontiguousarray(tensors[name]).copy()
            spent = time.perf_counter() - t0 if copy else 0.0
            n_bytes = tensors[name].nbytes
            acc = moved.setdefault(boundary, [0, 0.0, 0.0])
            acc[0] += n_bytes
            acc[1] += spent
            acc[2] += transfer_time(n_bytes, self.profile.link) if self.profile is not None else 0.0

        for stage in self.stages:
            outs, run = self.run_stage(stage, tensors, frame)
            for name in stage.input_names:  # a tensor changing device is copied across the boundary
                if where[name] != run.device:
                    hand_over(name, f"{owner[name]}->{stage.name}", copy=True)
                    where[name] = run.device
            tensors.update(outs)
            where.update({n: run.device for n in outs})
            owner.update({n: stage.name for n in outs})
            runs.append(run)
        if where[self.output_name] != "cpu":  # NMS runs on the CPU
            hand_over(self.output_name, f"{owner[self.output_name]}->nms", copy=False)
        transfers = tuple(Transfer(k, int(v[0]), v[1] * 1e3, v[2] * 1e3) for k, v in moved.items())
        return FrameResult({self.output_name: tensors[self.output_name]}, tuple(runs), transfers)


# ---------------------------------------------------------------- building from a plan

def _median_s(exe: Executable, feeds: dict[str, np.ndarray], runs: int = 3) -> float:
    times = []
    for _ in range(runs + 1):
        exe.run(feeds)
        times.append(exe.last_run_s)
    return statistics.median(times[1:])


@dataclass(frozen=True)
class ExecutionUnit:
    """What the executor runs as one step: one or more consecutive subgraphs on one device at one precision."""

    name: str  # "backbone", "backbone+neck", or "neck.1" for an op-level piece
    model: onnx.ModelProto
    device: str  # "npu" or "cpu"
    precision: str
    int8_scheme: str | None = None  # INT8 activations on the accelerator (u8, s8); None: the backend's default


def execution_units(split: SplitModel, plan: PlacementPlan, fuse: bool = True) -> list[ExecutionUnit]:
    """The units the executor runs, in order.

    A subgraph with op-level CPU nodes is cut into its maximal same-device pieces (``neck.0``, ...).
    With ``fuse``, consecutive whole subgraphs on the same device at the same precision (and INT8 scheme)
    become one unit (``backbone+neck``): one NPU graph and one CPU session instead of two, as a vendor
    toolchain compiles it; no tensor crosses a device between them, so only per-subgraph timing is lost.
    ``benchmarks/split_vs_cpu.py --no-fuse`` measures what fusion gains.
    """
    runs: list[tuple[tuple[str, str, str | None] | None, list[str]]] = []  # (device, precision, scheme) or None (op level)
    for sg in split.subgraphs:
        sp = plan[sg.name]
        key = None if sp.cpu_nodes else (sp.device, sp.precision, sp.int8_scheme)
        if fuse and key is not None and runs and runs[-1][0] == key:
            runs[-1][1].append(sg.name)
        else:
            runs.append((key, [sg.name]))
    pieces = []
    if any(len(names) > 1 for _, names in runs):
        stage_of = split.exported.layout.stage_of
        pieces = cut(split.exported.load(), [[i for i, st in enumerate(stage_of) if STAGES[st] in names] for _, names in runs], str(split.exported.path))
    units: list[ExecutionUnit] = []
    for k, (_, names) in enumerate(runs):
        sp = plan[names[0]]
        if len(names) > 1:
            units.append(ExecutionUnit("+".join(names), pieces[k].model, sp.device, sp.precision, sp.int8_scheme))
        elif sp.cpu_nodes:
            model = split[names[0]].model
            groups, devices = op_level_groups(model, set(sp.cpu_nodes))
            units += [ExecutionUnit(f"{names[0]}.{j}", piece.model, dev, sp.precision, sp.int8_scheme)
                      for j, (piece, dev) in enumerate(zip(cut(model, groups, names[0]), devices))]
        else:
            units.append(ExecutionUnit(names[0], split[names[0]].model, sp.device, sp.precision, sp.int8_scheme))
    return units


def build_stages(split: SplitModel, plan: PlacementPlan, profile: DeviceProfile, calib: Sequence[dict[str, np.ndarray]],
                 events: EventLog, npu: Backend | None = None, artifacts: Mapping[str, onnx.ModelProto] | None = None,
                 fuse: bool = True) -> list[Stage]:
    """Compile the plan: NPU units at their precision (calibrated on ``calib``: boundary tensors of FP32
    runs), each with its FP32 CPU twin. A unit the NPU compiler refuses runs on the CPU (an event); a
    fused unit it refuses is first tried again as its separate subgraphs.

    ``artifacts`` (unit name -> ONNX): a unit's compiled form to run as it is, e.g. the INT8 QDQ graph of a bundle.
    """
    cpu = cpu_backend()
    npu_backend = npu if npu is not None else (create_backend(profile) if plan.npu_subgraphs else None)
    tensors = [dict(c) for c in calib]  # grows with op-level pieces' intermediate tensors
    stages: list[Stage] = []

    def add(unit: ExecutionUnit) -> None:
        name, model = unit.name, unit.model
        cpu_exe = cpu.compile(model, "fp32")
        ins = [t.name for t in cpu_exe.inputs]
        for t in tensors:
            if any(o.name not in t for o in cpu_exe.outputs):
                t.update(cpu_exe.run({n: t[n] for n in ins}))
        npu_exe: Executable | None = None
        if unit.device == "npu" and npu_backend is not None:
            try:
                npu_exe = npu_backend.compile(model, unit.precision, [{n: t[n] for n in ins} for t in tensors], unit.int8_scheme,
                                              (artifacts or {}).get(name))
                getattr(npu_exe, "inner", npu_exe).run({n: tensors[0][n] for n in ins})  # warm-up, no fault draw
            except NpuCompileError as exc:
                if "+" in name:  # refused as one graph: the subgraphs one by one
                    for part in name.split("+"):
                        add(replace(unit, name=part, model=split[part].model))
                    return
                trigger = "memory" if isinstance(exc, NpuOutOfMemory) else "unsupported_op"
                events.add(-1, name, trigger, "compile_on_cpu", str(exc))
        est = _median_s(cpu_exe, {n: tensors[0][n] for n in ins})
        stages.append(Stage(name, cpu_exe, npu_exe, est, getattr(npu_exe, "modelled_s", None)))

    for unit in execution_units(split, plan, fuse):
        add(unit)
    return stages


def whole_graph_stage(model: onnx.ModelProto, npu: Backend, precision: str, calib: Sequence[dict[str, np.ndarray]],
                      scheme: str | None = None) -> Stage:
    """The whole model as one stage on the NPU (with its FP32 CPU twin): the whole-graph plan."""
    cpu_exe = cpu_backend().compile(model, "fp32")
    npu_exe = npu.compile(model, precision, calib, scheme)
    getattr(npu_exe, "inner", npu_exe).run(calib[0])
    return Stage("whole", cpu_exe, npu_exe, _median_s(cpu_exe, calib[0]), getattr(npu_exe, "modelled_s", None))
