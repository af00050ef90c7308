"""The four placement checks. Each returns a verdict, a one-line reason and what it measured (``plan.results``).

1. op_support (compile time): the profile's op list with dtype/shape limits, or the runtime's own query.
2. memory: peak live activations + weights vs the DRAM budget; non-tileable working sets vs SRAM.
3. precision: statically, precision-sensitive ops at low precision; empirically, the graph compiled at
   NPU precision on calibration images fed through the preceding subgraphs, judged end to end: its outputs
   run through every later subgraph in FP32 and the detector output is compared with the FP32 model's
   (box cosine, class-score cosine, largest class-score error, and the share of class scores that cross the
   operating confidence one way or the other: the flips). It refuses only what is broken (NaN/Inf, a decode at
   low precision, a cosine far below anything a working quantizer gives, most of the model's own over-threshold
   scores flipped: a figure scaled by the model's own margins at its threshold); a variant merely less exact
   than another goes on to the search, whose verdict judges its drift end to end on the user's images, and its
   figures rank it beside variants as fast. The subgraph's own outputs against FP32 (local cosine) are reported
   too, and below their threshold only warn: a local error may vanish in the later layers (the demo neck's P5 at
   INT8) or grow there, and only the detector output tells.
4. performance: NPU time (measured or modelled) + boundary transfers vs CPU time.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import onnx

from yolo_edge.backends.base import (
    Backend,
    Executable,
    LayerError,
    NpuCompileError,
    NpuOutOfMemory,
    OpQuery,
    cosine,
    interleaved_rounds,
    run_chain,
)
from yolo_edge.backends.builder import Builder
from yolo_edge.core.config import (
    PRECISION_BYTES,
    DeployConfig,
    DeviceProfile,
    LatencyKind,
    Variant,
)
from yolo_edge.devices.board import BoardCpu
from yolo_edge.devices.cost import cpu_time, npu_time, transfer_time
from yolo_edge.devices.limits import MemoryUse, Residency, memory_use, memory_violation, unsupported_ops
from yolo_edge.model.decode import HeadOutputs, count_candidates, head_candidates, head_xywh
from yolo_edge.model.graph import GraphInfo, part
from yolo_edge.plan.results import CheckResult, Memory, OpSupport, Performance, Precision, skipped

SENSITIVE_OPS = {"Softmax", "Exp", "Log", "LogSoftmax"}


@dataclass
class Candidate:
    """A graph considered for the NPU: the whole model, one subgraph, or an op-level pipeline of pieces."""

    name: str
    model: onnx.ModelProto
    info: GraphInfo
    feeds_calib: list[dict[str, np.ndarray]]  # this graph's inputs, from FP32 runs of the preceding subgraphs
    feeds_eval: list[dict[str, np.ndarray]]
    reference: list[dict[str, np.ndarray]]  # FP32 outputs on feeds_eval
    eval_tensors: list[dict[str, np.ndarray]]  # every boundary tensor of the FP32 run on each eval image
    downstream: tuple[Executable, ...]  # the later subgraphs, FP32 on the CPU: this graph's outputs -> output0
    output_name: str  # the detector's output (output0)
    transfer_in_bytes: int  # at FP32; scaled to the NPU precision by the performance check
    transfer_out_bytes: int
    transfers: int

    @property
    def final_output(self) -> str | None:
        """``output_name`` if this graph produces it itself."""
        return self.output_name if any(o.name == self.output_name for o in self.model.graph.output) else None

    def detector_output(self, outputs: dict[str, np.ndarray], image: int) -> np.ndarray:
        """The detector output when this graph returned ``outputs`` on eval image ``image`` and every later
        subgraph ran in FP32."""
        if self.output_name in outputs:
            return outputs[self.output_name]
        clean = {k: np.nan_to_num(v, nan=0.0, posinf=0.0, neginf=0.0) for k, v in outputs.items()}
        return run_chain(self.downstream, {**self.eval_tensors[image], **clean})[self.output_name]


class Check(Protocol):
    """One placement check: its verdict on ``cand`` at ``variant`` (a :class:`~yolo_edge.plan.results.CheckResult`
    named ``name``). Each asks the accelerator's backend for its own word on the graph where it has one (a value
    with a default on :class:`~yolo_edge.backends.base.Backend`), and the profile's models otherwise."""

    name: str

    def __call__(self, cand: Candidate, variant: Variant) -> CheckResult: ...


