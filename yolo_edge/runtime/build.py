"""Build: a placement plan into compiled units, compiled through a deploy's one
:class:`~yolo_edge.backends.builder.Builder` (as Polygraphy's loaders; the checks share it, so a graph the checks
compiled is not compiled again for a unit); the runtime (``yolo_edge.runtime.executor``) only runs what it is given.

``plan_units`` cuts the split model as the plan places it: consecutive whole subgraphs on one device at one
variant fused into one unit, a subgraph with op-level CPU nodes cut into its same-device pieces.
``compile_units`` compiles each unit's FP32 CPU twin and, for an accelerator unit, its accelerator executable;
INT8 calibrates on the unit's own inputs from FP32 runs of the units before it, which are computed only when a
compile reads them (:class:`UnitFeeds`): a bundle whose units are stored calibrates nothing. ``sample`` is one
frame's boundary tensors, every unit's inputs: the warm-up and the CPU estimate run on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import overload

import numpy as np
import onnx

from yolo_edge.backends.base import (
    FP32_SUFFIX,
    Artifact,
    CalibSet,
    Executable,
    NpuCompileError,
    NpuOutOfMemory,
    io_infos,
    median_run_s,
)
from yolo_edge.backends.builder import Builder
from yolo_edge.core.config import Device, Variant
from yolo_edge.devices.board import BoardCpu
from yolo_edge.devices.limits import Residency, batch_fit, memory_use
from yolo_edge.model.graph import PARTS, SUBGRAPHS, GraphInfo, part
from yolo_edge.model.split import SplitModel, cut, device_runs
from yolo_edge.plan.placement import PlacementPlan
from yolo_edge.runtime.events import EventLog, Trigger
from yolo_edge.runtime.units import DeferredTwin, Unit

EXECUTED = tuple(p.name for p in PARTS if p.unit)  # the subgraphs a plan's units run, in order (not the decode)
Twin = Executable | DeferredTwin  # a CPU twin, or one compiled off the path to the first frame
Tensors = dict[str, np.ndarray]
# One untimed call before frames count: an accelerator's first call allocates and tunes. The hysteresis needs 5
# slow frames in a row and times the CPU again before it moves a unit, so the CPU estimate is a prior: one call
# after one untimed (loading a bundle is on a service's restart path: benchmarks/load_time.py).
WARM_UP_RUNS = 1
ESTIMATE_RUNS = 1


def unit_name(subgraphs: Sequence[str], piece: int | None) -> str:
    """``backbone``, ``backbone+neck`` (fused), ``neck.1`` (an op-level piece): a unit's name, its bundle files'."""
    joined = "+".join(subgraphs)
    return joined if piece is None else f"{joined}.{piece}"


@dataclass(frozen=True)
class UnitPlan:
    """What the executor runs as one step: one or more consecutive subgraphs on one device at one precision, or
    one op-level piece of a subgraph (``piece``: its index)."""

    subgraphs: tuple[str, ...]
    model: onnx.ModelProto
    device: Device
    variant: Variant
    piece: int | None = None
    stored: bytes | None = field(default=None, compare=False, repr=False)  # ``model`` as a bundle stores it
    audit_floor: float | None = field(
        default=None, compare=False
    )  # the runtime audit's floor (yolo_edge.runtime.audit)

    @property
    def name(self) -> str:
        return unit_name(self.subgraphs, self.piece)

    @property
    def precision(self) -> str:
        return self.variant.precision


def plan_units(split: SplitModel, plan: PlacementPlan, fuse: bool = True) -> list[UnitPlan]:
    """The units the executor runs, in order.

    A subgraph with op-level CPU nodes is cut into its maximal same-device pieces (``neck.0``, ...).
    With ``fuse``, consecutive whole subgraphs on the same device at the same variant (precision, INT8 scheme and
    quantizer, no layers kept at higher precision) become one unit (``backbone+neck``): one NPU graph and one
    CPU session instead of two, as a vendor toolchain compiles it; no tensor crosses a device between them, so
    only per-subgraph timing is lost.
    ``benchmarks/split_vs_cpu.py --no-fuse`` measures what fusion gains.
    The decode is no unit: it runs FP32 on the CPU by rule, in the detector's post-processing, which decodes the
    head's raw outputs candidates first (``pipeline.postprocess``) instead of every anchor through its ONNX graph.
    """
    runs: list[tuple[tuple[str, Variant] | None, list[str]]] = []  # (device, variant) or None (op level, kept layers)
    for sg in split.subgraphs:
        sp = plan[sg.name]
        key = None if sp.cpu_nodes or sp.variant.kept or not part(sg.name).unit else (sp.device, sp.variant)
        if fuse and key is not None and runs and runs[-1][0] == key:
            runs[-1][1].append(sg.name)
        else:
            runs.append((key, [sg.name]))
    pieces = []
    if any(len(names) > 1 for _, names in runs):
        subgraph_of = split.exported.layout.subgraph_of
        pieces = cut(
            split.exported.load(),
            [[i for i, st in enumerate(subgraph_of) if SUBGRAPHS[st] in names] for _, names in runs],
            str(split.exported.path),
        )
    units: list[UnitPlan] = []
    for k, (_, names) in enumerate(runs):
        sp = plan[names[0]]
        device: Device = "npu" if sp.device == "npu" else "cpu"
        if len(names) > 1:
            units.append(UnitPlan(tuple(names), pieces[k].model, device, sp.variant))
        elif sp.cpu_nodes:
            model = split[names[0]].model
            groups, devices = device_runs(model, set(sp.cpu_nodes))
            units += [
                UnitPlan((names[0],), piece.model, "npu" if dev == "npu" else "cpu", sp.variant, j)
                for j, (piece, dev) in enumerate(zip(cut(model, groups, names[0]), devices))
            ]
        elif part(names[0]).unit:
            units.append(UnitPlan((names[0],), split[names[0]].model, device, sp.variant))
    return units


class _Lazy(Sequence[Tensors]):
    """A sequence made on first use (a backend that quantizes reads it; one that loads a stored unit does not)."""

    def __init__(self, make: Callable[[], list[Tensors]]) -> None:
        self._make = make
        self._items: list[Tensors] | None = None

    def _get(self) -> list[Tensors]:
        if self._items is None:
            self._items = self._make()
        return self._items

    def __len__(self) -> int:
        return len(self._get())

    @overload
    def __getitem__(self, i: int) -> Tensors: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Tensors]: ...
    def __getitem__(self, i: int | slice) -> Tensors | Sequence[Tensors]:
        return self._get()[i]

    def __iter__(self) -> Iterator[Tensors]:
        return iter(self._get())


class UnitFeeds:
    """The calibration images' tensors, grown unit by unit through the FP32 CPU twins in plan order: ``source``
    gives the first tensors (the boundary tensors of FP32 runs, or the images), run only when a compile reads a
    unit's feeds."""

    def __init__(self, source: Sequence[Tensors] | Callable[[], Sequence[Tensors]]) -> None:
        self._source = source
        self._tensors: list[Tensors] | None = None
        self._twins: list[Twin] = []
        self._ran = 0  # twins whose outputs are in the tensors

    def add(self, twin: Twin) -> CalibSet:
        """Register the next unit's CPU twin; its calibration feeds, made when first read."""
        self._twins.append(twin)
        k = len(self._twins)
        return _Lazy(lambda: self._feeds(k))

    def _feeds(self, k: int) -> list[Tensors]:
        if self._tensors is None:
            source = self._source() if callable(self._source) else self._source
            self._tensors = [dict(t) for t in source]
        for twin in self._twins[self._ran : k]:
            _grow(_ready(twin), self._tensors)
        self._ran = max(self._ran, k)
        names = [t.name for t in _ready(self._twins[k - 1]).inputs]
        return [{n: t[n] for n in names} for t in self._tensors]


