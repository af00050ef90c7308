"""Configuration: frozen dataclasses for the deploy settings and device profiles, read from YAML.

Unknown keys and wrong types are one-line errors naming the key and the file. Defaults live in the
shipped ``configs/default.yaml`` and ``configs/devices/*.yaml``, not in code.

Example:
    >>> cfg = load_deploy_config()  # configs/default.yaml
    >>> cfg.checks.performance.max_ratio
    1.5
    >>> load_profile("sim-edge-npu").memory_mb
    4096.0
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Final, Literal, TypeVar

import yaml

from yolo_edge.core import registry
from yolo_edge.core.bounds import Range
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import read_regular
from yolo_edge.core.registry import RuntimeOptions

PrecisionName = Literal["fp32", "fp16", "bf16", "int8"]
PRECISIONS: tuple[PrecisionName, ...] = typing.get_args(PrecisionName)
PRECISION_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}
CHECKS = ("op_support", "memory", "precision", "performance")
# INT8 activations: u8 uint8 asymmetric, s8 int8 symmetric (zero point 0) (OpenVINO, onnxruntime); w8a8 (Rockchip,
# Qualcomm), w8a16 (Qualcomm: uint8 weights, uint16 activations)
Scheme = str  # an INT8 activation scheme some registered backend compiles (registry.schemes())
Quantizer = str  # an INT8 quantizer some registered backend runs (registry.quantizers())
# "real": runs on hardware present here; "simulated": numerics real, latency modelled; "cpu": the host alone
ProfileKind = Literal["real", "simulated", "cpu"]
# How a latency is obtained, the one vocabulary: a figure (a profile's, a check's, a unit's) is measured or modelled;
# a frame's figures are named by their phases' kinds: all measured, the NPU's modelled and the CPU's measured (a
# simulated NPU on this host), or every phase modelled for the board (its NPU and its CPU model)
LatencyKind = Literal["measured", "modelled"]
BOARD: Final = "modelled (board)"
FrameKind = Literal["measured", "modelled NPU + measured CPU", "modelled (board)"]
FaultKind = Literal["error", "nan", "hang", "degrade", "oom"]  # oom: an allocation fails at run time (a burst)
AuditAction = Literal["move_to_cpu", "alert"]
# photometric conditions a plan is judged under beside the judging images as they are (validate/conditions.py)
Condition = Literal["dark", "night", "bright", "low_contrast", "noise", "blur", "jpeg"]
Device = Literal["npu", "cpu"]  # where a subgraph or a unit runs
# INT8 schemes whose activations are wider than a byte (Qualcomm's w8a16: uint8 weights, uint16 activations)
ACTIVATION_BYTES = {"w8a16": 2}
MAX_STREAMS = 64  # deploy --streams: the most cameras one plan is judged for
MAX_BATCH = 256  # the most frames one call of a unit may take (plan.batch, deploy --batch)

T = TypeVar("T")

# upper bounds of the counts a config sets: well past any useful value, short of a run that never ends (1e30 runs)
MAX_RUNS = 100_000
MAX_IMAGES = 100_000


@dataclass(frozen=True)
class Variant:
    """How one unit is compiled: a precision; for INT8 its activation scheme and its quantizer; and, for
    layer-level mixed precision, the layers (ONNX node names) kept at the backend's higher precision.

    Example:
        >>> Variant.parse("int8/s8/nncf").label
        'int8/s8/nncf'
        >>> Variant("int8", "u8", "nncf", kept=("/model.22/cv3.0/cv3.0.2/Conv",)).label
        'int8/u8/nncf+1'
    """

    precision: PrecisionName
    scheme: Scheme | None = None  # INT8 activations; None: not INT8 (or the backend's first)
    quantizer: Quantizer | None = None  # INT8; None: the backend's first
    # layers left out of quantization, as the backend names them: ONNX node names (NNCF's ignored scope, onnxruntime's
    # nodes_to_exclude), output tensors (Rockchip's hybrid quantization)
    kept: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """A variant read from a plan (a bundle's ``plan.json``, a hand-written plan) names what exists (the registry
        is asked only for a scheme or a quantizer: a module's ``Variant("fp32")`` reads no plug-in at import)."""
        for what, value, valid in (
            ("precision", self.precision, lambda: PRECISIONS),
            ("INT8 scheme", self.scheme, registry.schemes),
            ("quantizer", self.quantizer, registry.quantizers),
        ):
            if value is not None and value not in valid():
                shown = ", ".join(v for v in valid() if v)
                raise YoloEdgeError(f"unknown {what} '{value}' in a precision variant; valid: {shown}")
        if self.precision != "int8" and (self.scheme or self.quantizer):
            raise YoloEdgeError(f"'{self.label}': only int8 has a scheme and a quantizer")

    @property
    def label(self) -> str:
        """``int8/u8/nncf``, ``bf16``; ``+N`` counts the layers kept at higher precision."""
        parts = [self.precision, *(p for p in (self.scheme, self.quantizer) if p)]
        return "/".join(parts) + (f"+{len(self.kept)}" if self.kept else "")

    @classmethod
    def parse(cls, text: str) -> Variant:
        """``int8``, ``int8/s8``, ``int8/u8/qdq``, ``bf16`` (what hand-written plans and the CLI take)."""
        precision, *rest = text.split("/")
        if precision not in PRECISIONS or len(rest) > 2 or (rest and precision != "int8"):
            raise YoloEdgeError(
                f"'{text}' is not a precision variant; write fp32, bf16, fp16, int8, int8/SCHEME or "
                "int8/SCHEME/QUANTIZER"
            )
        scheme = rest[0] if rest else None
        quantizer = rest[1] if len(rest) > 1 else None
        # the scheme and the quantizer are checked where every variant is (__post_init__)
        typed = typing.cast(PrecisionName, precision)
        return cls(typed, typing.cast(Scheme | None, scheme), typing.cast(Quantizer | None, quantizer))


# ---------------------------------------------------------------- deploy settings (configs/default.yaml)


@dataclass(frozen=True)
class NmsConfig:
    conf: Annotated[float, Range(0, 1, lo_open=True)]
    iou: Annotated[float, Range(0, 1, lo_open=True)]
    max_det: Annotated[int, Range(1)]
    multi_label: bool = False  # every class above conf per box (ultralytics' validator) or the best only
    classes: tuple[int, ...] | None = None  # keep only these class ids (ultralytics' classes=): None, every class


@dataclass(frozen=True)
class PrecisionCheckConfig:
    min_cosine: Annotated[float, Range(-1, 1)]  # end to end: the detector output's cosines vs FP32; below: broken
    max_flips: Annotated[float, Range(0, 1)]  # end to end: the share of scores crossing nms.conf; over it: broken
    local_min_cosine: Annotated[float, Range(-1, 1)]  # the subgraph's own outputs: below it a warning only
    images: Annotated[int, Range(1, MAX_IMAGES)]


@dataclass(frozen=True)
class PerformanceCheckConfig:
    max_ratio: Annotated[float, Range(0, lo_open=True)]
    warmup: Annotated[int, Range(0, MAX_RUNS)]
    runs: Annotated[int, Range(1, MAX_RUNS)]


@dataclass(frozen=True)
class ChecksConfig:
    order: tuple[str, ...]
    precision: PrecisionCheckConfig
    performance: PerformanceCheckConfig


@dataclass(frozen=True)
class PlanConfig:
    head_on_npu: str  # "auto" (the head where the checks and the verdict put it) or "never" (the card: FP32 on the CPU)
    op_level: bool  # consider op-level fallback for isolated unsupported ops
    search_candidates: Annotated[
        int, Range(1, MAX_RUNS)
    ]  # placements the search judges with the verdict (drift, SLA), fastest first
    search_seconds: Annotated[
        float, Range(0, 86400, lo_open=True)
    ]  # the search's wall-time budget: then the best passing so far
    search_margin: Annotated[
        float, Range(0, 1)
    ]  # candidates estimated within this fraction of a passing one are judged too
    tie_margin: Annotated[
        float, Range(0, 1)
    ]  # passing plans whose measured medians are within this fraction of the fastest are a tie
    max_kept_layers: Annotated[
        int, Range(0)
    ]  # layer-level mixed precision: most layers of one unit kept at higher precision
    # sequential judging: a trial's drift is judged first on these fractions of the judging images (one seeded sample,
    # the same for every trial), at an interval widened for the looks, and stops where one decides it; the chosen plan
    # is judged on every image ([]: every trial on every image)
    search_looks: tuple[float, ...] = (0.25, 0.5)
    # frames a call of an accelerator unit is planned for (deploy --batch): the memory check counts them; one larger
    # than fits runs as sub-batches of the largest that does (report.json memory.batch_fit)
    batch: Annotated[int, Range(1, MAX_BATCH)] = 1
    # cameras the plan must serve at once (deploy --streams), each at fps frames a second (deploy --fps): with either
    # set, the verdict judges the throughput (devices/throughput.py: every frame, p95 within the SLA)
    streams: Annotated[int, Range(1, MAX_STREAMS)] = 1
    fps: Annotated[float | None, Range(0, 1000, lo_open=True)] = None

    def __post_init__(self) -> None:
        looks = self.search_looks
        if any(not 0 < f < 1 for f in looks) or list(looks) != sorted(set(looks)):
            raise YoloEdgeError(f"plan.search_looks must be increasing fractions between 0 and 1, got {list(looks)}")


@dataclass(frozen=True)
class RuntimeConfig:
    unit_timeout_s: Annotated[float, Range(0, 3600, lo_open=True)]
    breaker_failures: Annotated[int, Range(1)]  # K consecutive NPU failures open the breaker
    breaker_cooldown_s: Annotated[float, Range(0)]  # then a half-open probe after this long
    slow_frames: Annotated[int, Range(1)]  # N consecutive slow frames move a unit to the CPU
    recover_probes: Annotated[int, Range(1)]  # M consecutive good probes move it back
    probe_every: Annotated[int, Range(1)]  # frames between probes of a unit parked on the CPU
    slow_ratio: Annotated[float, Range(1)]  # "slow" = unit time above this times its CPU estimate
    fuse_units: bool  # consecutive subgraphs on one device at one precision run as one compiled unit
    # the precision audit (yolo_edge/runtime/audit.py): every audit_every-th frame (0: never; audit_every_failed after a
    # failed audit) an accelerator unit's output is compared with its FP32 CPU twin's, off the frame's path; K failed
    # audits of the last W are a precision event, whose action moves the unit to the CPU (probed back by audits) or
    # only says so
    audit_every: Annotated[int, Range(0, MAX_RUNS)] = 30
    audit_every_failed: Annotated[int, Range(1, MAX_RUNS)] = 5
    audit_window: Annotated[int, Range(1, 1000)] = 10
    audit_failures: Annotated[int, Range(1, 1000)] = 3
    audit_action: AuditAction = "move_to_cpu"
    audit_budget: Annotated[float, Range(0.001, 1)] = 0.01  # the audit worker's share of a core, at most

    def __post_init__(self) -> None:
        if self.audit_action not in typing.get_args(AuditAction):
            raise YoloEdgeError(f"runtime.audit_action must be move_to_cpu or alert, got '{self.audit_action}'")
        if self.audit_failures > self.audit_window:
            raise YoloEdgeError(
                f"runtime.audit_failures ({self.audit_failures}) cannot exceed audit_window ({self.audit_window})"
            )


@dataclass(frozen=True)
class ValidateConfig:
    max_drift: Annotated[float, Range(0, 1)]
    sla_ms: Annotated[float, Range(0, lo_open=True)]
    latency_warmup: Annotated[int, Range(0, MAX_RUNS)]
    latency_runs: Annotated[int, Range(1, MAX_RUNS)]
    max_regression: Annotated[float, Range(0, 10)]  # +1000 %: a larger allowance is no gate
    agreement_draws: Annotated[int, Range(1, 1000)]  # no labels: pseudo-label draws from the FP32 reference's output
    agreement_box_noise: Annotated[
        float, Range(0, 0.5, hi_open=True)
    ]  # each pseudo-true box edge moves by this x its size
    bootstrap: Annotated[int, Range(20, MAX_RUNS)]  # paired bootstrap replicates of every drift (validate/bootstrap.py)
    confidence: Annotated[float, Range(0.5, 1, hi_open=True)]  # the drift intervals' coverage
    # conditions the calibration never saw (validate/conditions.py): deploy judges the split and the design card's
    # layout under each, on the first conditions_images judging images; conditions_verdict makes each condition's
    # drift part of the split's verdict; calibrate_conditions changes every other calibration image by one of them
    conditions: tuple[Condition, ...] = ()
    conditions_images: Annotated[int, Range(1, MAX_IMAGES)] = 100
    conditions_verdict: bool = False
    calibrate_conditions: bool = False


@dataclass(frozen=True)
class DeployConfig:
    calib_images: Annotated[int, Range(1, MAX_IMAGES)]
    nms: NmsConfig
    val_nms: NmsConfig
    checks: ChecksConfig
    plan: PlanConfig
    runtime: RuntimeConfig
    validate: ValidateConfig

    def __post_init__(self) -> None:
        bad = [c for c in self.checks.order if c not in CHECKS]
        if bad or sorted(self.checks.order) != sorted(CHECKS):
            raise YoloEdgeError(f"checks.order must list each of {list(CHECKS)} once, got {list(self.checks.order)}")
        if self.plan.head_on_npu not in ("never", "auto"):
            raise YoloEdgeError(f"plan.head_on_npu must be 'never' or 'auto', got '{self.plan.head_on_npu}'")


# ---------------------------------------------------------------- device profiles (configs/devices/*.yaml)

# a device's physical figure (GB/s, GFLOP/s, TOPS, MB): a subnormal or absurd one would print latencies of 300
# digits, or inf, in a report
FIGURE = Range(1e-6, 1e9)


@dataclass(frozen=True)
class OpLimit:
    """Limits on one op type; ``None`` means no limit."""

    max_hw: Annotated[int | None, Range(1)] = None  # largest H*W (product of the trailing two dims) of any input
    max_channels: Annotated[int | None, Range(1)] = None  # most channels (dimension 1) of any input
    max_rank: Annotated[int | None, Range(1)] = None  # most dimensions of any input


@dataclass(frozen=True)
class OpSupport:
    mode: str  # "all", "list" (ops below only) or "query" (ask the runtime, OpenVINO query_model)
    ops: dict[str, OpLimit] = field(default_factory=dict)  # with mode list: each op type the NPU runs, its limits

    def __post_init__(self) -> None:
        if self.mode not in ("all", "list", "query"):
            raise YoloEdgeError(f"op_support.mode must be all, list or query, got '{self.mode}'")


@dataclass(frozen=True)
class Link:
    gbps: Annotated[float, FIGURE]  # host <-> accelerator bandwidth, GB/s
    latency_us: Annotated[float, Range(0, FIGURE.hi)]  # per transfer


@dataclass(frozen=True)
class CpuModel:
    """The board's CPU, for modelled profiles: FP32 throughput, DRAM bandwidth, per-op overhead."""

    gflops: Annotated[float, FIGURE]  # FP32 arithmetic rate, 1e9 FLOP/s
    dram_gbps: Annotated[float, FIGURE]  # activation and weight traffic, GB/s
    op_overhead_us: Annotated[float, Range(0, FIGURE.hi)]  # one launch per op


@dataclass(frozen=True)
class Multicore:
    """How the accelerator's cores serve several frames at once (``devices/throughput.py``), fitted to published
    figures for the board (``benchmarks/throughput.py`` fits them and prints the figure held out)."""

    # the host's time a call, off the core (the runtime's call overhead): with one context a core the core idles
    # through it, a second context's call fills it
    call_gap_us: Annotated[float, Range(0, FIGURE.hi)] = 0.0
    # the share of one call that one context on all cores splits across them (Amdahl's law); 0: no such mode
    parallel_fraction: Annotated[float, Range(0, 1)] = 0.0
    # the model's relative error on the published figure it was not fitted to (None: not checked)
    held_out_error: Annotated[float | None, Range(0, 10)] = None
    # how a stream runs an accelerator unit: this many contexts pinned to each core, or one context on all the cores
    # (all_cores); deploy --streams writes the way it chose into the bundle's profile
    contexts_per_core: Annotated[int, Range(1, 4)] = 1
    all_cores: bool = False

    def contexts(self, cores: int) -> int:
        """The contexts a stream holds of one accelerator unit on ``cores`` cores."""
        return 1 if self.all_cores else self.contexts_per_core * cores

    def share(self, cores: int) -> float:
        """A call's time with one context on all ``cores`` against on one core (Amdahl's law; 1 otherwise)."""
        p = self.parallel_fraction
        return 1 - p + p / cores if self.all_cores and cores > 1 else 1.0


@dataclass(frozen=True)
class Faults:
    """Fault injection for simulated NPUs: per-call probabilities, deterministic from ``seed``, plus an
    optional burst: calls ``burst_start`` .. ``burst_start + burst_len - 1`` all fail with ``burst_kind``."""

    error_rate: Annotated[float, Range(0, 1)] = 0.0
    nan_rate: Annotated[float, Range(0, 1)] = 0.0
    hang_rate: Annotated[float, Range(0, 1)] = 0.0
    hang_s: Annotated[float, Range(0)] = 0.0
    # silently wrong numerics: each output scaled by (1 + degrade_noise x N(0, 1)) per element, finite (no NaN)
    degrade_rate: Annotated[float, Range(0, 1)] = 0.0
    degrade_noise: Annotated[float, Range(0, 100)] = 0.5
    seed: int = 0
    burst_start: int = -1
    burst_len: Annotated[int, Range(0)] = 0
    burst_kind: FaultKind = "error"
    # only calls on this accelerator core fail (a board with several: one core failing under load); the burst counts
    # that core's calls. None: every call may
    core: Annotated[int | None, Range(0, 63)] = None

    def __post_init__(self) -> None:
        if self.burst_kind not in typing.get_args(FaultKind):
            raise YoloEdgeError(f"faults.burst_kind must be error, nan, hang, degrade or oom, got '{self.burst_kind}'")
        if self.error_rate + self.nan_rate + self.hang_rate + self.degrade_rate > 1:
            raise YoloEdgeError("faults: error_rate + nan_rate + hang_rate + degrade_rate must not exceed 1")

    @property
    def any(self) -> bool:
        """Whether any call can fail (or degrade)."""
        return self.error_rate + self.nan_rate + self.hang_rate + self.degrade_rate > 0 or self.burst_len > 0


PEAK_TOPS = FIGURE  # each precision's figure in a profile's peak_tops


# the most accelerator cores a profile may declare: the shipped boards have 1-3; a stream runs a context and a
# thread per core, so a bundle's npu_cores is bounded here, not by the machine's memory
MAX_NPU_CORES = 16


@dataclass(frozen=True)
class DeviceProfile:
    name: str  # what --device names it by (a shipped profile: its file name)
    description: str  # one line, shown by yolo-edge devices
    kind: ProfileKind  # real (its latency measured here), simulated (numerics real, latency modelled), cpu
    runtime: str  # a registered backend (yolo_edge.core.registry): rknn a toolchain worker, qnn onnxruntime-qnn, ...
    runtime_options: RuntimeOptions  # that backend's own options dataclass
    precisions: tuple[PrecisionName, ...]  # in order of preference
    latency: LatencyKind  # measured (timed here) or modelled (the cost models below, or the compiler's estimate)
    memory_mb: Annotated[float, FIGURE]  # the accelerator's DRAM budget: live activations + weights
    sram_kb: Annotated[float | None, Range(0, FIGURE.hi)]  # on-chip SRAM for working sets that do not tile
    op_support: OpSupport  # which ops the accelerator runs
    peak_tops: dict[str, float]  # per precision, 1e12 ops/s (each checked in __post_init__)
    utilization: Annotated[float, Range(0, 1, lo_open=True)]  # fraction of peak that convolutions reach
    dram_gbps: Annotated[float, FIGURE]  # the accelerator's activation traffic, GB/s (the NPU cost model)
    op_overhead_us: Annotated[float, Range(0, FIGURE.hi)]  # its launch per op
    link: Link  # host <-> accelerator transfers
    cpu: CpuModel | None = None  # the board's CPU, for modelled profiles (docs/board-cpu.md)
    faults: Faults = Faults()  # injected accelerator faults (simulated profiles), to exercise the fallback
    npu_cores: int = 1  # accelerator cores: a stream runs a pool of one context per core (RK3588: 3)
    multicore: Multicore = Multicore()  # how the cores serve several frames at once (deploy --streams)
    # the Ray custom resource of the nodes that hold this device (its board, its toolchain, its GPU): a sweep's
    # configurations for it run only there; none: any node (the host CPU, a simulation with its stack in the main env)
    node_resource: str | None = None

    @property
    def stand_in(self) -> str | None:
        """What "npu" is on a profile whose accelerator is this host's CPU (OpenVINO's CPU plugin): said wherever
        the placement is shown. None: a real or simulated accelerator."""
        return self.runtime_options.stand_in()

    def __post_init__(self) -> None:
        where = f"device profile '{self.name}'"
        for name, allowed in (("kind", ProfileKind), ("latency", LatencyKind)):
            value, valid = getattr(self, name), typing.get_args(allowed)
            if value not in valid:
                raise YoloEdgeError(f"{where}: {name} must be one of {', '.join(valid)}, got '{value}'")
        options = registry.spec(self.runtime).options
        if not isinstance(self.runtime_options, options):
            raise YoloEdgeError(f"{where}: runtime_options of {self.runtime} must be its {options.__name__}")
        bad = [p for p in self.precisions if p not in PRECISIONS]
        if bad or not self.precisions:
            raise YoloEdgeError(
                f"{where}: precisions must be a non-empty list of {list(PRECISIONS)}, got {list(self.precisions)}"
            )
        if self.sram_kb is not None and self.sram_kb > self.memory_mb * 1024:
            raise YoloEdgeError(f"{where}: sram_kb {self.sram_kb:g} is more than memory_mb {self.memory_mb:g} (in KB)")
        if not 1 <= self.npu_cores <= MAX_NPU_CORES:  # each core is a context and a worker thread in a stream
            raise YoloEdgeError(f"{where}: npu_cores must be between 1 and {MAX_NPU_CORES}, got {self.npu_cores}")
        missing = [p for p in self.precisions if p not in self.peak_tops]
        if missing:
            raise YoloEdgeError(f"{where}: peak_tops has no figure for {missing}")
        bad_tops = {p: v for p, v in self.peak_tops.items() if not PEAK_TOPS.holds(v)}
        if bad_tops:
            raise YoloEdgeError(f"{where}: peak_tops must each be {PEAK_TOPS}, got {bad_tops}")
        if self.latency == "modelled" and self.cpu is None:
            raise YoloEdgeError(
                f"{where}: a modelled profile needs a 'cpu' section (the board's CPU) to compare against"
            )


# ---------------------------------------------------------------- strict YAML -> dataclass


def _fail(where: str, msg: str) -> typing.NoReturn:
    raise YoloEdgeError(f"{where}: {msg}")


def one_of(value: Any, allowed: Any, what: str) -> Any:
    """``value`` read from a file, checked to be one of the ``Literal`` type ``allowed`` (a one-line error naming
    ``what`` otherwise): where a bundle's JSON meets a typed field."""
    valid = typing.get_args(allowed)
    if value not in valid:
        raise YoloEdgeError(f"{what} must be one of {', '.join(map(str, valid))}, got {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    """``value`` for an error line: its repr, cut short (a YAML value can be megabytes)."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, where)
    if dataclasses.is_dataclass(tp):
        if isinstance(tp, type) and isinstance(value, tp):  # built already (a profile's runtime_options)
            return value
        return build(tp, value, where)  # type: ignore[arg-type]
    if origin is tuple:
        if not isinstance(value, list | tuple):
            _fail(where, f"expected a list, got {type(value).__name__} {_shown(value)}")
        return tuple(_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            _fail(where, f"expected a mapping, got {type(value).__name__} {_shown(value)}")
        return {str(k): _convert(args[1], v if v is not None else {}, f"{where}.{k}") for k, v in value.items()}
    if origin is Literal:
        if value not in args:
            _fail(where, f"must be one of {', '.join(map(str, args))}, got {_shown(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            _fail(where, f"expected a number, got {type(value).__name__} {_shown(value)}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            _fail(where, f"expected an integer, got {type(value).__name__} {_shown(value)}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            _fail(where, f"expected true or false, got {_shown(value)}")
        return value
    if tp is str:
        if not isinstance(value, str):
            _fail(where, f"expected a string, got {type(value).__name__} {_shown(value)}")
        return value
    raise TypeError(f"unsupported config type {tp}")


_FIELDS: dict[type, tuple[dict[str, Any], dict[str, dataclasses.Field[Any]]]] = {}


def _fields(cls: type) -> tuple[dict[str, Any], dict[str, dataclasses.Field[Any]]]:
    """A config dataclass' resolved type hints and its fields (resolving the hints is most of the time it takes to
    read a profile: once per class)."""
    if cls not in _FIELDS:
        _FIELDS[cls] = typing.get_type_hints(cls, include_extras=True), {f.name: f for f in dataclasses.fields(cls)}
    return _FIELDS[cls]


def build(cls: type[T], data: Any, where: str) -> T:
    """Build dataclass ``cls`` from a YAML mapping, rejecting unknown keys and wrong types."""
    if not isinstance(data, dict):
        _fail(where, f"expected a mapping, got {type(data).__name__}")
    hints, fields = _fields(cls)
    unknown = sorted(set(data) - set(fields))
    if unknown:
        _fail(where, f"unknown key '{unknown[0]}' (valid: {', '.join(fields)})")
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                _fail(where, f"missing key '{name}'")
            continue
        hint, bound = hints[name], None
        if typing.get_origin(hint) is Annotated:
            hint, bound = hint.__origin__, next(m for m in hint.__metadata__ if isinstance(m, Range))
        kwargs[name] = value = _convert(hint, data[name], f"{where}.{name}")
        if bound is not None and value is not None and not bound.holds(value):
            _fail(f"{where}.{name}", f"must be {bound}, got {value!r}")
    return cls(**kwargs)


MAX_YAML_BYTES = 1 << 20  # a config, profile or data.yaml is a few KB


# libyaml's parser where PyYAML was built with it (its pure-Python one is ten times slower: a bundle's two YAML
# files were a sixth of the time to its first frame)
_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load_no_aliases(text: str) -> Any:
    """``yaml.safe_load`` without aliases: no config needs them, and a few hundred bytes of nested aliases (a
    "billion laughs") expand to gigabytes; refused from the parser's events, before anything is composed."""
    for event in yaml.parse(text, Loader=_SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed", event.start_mark)
    return yaml.load(text, Loader=_SafeLoader)  # noqa: S506 (a SafeLoader)


def read_yaml(path: Path, what: str = "config file") -> Any:
    """The YAML document at ``path``: a regular text file of at most 1 MiB, no aliases; else a one-line error."""
    data = read_regular(path, what, MAX_YAML_BYTES)
    try:
        return safe_load_no_aliases(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise YoloEdgeError(f"{path} is not a text file; name a YAML file") from None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None)
        raise YoloEdgeError(f"{path} is not valid YAML ({problem or type(exc).__name__})") from None


def configs_dir() -> Path:
    """The shipped configs (``configs/`` in the source tree, packaged as ``yolo_edge/configs``)."""
    return Path(str(resources.files("yolo_edge") / "configs"))


def load_deploy_config(path: str | Path | None = None) -> DeployConfig:
    """The deploy settings: the shipped ``configs/default.yaml``, with ``path``'s laid over it key by key (a file
    sets only what it changes: ``validate: {max_drift: 0.02}`` alone is a whole config), strictly validated (an
    unknown key, a wrong type or a value out of range is a one-line error naming it in ``path``)."""
    default = configs_dir() / "default.yaml"
    if not path:
        return build(DeployConfig, read_yaml(default), str(default))
    p = Path(path)
    return build(DeployConfig, overlay(read_yaml(default), read_yaml(p)), str(p))


def load_stored_config(path: Path) -> DeployConfig:
    """A bundle's ``deploy.yaml``, which its deploy wrote whole: every key present, nothing laid over a default (a
    bundle written before a key was renamed reads with the key's new name: :func:`upgraded`)."""
    return build(DeployConfig, upgraded(read_yaml(path)), str(path))


# checks.precision.max_score_error (a constant tuned on the demo) became max_flips (scaled by the model's own scores
# at its operating confidence) on 2026-12-07: a bundle's deploy already ran its checks, the shipped default stands in
RENAMED = (("checks", "precision", "max_score_error", "max_flips"),)


def upgraded(data: Any) -> Any:
    """A bundle's stored settings with the keys of :data:`RENAMED` under their new names (the shipped default's
    value: the old key's meant something else)."""
    for section, sub, old, new in RENAMED:
        part = data.get(section) if isinstance(data, dict) else None
        held = part.get(sub) if isinstance(part, dict) else None
        if isinstance(held, dict) and old in held and new not in held:  # the default read only for an old bundle
            default = read_yaml(configs_dir() / "default.yaml")[section][sub][new]
            data[section][sub] = {**{k: v for k, v in held.items() if k != old}, new: default}
    return data


def overlay(base: Any, over: Any) -> Any:
    """``over`` laid over ``base``: mappings merged key by key, anything else ``over``'s."""
    if not isinstance(base, dict) or not isinstance(over, dict):
        return over
    return {**base, **{k: overlay(base.get(k), v) for k, v in over.items()}}


def profile_names() -> list[str]:
    return sorted(p.stem for p in (configs_dir() / "devices").glob("*.yaml"))


def load_profile(name_or_path: str | Path) -> DeviceProfile:
    """A shipped profile by name (``sim-edge-npu``) or a YAML file path."""
    p = Path(name_or_path)
    if p.suffix not in (".yaml", ".yml"):
        p = configs_dir() / "devices" / f"{name_or_path}.yaml"
        if not p.is_file():
            raise YoloEdgeError(
                f"unknown device '{name_or_path}'; valid: {', '.join(['auto', *profile_names()])} or a profile .yaml"
            )
    return build_profile(read_yaml(p), str(p))


def build_profile(data: Any, where: str) -> DeviceProfile:
    """A device profile from its YAML mapping: its ``runtime_options`` built as its registered backend's own options
    dataclass (``registry``), with the same strict checks as every other section."""
    runtime = data.get("runtime") if isinstance(data, dict) else None
    if isinstance(runtime, str):
        registered = registry.backends()
        spec = registered.get(runtime)
        if spec is None:
            raise YoloEdgeError(f"{where}: {registry.unregistered(runtime)}")
        options = build(spec.options, data.get("runtime_options") or {}, f"{where}.runtime_options")
        data = {**data, "runtime_options": options}
    return build(DeviceProfile, data, where)