class Compiles:
    """What the checks of one profile share: its backend, the deploy's builder, each graph compiled once at each
    variant, and the runtime's answer to which ops it refuses, asked once per graph."""

    def __init__(self, profile: DeviceProfile, cfg: DeployConfig, builder: Builder) -> None:
        self.profile, self.cfg, self.builder, self.npu = profile, cfg, builder, builder.npu
        self._compiled: dict[tuple[str, Variant], Executable] = {}
        self._queried: dict[str, OpQuery | None] = {}

    def __call__(self, cand: Candidate, variant: Variant | str) -> Executable:
        key = (cand.name, self.npu.resolve(variant))  # resolved only when compiled: the checks say what it lacks
        if key not in self._compiled:
            self._compiled[key] = self.builder.compile(cand.model, key[1], cand.feeds_calib)
        return self._compiled[key]

    def query(self, cand: Candidate) -> OpQuery | None:
        """The runtime's answer to which of ``cand``'s ops it refuses (OpenVINO query_model, Rockchip's compiler),
        None where it cannot say."""
        if cand.name not in self._queried:
            self._queried[cand.name] = self.npu.query(cand.model)
        return self._queried[cand.name]


class OpSupportCheck:
    """1. Operator support: the runtime's own query (``Backend.query``, ``op_support.mode: query``), else the
    profile's op list with its dtype and shape limits."""

    name = "op_support"

    def __init__(self, compiles: Compiles) -> None:
        self.compiles, self.profile = compiles, compiles.profile

    def refused_nodes(self, cand: Candidate) -> set[str]:
        """Nodes of ``cand`` the accelerator will not run: by its runtime's query, or by the profile's op list."""
        answer = self.compiles.query(cand) if self.profile.op_support.mode == "query" else None
        if answer is not None:
            return set(answer.refused)
        return {v.node for v in unsupported_ops(cand.info, self.profile)}

    def __call__(self, cand: Candidate, variant: Variant | None = None) -> CheckResult:
        mode = self.profile.op_support.mode
        if mode != "query":
            return listed_op_support(cand.info, self.profile)
        answer = self.compiles.query(cand)
        if answer is None:
            why = f"{self.compiles.npu.name} has no query; assumed supported"
            return CheckResult("op_support", True, why, OpSupport(mode))
        missing, n_ops = answer.refused, answer.ops
        measured = OpSupport(mode, n_ops, len(missing))
        if missing:
            return CheckResult(
                "op_support",
                False,
                f"{len(missing)} of {n_ops} ops unsupported by {self.profile.name} (first: {missing[0]})",
                measured,
            )
        via = f"{self.profile.runtime} {answer.via}"
        return CheckResult("op_support", True, f"all {n_ops} ops supported ({via})", measured)


class MemoryCheck:
    """2. Memory: the profile's memory model at the precision, and what the device's compiler reports of the graph
    compiled (``Backend.compiler_report``: :func:`compiled_memory`)."""

    name = "memory"

    def __init__(self, compiles: Compiles) -> None:
        self.compiles = compiles

    def __call__(self, cand: Candidate, variant: Variant | str) -> CheckResult:
        v = Variant.parse(variant) if isinstance(variant, str) else variant
        c = self.compiles
        held = Residency(c.cfg.plan.batch, c.profile.npu_cores, c.npu.memory)
        found = memory_check(c.profile, memory_use(cand.info, v.precision, v.scheme, held))
        if found.passed is False:
            return found
        return compiled_memory(found, self.compiles.npu, lambda: self.compiles(cand, variant))

    def fits_and_compiles(self, cand: Candidate, variant: Variant) -> bool:
        """Whether ``cand`` fits and compiles at ``variant`` (what is worth timing)."""
        try:
            return self(cand, variant).passed is not False and bool(self.compiles(cand, variant))
        except NpuCompileError:
            return False