def _grow(twin: Executable, tensors: Sequence[Tensors]) -> None:
    """Add ``twin``'s outputs to each of ``tensors`` that lacks them (an op-level piece's intermediate tensors)."""
    names = [t.name for t in twin.inputs]
    for t in tensors:
        if any(o.name not in t for o in twin.outputs):
            t.update(twin.run({n: t[n] for n in names}))


def unit_sample(planned: Sequence[UnitPlan], first: Tensors, builder: Builder) -> Tensors:
    """``first`` (one frame's boundary tensors) with the intermediate tensors of ``planned``'s op-level pieces,
    from FP32 runs of the pieces that produce them: every unit's inputs, what a bundle stores as its sample."""
    sample = dict(first)
    for unit in planned:
        if any(o.name not in sample for o in unit.model.graph.output):
            _grow(builder.fp32(unit.model), [sample])
    return sample


@dataclass
class UnitSources:
    """What units compile from: ``calib``, the accelerator's calibration feeds; ``sample``, one frame's tensors at
    every unit's inputs (grown with a piece's intermediate ones); ``subgraph(name)``, a subgraph's FP32 graph (a
    fused unit the compiler refuses is tried again as its subgraphs); ``artifacts``, each unit's stored files (a
    loaded bundle's)."""

    calib: UnitFeeds
    sample: dict[str, np.ndarray]
    subgraph: Callable[[str], onnx.ModelProto]
    artifacts: Mapping[str, Artifact] = field(default_factory=dict)