class PrecisionCheck:
    """3. Precision: the graph compiled at the variant, run on the evaluation feeds and judged end to end
    (:func:`judge`); an INT8 failure names its worst layers by the backend's per-layer error
    (``Backend.layer_errors``)."""

    name = "precision"

    def __init__(self, compiles: Compiles) -> None:
        self.compiles = compiles
        self._ranked: dict[tuple[str, Variant], list[LayerError]] = {}

    def ranked_layers(self, cand: Candidate, variant: Variant) -> list[LayerError]:
        """``cand``'s layers at ``variant`` by the error each adds, worst first (the backend's own measurement:
        Rockchip's accuracy analysis, OpenVINO per-convolution outputs); cached."""
        key = (cand.name, variant)
        if key not in self._ranked:
            npu = self.compiles.npu
            self._ranked[key] = npu.layer_errors(cand.model, variant, cand.feeds_calib, cand.feeds_eval[:4])
        return self._ranked[key]

    def __call__(self, cand: Candidate, variant: Variant) -> CheckResult:
        try:
            exe = self.compiles(cand, variant)
        except NpuCompileError as exc:
            return CheckResult(
                "precision", False, f"cannot compile at {variant.label}: {exc}", Precision(variant.precision)
            )
        outputs = [exe.run(feeds) for feeds in cand.feeds_eval]
        result = judge(self.compiles.cfg, cand, variant, outputs)
        if result.passed or variant.precision != "int8":
            return result
        worst = ", ".join(f"{r.layer} ({r.op}) cos {r.cosine:.4f}" for r in self.ranked_layers(cand, variant)[:3])
        if not worst:
            return result
        measured = result.measured
        assert isinstance(measured, Precision)
        return CheckResult(
            result.name,
            result.passed,
            f"{result.reason}; worst layers by {self.compiles.profile.runtime}'s per-layer error: {worst}",
            replace(measured, worst_layers=worst),
        )