def compile_units(
    planned: Sequence[UnitPlan],
    sources: UnitSources,
    builder: Builder,
    events: EventLog,
    estimate_cpu: bool = True,
    loaded: bool = False,
) -> list[Unit]:
    """Compile ``planned`` through ``builder``: each unit's FP32 CPU twin, and an accelerator unit at its variant (its
    stored artifacts run as they are where the backend can; else it calibrates on the sources' ``calib``). A unit
    the compiler refuses runs on the CPU (an event); a fused unit it refuses is first tried again as its separate
    subgraphs. The ``sample`` warms each accelerator executable up and times its CPU twin, the hysteresis'
    estimate (``estimate_cpu``).

    ``loaded`` (a bundle loaded: a service's restart): an accelerator unit's CPU twin (its fallback) is compiled and
    timed on a thread of its own once the first frame is out, or at once if a fallback needs it first, and the first
    frame is the warm-up (``bench`` and ``check`` warm up before they time). The builder's board (a simulated
    board's CPU) prices each unit's CPU runs (``Unit.board_cpu_s``)."""
    calib, sample, subgraph, artifacts = sources.calib, sources.sample, sources.subgraph, sources.artifacts
    units: list[Unit] = []
    twins: list[Twin] = []  # every unit's so far, in order: what the sample grows through

    def add(unit: UnitPlan) -> None:
        own: Artifact = {FP32_SUFFIX: unit.stored} if unit.stored else {}
        if loaded and unit.device == "npu":
            twin: Twin = DeferredTwin(lambda: builder.fp32(unit.model, own))
        else:
            twin = builder.fp32(unit.model, own)
        feeds = calib.add(twin)
        names = [t.name for t in io_infos(unit.model)[0]]
        if any(n not in sample for n in names):  # a piece's input: run what precedes it on the sample
            for earlier in twins:
                _grow(_ready(earlier), [sample])
        twins.append(twin)
        ins = {n: sample[n] for n in names}
        npu_exe: Executable | None = None
        if unit.device == "npu" and builder.npu.is_reference(unit.variant):
            npu_exe = twin = _ready(twin)  # the accelerator is the reference itself: one session, not two
        elif unit.device == "npu":
            try:
                stored = {**own, **artifacts.get(unit.name, {})}
                npu_exe = builder.compile(unit.model, unit.variant, feeds, stored)
                npu_exe.warm_up(ins, 0 if loaded else WARM_UP_RUNS)
            except NpuCompileError as exc:
                if len(unit.subgraphs) > 1:  # refused as one graph: the subgraphs one by one
                    twins.pop()
                    for name in unit.subgraphs:
                        add(replace(unit, subgraphs=(name,), model=subgraph(name), stored=None))
                    return
                trigger: Trigger = "memory" if isinstance(exc, NpuOutOfMemory) else "unsupported_op"
                events.add(-1, unit.name, trigger, "compile_on_cpu", str(exc))
        units.append(_unit(unit, twin, npu_exe, ins, estimate_cpu, builder.board))

    for unit in planned:
        add(unit)
    return units


def _unit(
    unit: UnitPlan, twin: Twin, npu: Executable | None, feeds: Tensors, estimate: bool, board: BoardCpu | None
) -> Unit:
    """The compiled unit, its CPU estimate measured where a measured accelerator will be judged against it (once
    a deferred twin is built, on its thread), its CPU runs priced for a simulated ``board``."""
    modelled = npu.modelled_s if npu is not None else None
    measured = npu is not None and npu is not twin and modelled is None  # a modelled one is never judged slow
    built = Unit(unit.name, unit.subgraphs, twin if npu is not None else _ready(twin), npu, None, modelled)
    built.audit_floor = unit.audit_floor if npu is not None else None
    built.graph = unit.model
    built.board_cpu_s = board.graph_s(GraphInfo.of(unit.model)) if board is not None else None
    built.board = board

    def timed(exe: Executable) -> None:
        built.cpu_estimate_s = median_run_s(exe, feeds, ESTIMATE_RUNS)

    if measured and estimate and isinstance(twin, DeferredTwin):
        twin.then(timed)
    elif measured and estimate:
        timed(_ready(twin))
    return built


def _ready(twin: Twin) -> Executable:
    return twin.result() if isinstance(twin, DeferredTwin) else twin


def build_units(
    split: SplitModel,
    plan: PlacementPlan,
    builder: Builder,
    calib: Sequence[Tensors],
    events: EventLog,
    fuse: bool = True,
) -> list[Unit]:
    """Compile ``plan`` through ``builder`` (for its profile), calibrated on ``calib`` (boundary tensors of FP32
    runs; the first is the sample): :func:`plan_units`, then :func:`compile_units`."""
    planned = plan_units(split, plan, fuse)
    sources = UnitSources(UnitFeeds(calib), dict(calib[0]), lambda name: split[name].model)
    return compile_units(
        planned, sources, builder, events, builder.profile is not None and builder.profile.kind != "cpu"
    )


def whole_graph_unit(model: onnx.ModelProto, builder: Builder, variant: Variant, calib: Sequence[Tensors]) -> Unit:
    """The whole model as one unit on the NPU (with its FP32 CPU twin), compiled through ``builder``: the whole-graph
    plan (a simulated board's CPU, the builder's, prices the frames that fall back)."""
    board = builder.board
    twin = builder.fp32(model)
    npu_exe = builder.compile(model, variant, calib)
    npu_exe.warm_up(calib[0], WARM_UP_RUNS)
    cpu_s = median_run_s(twin, calib[0], ESTIMATE_RUNS)
    board_s = board.graph_s(GraphInfo.of(model)) if board is not None else None
    name = unit_name(SUBGRAPHS, None)  # as the reference's one unit is named: one name for the whole model
    return Unit(name, SUBGRAPHS, twin, npu_exe, cpu_s, npu_exe.modelled_s, board_cpu_s=board_s, board=board)


@dataclass(frozen=True)
class BatchPlan:
    """Frames a call of the accelerator units: ``asked`` (``run --batch``), what they run at, and why that is less
    (the accelerator's memory, or a compiler that takes one frame a call); ``memory``: the memory sized it."""

    asked: int = 1
    runs_at: int = 1
    why: str = ""
    memory: bool = False