class PerformanceCheck:
    """4. Performance: the accelerator's time (measured interleaved with the CPU's, or modelled: the device
    compiler's own estimate where it makes one, ``Backend.compiler_report``, else the cost model) plus the
    boundary transfers, against the CPU's time; caches what it measured."""

    name = "performance"

    def __init__(self, compiles: Compiles, op_support: OpSupportCheck, memory: MemoryCheck) -> None:
        self.compiles, self.profile, self.cfg = compiles, compiles.profile, compiles.cfg
        self.op_support, self.memory = op_support, memory
        self._cpu_s: dict[str, tuple[float, LatencyKind]] = {}
        self._npu_s: dict[tuple[str, Variant], float] = {}  # measured once: ordering the variants and the check agree
        self.rounds: dict[tuple[str, Variant], list[float]] = {}  # measured: accelerator / CPU seconds, per round

    def time_together(self, cand: Candidate, variants: Sequence[Variant]) -> None:
        """Measure ``cand`` in FP32 on the CPU and at each of ``variants`` that passes op support and memory on
        the accelerator, interleaved call by call (timed one after another, a shared machine's load at the moment
        would rank them), into the caches ``cpu_s`` and ``times`` read; modelled latency has nothing to time."""
        if self.profile.latency != "modelled" and cand.name not in self._cpu_s:
            ok = self.op_support(cand).passed is not False  # a variant that fails is the checks' to report
            timed = [v for v in variants if ok and self.memory.fits_and_compiles(cand, v)]
            self._cpu_s[cand.name] = (self.interleaved(cand, timed), "measured")

    def interleaved(self, cand: Candidate, timed: Sequence[Variant], runs: int | None = None) -> float:
        """Time the CPU and each of ``timed`` (compiled here) in turn; the CPU's time returned, the accelerator's
        cached (on the scale of the CPU time already cached: a mixed-precision retry, a close call's second look)."""
        cpu, perf = self.compiles.builder.fp32(cand.model), self.cfg.checks.performance
        rounds = interleaved_rounds(
            [cpu, *(self.compiles(cand, v) for v in timed)], cand.feeds_eval[0], runs or perf.runs, perf.warmup
        )
        cpu_now = statistics.median(rounds[0])
        scale = self._cpu_s[cand.name][0] / cpu_now if cand.name in self._cpu_s else 1.0
        for v, npu in zip(timed, rounds[1:]):
            self._npu_s[(cand.name, v)] = statistics.median(npu) * scale
            self.rounds[(cand.name, v)] = [a / b for a, b in zip(npu, rounds[0])]
        return cpu_now

    def cpu_s(self, cand: Candidate) -> tuple[float, LatencyKind]:
        """CPU FP32 seconds of ``cand`` (modelled on the profile's board CPU, or measured here); cached. The decode
        is priced as it runs: the detector's candidate-first decode of the head's outputs, not its ONNX graph."""
        if cand.name not in self._cpu_s:
            if not part(cand.name).unit:  # run by the detector, candidates first: priced as it runs
                self._cpu_s[cand.name] = decode_price(cand, self.profile, self.cfg)
            elif self.profile.latency == "modelled":
                assert self.profile.cpu is not None
                self._cpu_s[cand.name] = (cpu_time(cand.info, self.profile.cpu).total_s, "modelled")
            else:
                self.time_together(cand, ())
        return self._cpu_s[cand.name]

    def times(self, cand: Candidate, variant: Variant) -> tuple[float, float, LatencyKind]:
        """(NPU seconds, CPU seconds, 'measured'|'modelled') for ``cand`` at ``variant``."""
        cpu_s, kind = self.cpu_s(cand)
        npu = self.compiles.npu
        report = npu.compiler_report(lambda: self.compiles(cand, variant)) if kind == "modelled" else None
        if report is not None and report.modelled_s is not None:  # the compiler's own estimate (Vela's)
            return report.modelled_s, cpu_s, kind
        if kind == "modelled":
            kept = npu.kept_precision or variant.precision
            modelled = npu_time(cand.info, self.profile, variant.precision, variant.kept, kept, variant.scheme)
            return modelled.total_s, cpu_s, kind
        key = (cand.name, variant)
        if key not in self._npu_s:  # one not timed with the others (a mixed-precision retry): with the CPU again
            self.interleaved(cand, [variant])
        return self._npu_s[key], cpu_s, kind

    def __call__(self, cand: Candidate, variant: Variant) -> CheckResult:
        limit = self.cfg.checks.performance.max_ratio
        try:
            npu_s, cpu_s, kind = self.times(cand, variant)
        except NpuCompileError as exc:
            return CheckResult("performance", False, f"cannot compile at {variant.label}: {exc}")
        xfer = transfer_s(cand, self.profile, variant.precision)
        ratio = (npu_s + xfer) / cpu_s if cpu_s > 0 else float("inf")
        measured = Performance(npu_s * 1e3, xfer * 1e3, cpu_s * 1e3, ratio, limit, kind)
        spread = ""
        if (cand.name, variant) in self.rounds and cpu_s > 0:  # measured: the per-round ratios, each under one load
            low, ratio, high = paired_spread(self, cand, variant, xfer / cpu_s)
            npu_s, close = self._npu_s[(cand.name, variant)], low <= limit <= high  # as timed last (a close call twice)
            measured = replace(measured, npu_ms=npu_s * 1e3, ratio=ratio, ratio_low=low, ratio_high=high, close=close)
            spread = f" (per-round {low:.2f}-{high:.2f}x)"
        verdict = (
            f"NPU {npu_s * 1e3:.2f} + transfers {xfer * 1e3:.2f} ms vs CPU {cpu_s * 1e3:.2f} ms ({kind}): "
            f"{ratio:.2f}x{spread}"
        )
        if measured.close:
            why = f"{verdict}: close to {limit}x, within the run-to-run spread; the verdict decides"
            return CheckResult("performance", True, why, measured)
        if ratio > limit:
            return CheckResult("performance", False, f"{verdict} > {limit}x", measured)
        return CheckResult("performance", True, f"{verdict} <= {limit}x", measured)


class Checker:
    """The four checks of one device profile (one :class:`Check` each), compiling through ``builder``, run in the
    configured order."""

    def __init__(self, profile: DeviceProfile, cfg: DeployConfig, builder: Builder) -> None:
        self.profile, self.cfg, self.builder, self.npu = profile, cfg, builder, builder.npu
        compiles = Compiles(profile, cfg, builder)
        self.op_support = OpSupportCheck(compiles)
        self.memory = MemoryCheck(compiles)
        self.precision = PrecisionCheck(compiles)
        self.performance = PerformanceCheck(compiles, self.op_support, self.memory)
        self.checks: dict[str, Check] = {
            c.name: c for c in (self.op_support, self.memory, self.precision, self.performance)
        }

    def run_all(self, cand: Candidate, variant: Variant) -> dict[str, CheckResult]:
        """Run the checks in the configured order, stopping at the first failure (the rest: not evaluated)."""
        results: dict[str, CheckResult] = {}
        failed: str | None = None
        for name in self.cfg.checks.order:
            results[name] = skipped(name, f"{failed} failed first") if failed else self.checks[name](cand, variant)
            if results[name].passed is False:
                failed = failed or name
        return results


def compiled_memory(found: CheckResult, npu: Backend, compiled: Callable[[], Executable]) -> CheckResult:
    """``found`` (the profile's memory model passed) with what ``npu``'s compiler reports of the graph
    (``Backend.compiler_report`` of it ``compiled``: nothing where it reports nothing): its refusal for memory fails
    the check; another refusal is the check's that owns it."""
    try:
        exe = npu.compiler_report(compiled)
    except NpuOutOfMemory as exc:
        return CheckResult("memory", False, str(exc), found.measured)
    except NpuCompileError:
        return found
    report = None if exe is None else exe.memory_report
    return replace(found, reason=f"{report} within the board's; {found.reason}") if report else found


def transfer_s(cand: Candidate, profile: DeviceProfile, precision: str) -> float:
    """Seconds to move ``cand``'s inputs and outputs over ``profile``'s link at ``precision``'s width."""
    width = PRECISION_BYTES[precision] / 4
    n_bytes = int((cand.transfer_in_bytes + cand.transfer_out_bytes) * width)
    return transfer_time(n_bytes, profile.link, cand.transfers)


def paired_spread(
    check: PerformanceCheck, cand: Candidate, variant: Variant, transfer_ratio: float
) -> tuple[float, float, float]:
    """(lower quartile, median, upper quartile) of ``cand``'s per-round ratios at ``variant`` (plus the transfers'
    share); where the limit falls between the quartiles, timed again with three times the rounds first."""
    perf, key = check.cfg.checks.performance, (cand.name, variant)
    q = np.quantile(np.array(check.rounds[key]) + transfer_ratio, [0.25, 0.5, 0.75])
    if q[0] <= perf.max_ratio <= q[2]:
        check.interleaved(cand, [variant], 3 * perf.runs)  # a close call's second look
        q = np.quantile(np.array(check.rounds[key]) + transfer_ratio, [0.25, 0.5, 0.75])
    return float(q[0]), float(q[1]), float(q[2])


def decode_price(cand: Candidate, profile: DeviceProfile, cfg: DeployConfig) -> tuple[float, LatencyKind]:
    """The candidate-first decode of the evaluation frames' head outputs (``cand`` the decode) at the run's
    confidence threshold: modelled on the board's CPU from its work, or timed here (median of the performance
    check's runs)."""
    height = next(t for t in cand.eval_tensors[0].values() if t.ndim == 4 and t.shape[1] == 3).shape[2]
    head = HeadOutputs.find({n: a.shape for n, a in cand.feeds_eval[0].items()}, height)
    assert head is not None, "the decode reads the head's six outputs"
    conf = cfg.nms.conf
    if profile.latency == "modelled":
        assert profile.cpu is not None
        anchors, nc = head.work(cand.feeds_eval[0])
        found = round(statistics.mean(count_candidates(f, head, conf) for f in cand.feeds_eval))
        return BoardCpu(profile.cpu).decode_s(anchors, nc, head.reg_max, found), "modelled"
    perf, feeds = cfg.checks.performance, cand.feeds_eval[0]
    times = []
    for k in range(perf.warmup + perf.runs):
        t0 = time.perf_counter()
        head_xywh(feeds, head, head_candidates(feeds, head, conf, False)[0])
        if k >= perf.warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times), "measured"


@dataclass(frozen=True)
class Fidelity:
    """How far outputs at low precision are from FP32: end to end (the detector output) and locally."""

    box_cosine: float
    score_cosine: float
    score_max_error: float
    local_min_cosine: float
    local_worst_tensor: str
    max_abs_error: float
    nan_inf: int
    flips: float  # of the class scores over the operating confidence in either, the share over it in only one
    over: int  # class scores over the operating confidence in the FP32 model's output, on every image together