def plan_batch(units: Sequence[Unit], builder: Builder, batch: int) -> BatchPlan:
    """The batch ``units`` (the accelerator units, resident together) run at when ``batch`` is asked: the largest that
    fits the profile's memory with a context per NPU core (``devices.limits.batch_fit``) and that the backend
    compiles (``Backend.max_batch``)."""
    profile = builder.profile
    if batch == 1 or not units or profile is None:
        why = "" if batch == 1 or units else "nothing runs on the accelerator: the CPU takes a frame a call"
        return BatchPlan(batch, 1, why)
    npu = builder.npu
    if npu.max_batch is not None and npu.max_batch < batch:
        return BatchPlan(batch, npu.max_batch, f"{profile.name}: {npu.batch_refusal}")
    held = Residency(batch, profile.npu_cores, npu.memory)
    uses = [memory_use(GraphInfo.of(_graph(u)), u.npu.precision, u.npu.variant.scheme, held) for u in units if u.npu]
    fit = batch_fit(uses, profile)
    if fit >= batch:
        return BatchPlan(batch, batch)
    need = sum(u.dram_at(batch) for u in uses) / 2**20
    contexts = f", {profile.npu_cores} contexts" if profile.npu_cores > 1 else ""
    why = (
        f"batch {batch} needs {need:.1f} MiB > the accelerator's {profile.memory_mb:.1f} MiB (its units together"
        f"{contexts}): runs as sub-batches of {max(1, fit)}"
    )
    return BatchPlan(batch, max(1, fit), why, memory=True)


PAY_ROUNDS = 5  # rounds in which a batch must be at least as fast a frame as batch 1 to be used


def batch_units(
    units: Sequence[Unit], builder: Builder, batch: int, events: EventLog, sample: Tensors | None = None
) -> BatchPlan:
    """Give each accelerator unit of ``units`` an executable taking the batch :func:`plan_batch` chooses, compiled
    from what its batch-1 executable runs (the same quantized graph: no calibration again), and what compiles it at
    another (``Unit.rebatch``), where the batch pays (:func:`batch_pays`, on ``sample``: a frame's boundary tensors);
    a ``memory`` event where the memory sizes the batch below ``batch``. A unit its compiler refuses at the batch, or
    on which the batch does not pay, keeps a frame a call (said in the plan's ``why``)."""
    accel = [u for u in units if u.npu is not None and u.npu is not u.twin and u.graph is not None]
    chosen = plan_batch(accel, builder, batch)
    if chosen.memory:
        events.add(-1, ",".join(u.name for u in accel), "memory", "sub_batch", chosen.why)
    said = []
    for unit in accel if chosen.runs_at > 1 else ():
        batched, why_not = _batched(unit, builder, chosen.runs_at, sample)
        if batched is None:
            said.append(why_not)
            continue
        unit.batched, unit.rebatch = batched, _rebatch(unit, builder)
    return replace(chosen, why="; ".join([chosen.why, *said]).strip("; ")) if said else chosen


def _batched(unit: Unit, builder: Builder, size: int, sample: Tensors | None) -> tuple[Executable | None, str]:
    """``unit``'s accelerator executable at ``size`` frames a call where it compiles and pays (on ``sample``), else
    None and why the unit runs a frame a call."""
    try:
        batched = _rebatch(unit, builder)(size)
    except NpuCompileError as exc:
        return None, f"{unit.name} runs a frame a call ({exc})"
    why_not = "" if sample is None else batch_pays(unit, batched, sample)
    return (None, f"{unit.name} runs a frame a call: {why_not}") if why_not else (batched, "")


@dataclass(frozen=True)
class BatchProof:
    """A deploy's batch (``deploy --batch N``) checked on its accelerator units: what they run at and why
    (:class:`BatchPlan`), and for each unit batched the largest difference of a frame's row of a batched call from its
    batch-1 call over ``frames`` real frames, relative to the output's range (0.0: bit for bit)."""

    plan: BatchPlan
    difference: dict[str, float]
    frames: int

    def to_dict(self) -> dict[str, object]:
        p = self.plan
        return {
            "asked": p.asked,
            "runs_at": p.runs_at,
            "why": p.why,
            "frames": self.frames,
            "difference": self.difference,
        }


def prove_batch(units: Sequence[Unit], builder: Builder, batch: int, frames: Sequence[Tensors]) -> BatchProof:
    """``batch`` as ``run`` would take it on ``units`` (:func:`plan_batch`, then each unit's batch where it compiles and
    pays), each batched unit's frames against their batch-1 calls (:func:`row_difference`, on ``frames``: boundary
    tensors of real images); ``units`` are left as they were (a frame a call)."""
    accel = [u for u in units if u.npu is not None and u.npu is not u.twin and u.graph is not None]
    chosen = plan_batch(accel, builder, batch)
    said, differences = [], {}
    for unit in accel if chosen.runs_at > 1 else ():
        batched, why_not = _batched(unit, builder, chosen.runs_at, frames[0])
        if batched is None:
            said.append(why_not)
            continue
        differences[unit.name] = row_difference(unit, batched, frames)
    why = "; ".join([chosen.why, *said]).strip("; ")
    return BatchProof(replace(chosen, why=why), differences, len(frames))


def row_difference(unit: Unit, batched: Executable, frames: Sequence[Tensors]) -> float:
    """The largest difference between a frame's row of one call of ``batched`` (filled with ``frames`` in turn) and
    ``unit``'s batch-1 call on that frame, relative to the output's range (0.0: bit for bit)."""
    npu, size = unit.npu, batched.inputs[0].shape[0]
    assert npu is not None and frames
    rows = [{n: frames[i % len(frames)][n] for n in unit.input_names} for i in range(size)]
    out = batched.run({n: np.concatenate([r[n] for r in rows]) for n in unit.input_names})
    worst = 0.0
    for i, row in enumerate(rows):
        for name, alone in npu.run(row).items():
            scale = float(np.abs(alone).max()) or 1.0
            worst = max(worst, float(np.abs(out[name][i : i + 1] - alone).max()) / scale)
    return worst


def batch_pays(unit: Unit, batched: Executable, sample: Tensors, rounds: int = PAY_ROUNDS) -> str:
    """Why ``batched`` does not pay for ``unit`` ('' where it does): a frame of a batched call must take no longer
    than a batch-1 call, by the board's model where the accelerator's time is modelled, else measured here on
    ``sample`` in ``rounds`` rounds (each: a batch of batch-1 calls and one batched call, in turn) and in every one."""
    npu, size = unit.npu, batched.inputs[0].shape[0]
    assert npu is not None
    if npu.modelled_s is not None and batched.modelled_s is not None:
        ratio = npu.modelled_s * size / batched.modelled_s
        return "" if ratio >= 1.0 - 1e-9 else f"batch {size} is x{ratio:.2f} the frames a second of batch 1 (modelled)"
    ratios = pay_rounds(npu, batched, {n: sample[n] for n in unit.input_names}, rounds)
    slow = next((k for k, r in enumerate(ratios) if r < 1.0), None)
    if slow is None:
        return ""
    return f"batch {size} was x{ratios[slow]:.2f} the frames a second of batch 1 in round {slow + 1} of {rounds} here"


def pay_rounds(one: Executable, batched: Executable, row: Tensors, rounds: int) -> list[float]:
    """Each round's frames a second of ``batched`` over ``one`` (a batch-1 executable of the same unit) on ``row`` (a
    frame's inputs, repeated to fill the batch): a round is as many calls of ``one`` as the batch has frames, then one
    call of ``batched``, so that a machine that slows meanwhile slows both alike; after one untimed call of each."""
    size = batched.inputs[0].shape[0]
    rows = {n: np.concatenate([a] * size) for n, a in row.items()}
    one.run(row)
    batched.run(rows)  # untimed: a fresh executable's first call allocates
    ratios = []
    for _ in range(rounds):
        alone = 0.0
        for _ in range(size):
            one.run(row)
            alone += one.last_run_s
        batched.run(rows)
        ratios.append(alone / batched.last_run_s)
    return ratios


def _rebatch(unit: Unit, builder: Builder) -> Callable[[int], Executable]:
    """What compiles ``unit``'s accelerator executable at a batch: from its batch-1 executable's own program."""
    npu, graph = unit.npu, _graph(unit)
    assert npu is not None

    def compiled(batch: int) -> Executable:
        return builder.compile(graph, npu.variant, None, npu.artifact_files(), batch)

    return compiled


def _graph(unit: Unit) -> onnx.ModelProto:
    assert unit.graph is not None, "a compiled unit keeps its FP32 graph"
    return unit.graph