def memory_check(profile: DeviceProfile, use: MemoryUse) -> CheckResult:
    """2. Peak live activations + weights (held as the runtime holds them: ``use.residency``) vs the DRAM budget;
    untiled working sets vs SRAM. It fails only where one frame does not fit: a batch larger than fits runs as
    sub-batches of the largest that does (``Memory.batch_fit``)."""
    fit, held = use.batch_fit(profile), use.residency
    measured = Memory(
        use.peak_activation_bytes,
        use.weight_bytes,
        use.dram_bytes,
        int(profile.memory_mb * 2**20),
        use.largest_untiled_bytes,
        use.largest_untiled_node or None,
        int(profile.sram_kb * 1024) if profile.sram_kb is not None else None,
        held.batch,
        held.contexts,
        fit,
    )
    why = memory_violation(use, profile)
    if why:
        return CheckResult("memory", False, why, measured)
    contexts = f" ({held.contexts} contexts)" if held.contexts > 1 else ""
    at = f" at batch {held.batch}{contexts}" if held.batch > 1 or contexts else ""
    over = (
        f"; batch {held.batch} needs {use.dram_bytes / 2**20:.1f} MiB: runs as sub-batches of {fit}"
        if fit < held.batch
        else ""
    )
    shown = use.dram_at(min(fit, held.batch))
    return CheckResult(
        "memory",
        True,
        f"{shown / 2**20:.1f} MiB of {profile.memory_mb:.0f} MiB{at}{over}; fits batch {fit}"
        + (
            f"; largest untiled working set {use.largest_untiled_bytes / 2**20:.2f} MiB fits SRAM"
            if profile.sram_kb and use.largest_untiled_bytes
            else "; every op tiles through SRAM"
            if profile.sram_kb
            else ""
        ),
        measured,
    )


def listed_op_support(info: GraphInfo, profile: DeviceProfile) -> CheckResult:
    """The op-support check against the profile's op list (``op_support.mode: list``, or ``all``)."""
    mode = profile.op_support.mode
    bad = unsupported_ops(info, profile)
    n_ops = sum(1 for n in info.nodes if n.op_type != "Constant")
    measured = OpSupport(mode, n_ops, len(bad), ", ".join(sorted({f"{b.op_type}" for b in bad})) or None)
    if bad:
        return CheckResult(
            "op_support", False, f"{len(bad)} of {n_ops} ops unsupported: {bad[0].node}: {bad[0].reason}", measured
        )
    return CheckResult(
        "op_support",
        True,
        f"all {n_ops} ops in {profile.name}'s op list" if mode == "list" else "all ops supported",
        measured,
    )


def all_int8_variants(npu: Backend, fallback: bool = False) -> list[Variant]:
    """Each of the accelerator's INT8 activation schemes with each of its quantizers (``fallback``: its fallback
    quantizers, tried where every INT8 variant of the others fails precision)."""
    quantizers = npu.fallback_quantizers if fallback else npu.quantizers
    return [Variant("int8", s, q) for q in quantizers for s in npu.int8_schemes]


def int8_variants(checker: Checker, cand: Candidate) -> tuple[list[Variant], str]:
    """The accelerator's INT8 variants (each activation scheme with each quantizer) for ``cand``, fastest first,
    and how they were ordered.

    Measured where latency is measured (which scheme is faster depends on the CPU's kernels); with modelled
    latency, or one variant, the configured order."""
    variants = all_int8_variants(checker.npu)
    if len(variants) < 2 or checker.profile.latency == "modelled":
        return variants, ""
    speed: dict[Variant, float] = {}
    for v in variants:
        try:
            speed[v] = checker.performance.times(cand, v)[0]
        except NpuCompileError:
            speed[v] = float("inf")
    variants.sort(key=lambda v: speed[v])
    return variants, "INT8 variants by measured speed: " + ", ".join(
        f"{v.label} {speed[v] * 1e3:.2f} ms" for v in variants
    )


def fidelity(cand: Candidate, outputs: Sequence[dict[str, np.ndarray]], conf: float) -> Fidelity:
    """``outputs`` of ``cand`` on each eval image against FP32, locally and through the later subgraphs; the flips
    at the operating confidence ``conf`` (``nms.conf``)."""
    local_cos, local_worst, worst_abs, bad_values = 1.0, "", 0.0, 0
    box_cos, score_cos, score_err = 1.0, 1.0, 0.0
    either, one, over = 0, 0, 0
    for i, (out, ref) in enumerate(zip(outputs, cand.reference)):
        for name, r in ref.items():
            o = out[name]
            bad_values += int(np.count_nonzero(~np.isfinite(o)))
            o = np.nan_to_num(o, nan=0.0, posinf=0.0, neginf=0.0)
            worst_abs = max(worst_abs, float(np.abs(o - r).max()))
            c = cosine(o, r)
            if c < local_cos:
                local_cos, local_worst = c, name
        final = np.nan_to_num(cand.detector_output(out, i), nan=0.0, posinf=0.0, neginf=0.0)
        want = cand.eval_tensors[i][cand.output_name]
        box_cos = min(box_cos, cosine(final[:, :4], want[:, :4]))  # boxes (rows 0-3), class scores (rows 4-)
        score_cos = min(score_cos, cosine(final[:, 4:], want[:, 4:]))
        score_err = max(score_err, float(np.abs(final[:, 4:] - want[:, 4:]).max()))
        was, now = want[:, 4:] >= conf, final[:, 4:] >= conf
        either += int(np.count_nonzero(was | now))
        one += int(np.count_nonzero(was ^ now))
        over += int(np.count_nonzero(was))
    flips = one / either if either else 0.0
    return Fidelity(box_cos, score_cos, score_err, local_cos, local_worst, worst_abs, bad_values, flips, over)


def judge(
    cfg: DeployConfig,
    cand: Candidate,
    variant: Variant,
    outputs: Sequence[dict[str, np.ndarray]],
    what: str = "",
) -> CheckResult:
    """The precision verdict on ``outputs`` (``cand`` at ``variant`` on each eval image): decided end to end on the
    detector output, the subgraph's own outputs only warn. It refuses what is broken (see the module docstring);
    the rest passes with its figures, for the search's verdict to judge by drift."""
    pc, label, precision = cfg.checks.precision, variant.label, variant.precision
    sensitive = sorted({n.op_type for n in cand.info.nodes if n.op_type in SENSITIVE_OPS})
    if cand.final_output and precision != "fp32":
        sensitive.append("box/score concat (output0)")
    f = fidelity(cand, outputs, cfg.nms.conf)
    measured = Precision(
        precision,
        label,
        len(outputs),
        f.box_cosine,
        f.score_cosine,
        f.score_max_error,
        f.local_min_cosine,
        f.local_worst_tensor or None,
        f.max_abs_error,
        f.nan_inf,
        ", ".join(sensitive) or None,
        pc.min_cosine,
        pc.max_flips,
        pc.local_min_cosine,
        flips=f.flips,
        scores_over=f.over,
    )
    problems = broken(cfg, f, precision, sensitive)
    warn = f.local_min_cosine < pc.local_min_cosine and not cand.final_output
    warning = f"; warning: own output {f.local_worst_tensor} at cosine {f.local_min_cosine:.4f} < {pc.local_min_cosine}"
    warning = warning if warn else ""
    figures = (
        f"detector output cosine boxes {f.box_cosine:.4f}, class scores {f.score_cosine:.4f}, score error "
        f"{f.score_max_error:.3f}, {f.flips:.1%} flipped at conf {cfg.nms.conf}"
    )
    if problems:
        needed = (
            "no NaN/Inf, no precision-sensitive op at low precision"
            if f.nan_inf or (sensitive and precision != "fp32")
            else f"cosine >= {pc.min_cosine} and at most {pc.max_flips:.0%} flipped"
        )
        why = "; ".join(problems)
        return CheckResult(
            "precision", False, f"{what}{label}: broken: {why} (the search's verdict needs {needed}){warning}", measured
        )
    passed = f"{what}{label}: {figures}; not broken, its drift is the verdict's to judge, no NaN/Inf{warning}"
    return CheckResult("precision", True, passed, measured)


def broken(cfg: DeployConfig, f: Fidelity, precision: str, sensitive: Sequence[str]) -> list[str]:
    """What makes the figures ``f`` of a variant at ``precision`` broken (nothing: the verdict's to judge)."""
    pc, worst = cfg.checks.precision, min(f.box_cosine, f.score_cosine)
    problems = [f"{f.nan_inf} NaN/Inf values"] if f.nan_inf else []
    if worst < pc.min_cosine:
        problems.append(
            f"detector output cosine {worst:.4f} (boxes {f.box_cosine:.4f}, class scores "
            f"{f.score_cosine:.4f}) < {pc.min_cosine}"
        )
    if f.flips > pc.max_flips:
        problems.append(
            f"{f.flips:.0%} of the class scores over the operating confidence {cfg.nms.conf} in either output are "
            f"over it in only one > {pc.max_flips:.0%} ({f.over} over it in the FP32 model's)"
        )
    if sensitive and precision != "fp32":
        problems.append(f"precision-sensitive ops at {precision}: {', '.join(sensitive)}")
    return problems


def first_failure(results: dict[str, CheckResult]) -> str | None:
    return next((name for name, r in results.items() if r.passed is False), None)
