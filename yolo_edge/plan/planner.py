"""The planner: the four checks at three granularities, over every precision variant, into a :class:`PlanSpace`.

* whole graph: the full model on the NPU at the profile's first precision, checked like any subgraph
  (the safety-net comparison and the case study's first row);
* subgraph (the default): backbone, neck and head are NPU candidates at every variant the host computes (each
  precision of the profile; for INT8 each activation scheme with each quantizer; ``plan.head_on_npu: never``
  pins the head on the CPU in FP32, the design card's layout); the decode always stays FP32 on the CPU;
* op level: when a variant fails only on a few unsupported ops, its nodes are cut into NPU and CPU runs
  (connected groups in execution order, as onnxruntime's GetCapability partitions), kept only if the pieces
  plus their transfers beat running the subgraph on the CPU.

Layer-level mixed precision: an INT8 variant that fails only the precision check is retried with its most
sensitive layers (ranked by the backend's per-layer error) kept at higher precision: the fewest that pass, up to
``plan.max_kept_layers``, found by a bisection that starts where the kept layers add half the error
(:func:`ladder`); :func:`relaxed` does the same, from twice the layers kept, for a variant the verdict blames for
drift. The checks prune; the search (``yolo_edge.flows.search``) decides among what is left.

Example:
    >>> plan = plan_model(split, load_profile("sim-edge-npu"), load_deploy_config(), images)  # doctest: +SKIP
    >>> [(s.name, s.device, s.precision) for s in plan.subgraphs]  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import numpy as np
import onnx

from yolo_edge.backends.base import LayerError, NpuCompileError
from yolo_edge.backends.builder import Builder
from yolo_edge.core.config import CHECKS, DeployConfig, DeviceProfile, LatencyKind, PrecisionName, Variant
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.model.graph import GraphInfo, part
from yolo_edge.model.split import SplitModel
from yolo_edge.plan.checks import (
    SENSITIVE_OPS,
    Candidate,
    Checker,
    all_int8_variants,
    first_failure,
    int8_variants,
    judge,
)
from yolo_edge.plan.op_level import op_level_search
from yolo_edge.plan.placement import FP32, PlacementPlan, PlanSpace, SubgraphPlan, WholeGraphVerdict, boundary_tensors
from yolo_edge.plan.results import CheckResult, Performance, Precision, skipped

Log = Callable[[str], None]


def _rule(name: str, cfg: DeployConfig) -> str | None:
    """Why a design rule keeps subgraph ``name`` on the CPU in FP32, or None (:data:`yolo_edge.model.graph.PARTS`)."""
    found = part(name)
    if found.rule is None and found.card_cpu and cfg.plan.head_on_npu == "never":
        return f"{name} on the CPU in FP32, the design card's layout (plan.head_on_npu: never)"
    return found.rule


def _placed_by_rule(
    checker: Checker, cand: Candidate, rule: str, primary: str, cpu_ms: float, kind: LatencyKind
) -> SubgraphPlan:
    """A subgraph a design rule keeps on the CPU, with the compile-time checks still reported."""
    sensitive = sorted({n.op_type for n in cand.info.nodes if n.op_type in SENSITIVE_OPS})
    precision = (
        CheckResult(
            "precision",
            False,
            f"{primary}: precision-sensitive ops {', '.join(sensitive)} and output0 at low precision",
            Precision(primary),
        )
        if part(cand.name).rule is not None
        else skipped("precision", "placed by rule")
    )
    checks = {
        "op_support": checker.op_support(cand),
        "memory": checker.memory(cand, primary),
        "precision": precision,
        "performance": skipped("performance", "placed by rule"),
    }
    return SubgraphPlan(cand.name, "cpu", FP32, "rule", rule, checks, None, cpu_ms, kind)


class PlanRefused(YoloEdgeError):
    """--strict: the plan would fall back to the CPU. Exit code 1 (not a usage error)."""

    exit_code = 1


class Planner:
    def __init__(
        self,
        split: SplitModel,
        profile: DeviceProfile,
        cfg: DeployConfig,
        images: Sequence[np.ndarray],
        log: Log | None = None,
        builder: Builder | None = None,
    ) -> None:
        if len(images) < 2:
            raise YoloEdgeError("planning needs at least 2 calibration images; pass --calib DIR with more images")
        self.split = split
        self.profile = profile
        self.cfg = cfg
        self.log = log or (lambda _msg: None)
        n_cal = min(cfg.calib_images, len(images) - 1)
        n_eval = min(cfg.checks.precision.images, len(images) - n_cal)
        self.log(f"running {len(images)} calibration images through the FP32 subgraphs")
        self._own = builder is None  # a builder of its own is closed with the planner
        self.builder = builder or Builder(profile)
        self.fp32 = [self.builder.fp32(sg.model) for sg in split.subgraphs]
        tensors = boundary_tensors(split, images, self.fp32)
        self.calib, self.eval = tensors[:n_cal], tensors[n_cal : n_cal + n_eval]
        self.checker = Checker(profile, cfg, self.builder)
        self.output_name = split.output.name
        self._candidates: dict[str, Candidate] = {}

    def close(self) -> None:
        """Close what the planner compiled where its builder is its own (a caller's builder closes it)."""
        if self._own:
            self.builder.close()

    def candidate(self, name: str, model: onnx.ModelProto, inputs: Sequence[str], outputs: Sequence[str]) -> Candidate:
        """``name`` is ``whole_graph`` or a subgraph: the subgraphs after it run in FP32 for the end-to-end check.
        Its transfers are counted as if every input and output crossed the link (the worst case)."""
        if name in self._candidates:
            return self._candidates[name]
        names = [sg.name for sg in self.split.subgraphs]
        later = self.fp32[names.index(name) + 1 :] if name in names else []
        info = GraphInfo.of(model)
        cand = Candidate(
            name=name,
            model=model,
            info=info,
            feeds_calib=[{n: t[n] for n in inputs} for t in self.calib],
            feeds_eval=[{n: t[n] for n in inputs} for t in self.eval],
            reference=[{n: t[n] for n in outputs} for t in self.eval],
            eval_tensors=self.eval,
            downstream=tuple(later),
            output_name=self.output_name,
            transfer_in_bytes=sum(info.tensor(n).bytes for n in inputs),
            transfer_out_bytes=sum(info.tensor(n).bytes for n in outputs),
            transfers=len(inputs) + len(outputs),
        )
        self._candidates[name] = cand
        return cand

    def subgraph_candidate(self, name: str) -> Candidate:
        sg = self.split[name]
        return self.candidate(name, sg.model, [t.name for t in sg.inputs], [t.name for t in sg.outputs])

    @property
    def precisions(self) -> list[PrecisionName]:
        """The profile's precisions that the accelerator's backend can really compute on this host."""
        return [p for p in self.profile.precisions if p in self.checker.npu.precisions]

    @property
    def skipped_precisions(self) -> list[str]:
        """Why the profile's other precisions are not tried (e.g. no FP16 kernels in this CPU's OpenVINO)."""
        return [
            f"{p} skipped: {self.checker.npu.name} cannot compute {p} on this host"
            for p in self.profile.precisions
            if p not in self.checker.npu.precisions
        ]

    def variants(self, cand: Candidate, precisions: Sequence[PrecisionName]) -> Iterator[tuple[Variant, str]]:
        """(variant, how the INT8 variants were ordered) in the order the planner tries them: the profile's
        precisions, and within INT8 each scheme with each quantizer, fastest first. Lazy: INT8 is timed only
        when reached."""
        for precision in precisions:
            if precision != "int8":
                yield Variant(precision), ""
                continue
            variants, how = int8_variants(self.checker, cand)
            for v in variants:
                yield v, how

    def options(self, cand: Candidate) -> tuple[tuple[SubgraphPlan, ...], tuple[SubgraphPlan, ...]]:
        """(the plans of ``cand`` that pass the checks: accelerator variants fastest first, then the CPU; the
        variants ruled out). A rule keeps it on the CPU alone."""
        rule = _rule(cand.name, self.cfg)
        if not rule:
            every = [
                v
                for p in self.precisions
                for v in (all_int8_variants(self.checker.npu) if p == "int8" else [Variant(p)])
            ]
            self.checker.performance.time_together(cand, every)
        cpu_s, kind = self.checker.performance.cpu_s(cand)
        cpu_ms = cpu_s * 1e3
        if rule:
            return (_placed_by_rule(self.checker, cand, rule, self.precisions[0], cpu_ms, kind),), ()
        passed: list[SubgraphPlan] = []
        failed: list[SubgraphPlan] = []
        for variant, how in self.variants(cand, self.precisions):
            plan = self.try_variant(cand, variant, how, cpu_ms, kind)
            (passed if plan.device == "npu" else failed).append(plan)
            if plan.checks["op_support"].passed is False:
                break  # op support is the same at every precision
        # every INT8 variant failed on precision: the device's other quantizers first, in order, until one passes
        # (OpenVINO: NNCF with min-max ranges, then the QDQ recipe)
        int8 = [f for f in failed if f.precision == "int8"]
        imprecise = [f for f in int8 if first_failure(f.checks) == "precision"]
        if int8 and imprecise == int8 and not any(p.precision == "int8" for p in passed):
            why = f"{imprecise[0].variant.label} failed precision"
            for plan in by_fallback(self, cand, why, cpu_ms, kind):
                (passed if plan.device == "npu" else failed).append(plan)
        if not any(p.precision == "int8" for p in passed):  # INT8 fails only on precision: keep layers out of it
            for f in (f for f in failed if f.precision == "int8" and first_failure(f.checks) == "precision"):
                mixed = self.mixed(cand, f.variant, 1, f.reason, cpu_ms, kind)
                if mixed is not None:
                    passed.append(mixed)
                    break
        passed.sort(key=lambda p: (p.latency_ms, -exactness(p)))  # as fast: the more exact first
        if passed:
            why, checks = "on the CPU in FP32", {c: skipped(c, "on the CPU in FP32") for c in CHECKS}
        else:  # the old "back to the CPU", with each variant's reason and the last one's checks
            reasons = [p.reason for p in failed] + self.skipped_precisions
            why, checks = "back to the CPU: " + "; ".join(reasons), failed[-1].checks if failed else {}
        cpu = SubgraphPlan(cand.name, "cpu", FP32, "subgraph", why, checks, None, cpu_ms, kind)
        return (*passed, cpu), tuple(failed)

    def try_variant(
        self, cand: Candidate, variant: Variant, how: str, cpu_ms: float, kind: LatencyKind
    ) -> SubgraphPlan:
        """``cand`` at ``variant`` through the checks: a passing accelerator plan, an op-level or mixed-precision
        one where that rescues it, else the failure (device ``cpu``, its reason)."""
        results = self.checker.run_all(cand, variant)
        failed = first_failure(results)
        if failed is None:
            why = f"all four checks pass at {variant.label}" + (f" ({how})" if how else "")
            return self._accelerated(cand, variant, results, why, cpu_ms, kind)
        reason = f"{variant.label} failed {failed}: {results[failed].reason.removeprefix(f'{variant.label}: ')}"
        if (
            failed == "op_support"
            and self.cfg.plan.op_level
            and self.profile.latency == "modelled"
            and self.profile.cpu
        ):
            op_plan = _op_level_plan(self.checker, cand, variant, results, cpu_ms, kind)
            if op_plan is not None:
                return op_plan
            reason += " (op-level fallback does not pay)"
        return SubgraphPlan(cand.name, "cpu", variant, "subgraph", reason, results, None, cpu_ms, kind)

    def _accelerated(
        self,
        cand: Candidate,
        variant: Variant,
        results: dict[str, CheckResult],
        why: str,
        cpu_ms: float,
        kind: LatencyKind,
    ) -> SubgraphPlan:
        perf = results["performance"].measured
        npu_ms = perf.npu_ms if isinstance(perf, Performance) and perf.npu_ms is not None else 0.0
        return SubgraphPlan(cand.name, "npu", variant, "subgraph", why, results, npu_ms, cpu_ms, kind)

    def mixed(
        self, cand: Candidate, variant: Variant, start: int, after: str, cpu_ms: float, kind: LatencyKind
    ) -> SubgraphPlan | None:
        """``variant`` with the fewest of ``cand``'s most sensitive layers, ``start`` or more, kept at the backend's
        higher precision, up to ``plan.max_kept_layers``, that passes the checks (:func:`keep_layers`), else None."""
        found = keep_layers(self.checker, cand, variant, start, self.cfg.plan.max_kept_layers, self.log)
        if found is None:
            return None
        kept, results, top = found
        npu = self.checker.npu
        layers = ", ".join(f"{r.layer} (adds {r.added:.4f})" for r in top)
        why = (
            f"kept the {len(top)} layer(s) adding the most error, by {self.profile.runtime}'s per-layer measurement, "
            f"at {npu.kept_precision}: {layers}; after {after}"
        )
        plan = self._accelerated(cand, kept, results, f"all four checks pass at {kept.label}", cpu_ms, kind)
        return replace(plan, granularity="layer", kept_why=why)


def relaxed(planner: Planner, option: SubgraphPlan, why: str) -> SubgraphPlan | None:
    """``option`` (an INT8 accelerator plan the verdict blames for drift) quantized by the accelerator's next
    stronger quantizer (:func:`stronger`: Rockchip's mmse, then kl_divergence; NNCF with min-max ranges, then the
    QDQ recipe), where one passes the checks; else with twice as many layers kept at higher precision (at least
    1 more; after the last stronger quantizer, 1 out of the preferred quantizer's INT8 first), if that passes the
    checks and ``plan.max_kept_layers`` allows."""
    if option.device != "npu" or option.cpu_nodes:
        return None
    found = stronger(planner, option, why)
    if found is not None:
        return found
    cand, v, npu = planner.subgraph_candidate(option.name), option.variant, planner.checker.npu
    start, cpu_ms, kind = max(1, 2 * len(v.kept)), option.cpu_ms, option.latency_kind
    if v.precision == "int8" and not v.kept and v.quantizer in npu.fallback_quantizers:
        # the stronger quantizers failed drift too: layers are kept out of the preferred one's INT8 (what the
        # per-layer errors rank), else out of this one's
        first = planner.mixed(cand, replace(v, quantizer=npu.quantizers[0]), 1, why, cpu_ms, kind)
        if first is not None:
            return first
    return planner.mixed(cand, replace(v, kept=()), start, why, cpu_ms, kind)


def exactness(plan: SubgraphPlan) -> float:
    """``plan``'s detector-output cosine (the lower of boxes and class scores) by its precision check: what ranks
    variants as fast as each other (1.0 where nothing was measured: FP32, a rule)."""
    measured = plan.checks["precision"].measured if "precision" in plan.checks else None
    if not isinstance(measured, Precision) or measured.box_cosine is None or measured.score_cosine is None:
        return 1.0
    return min(measured.box_cosine, measured.score_cosine)


def stronger(planner: Planner, option: SubgraphPlan, why: str) -> SubgraphPlan | None:
    """``option``'s INT8 variant (no layers kept) at the first of the accelerator's fallback quantizers after its
    own that passes the checks, else None: the vendor's stronger quantization, tried before any layer leaves
    INT8 (it costs no speed)."""
    v, npu = option.variant, planner.checker.npu
    if v.precision != "int8" or v.kept:
        return None
    order = (*npu.quantizers, *npu.fallback_quantizers)
    after = order[order.index(v.quantizer) + 1 :] if v.quantizer in order else ()
    for quantizer in (q for q in after if q in npu.fallback_quantizers):
        found = option_at(planner, option.name, replace(v, quantizer=quantizer), why)
        verdict = "passes" if found else "fails"
        planner.log(f"{option.name}: {v.label} -> {quantizer} after {why}: {verdict} the checks")
        if found is not None:
            return replace(found, reason=f"{found.reason}; quantized by {quantizer}, stronger, after {why}")
    return None


def by_fallback(planner: Planner, cand: Candidate, why: str, cpu_ms: float, kind: LatencyKind) -> list[SubgraphPlan]:
    """``cand`` at the accelerator's fallback quantizers, one at a time (each at every INT8 scheme), until one passes:
    where every INT8 variant of the others failed precision (OpenVINO: NNCF with min-max ranges, then QDQ)."""
    tried: list[SubgraphPlan] = []
    for quantizer in planner.checker.npu.fallback_quantizers:
        for variant in all_int8_variants(planner.checker.npu, fallback=True):
            if variant.quantizer == quantizer:
                tried.append(planner.try_variant(cand, variant, why, cpu_ms, kind))
        if any(t.device == "npu" for t in tried):
            break
    return tried


def option_at(planner: Planner, name: str, variant: Variant, why: str) -> SubgraphPlan | None:
    """Subgraph ``name`` at ``variant`` through the checks, not tried when its options were (a fallback quantizer a
    neighbour needed: the search's one-unit step): its whole-subgraph accelerator plan, or None where it fails (or a
    rule keeps it on the CPU)."""
    if _rule(name, planner.cfg):
        return None
    cand = planner.subgraph_candidate(name)
    cpu_s, kind = planner.checker.performance.cpu_s(cand)
    plan = planner.try_variant(cand, variant, why, cpu_s * 1e3, kind)
    return plan if plan.device == "npu" and plan.granularity == "subgraph" else None


def whole_graph(planner: Planner) -> WholeGraphVerdict:
    """The whole model on the accelerator at the profile's first precision: the safety-net comparison row."""
    model = planner.split.exported.load()
    cand = planner.candidate("whole_graph", model, [planner.split.input.name], [planner.split.output.name])
    if not planner.precisions:
        raise YoloEdgeError(
            f"{planner.profile.name}: this host computes none of its precisions "
            f"({'; '.join(planner.skipped_precisions)}); "
            "pick another --device"
        )
    # the backend's first variant at the profile's first precision, untimed: a comparison row, not a candidate
    variant = planner.checker.npu.resolve(Variant(planner.precisions[0]))
    planner.log(f"checking the whole graph on {planner.profile.name} at {variant.label}")
    results = planner.checker.run_all(cand, variant)
    failed = first_failure(results)
    reason = results[failed].reason if failed else "all four checks pass"
    beyond = _precision_had_it_fit(planner.checker, cand, variant) if failed == "memory" else None
    if beyond is not None:
        results["precision"] = beyond
        reason += f"; {'and' if beyond.passed else 'and fails'} precision {beyond.reason}"
    return WholeGraphVerdict(failed is None, variant, failed, reason, results)


def _precision_had_it_fit(checker: Checker, cand: Candidate, variant: Variant) -> CheckResult | None:
    """The precision check of a graph the compiler refused for memory after building it (its refusal carries what
    it computes: Ethos-U's int8 TFLite on the reference kernels), so that the whole-graph row shows both of its real
    failures; None where nothing was built (a profile's memory model refused it first: not compiled for it)."""
    refused = checker.builder.refusal(cand.model, variant, cand.feeds_calib)
    numerics = None if refused is None else refused.numerics
    if numerics is None:
        return None
    result = judge(checker.cfg, cand, variant, [numerics.run(f) for f in cand.feeds_eval])
    return replace(result, reason=f"had it fit (the compiler's numerics on the host): {result.reason}")


def plan_options(planner: Planner, strict: bool = False) -> PlanSpace:
    """Every subgraph's options and rejected variants; ``strict``: no subgraph may fall back to the CPU."""
    whole = whole_graph(planner)
    options: dict[str, tuple[SubgraphPlan, ...]] = {}
    rejected: dict[str, tuple[SubgraphPlan, ...]] = {}
    for sg in planner.split.subgraphs:
        planner.log(f"placing {sg.name}")
        options[sg.name], rejected[sg.name] = planner.options(planner.subgraph_candidate(sg.name))
    if strict:
        refused = [n for n, opts in options.items() if opts[0].device == "cpu" and opts[0].granularity != "rule"]
        refused += [n for n, opts in options.items() if opts[0].cpu_nodes]
        if refused:
            raise PlanRefused(
                "strict mode: "
                + "; ".join(f"{n} would fall back to the CPU ({options[n][-1].reason})" for n in refused)
            )
        options = {n: opts if opts[0].granularity == "rule" else opts[:-1] for n, opts in options.items()}
    notes = (f"latency is {planner.profile.latency} ({planner.profile.kind} device {planner.profile.name})",)
    meta = planner.split.exported.meta
    base = PlacementPlan(
        str(planner.split.exported.path),
        planner.profile.name,
        planner.profile.kind,
        planner.profile.latency,
        meta.imgsz,
        strict,
        whole,
        (),
        0.0,
        notes,
    )
    return PlanSpace(planner.split, planner.profile.link, base, options, rejected)


def keep_layers(
    checker: Checker, cand: Candidate, variant: Variant, start: int, most: int, log: Log
) -> tuple[Variant, dict[str, CheckResult], list[LayerError]] | None:
    """Layer-level mixed precision: ``variant`` with the fewest of ``cand``'s layers that add the most error kept
    at the backend's higher precision, from ``start`` up to ``most``, that passes the checks (the variant, its
    checks, the layers), else None. The counts are searched, not walked (:func:`ladder`): each compile halves them."""
    npu = checker.npu
    if variant.precision != "int8" or npu.kept_precision is None or most < start:
        return None
    ranked = checker.precision.ranked_layers(cand, replace(variant, kept=()))
    counts = kept_counts(ranked, start, most)
    found: tuple[Variant, dict[str, CheckResult], list[LayerError]] | None = None

    def passes(k: int) -> bool:
        nonlocal found
        trial = replace(variant, kept=tuple(r.layer for r in ranked[:k]))
        log(f"{cand.name}: {trial.label}, keeping {k} layer(s) at {npu.kept_precision} (of {counts[0]}-{counts[-1]})")
        results = checker.run_all(cand, trial)
        if first_failure(results) is not None:
            return False
        found = trial, results, ranked[:k]
        return True

    if counts:
        ladder(counts, [r.added for r in ranked], passes)
    return found


def kept_counts(ranked: Sequence[LayerError], start: int, most: int) -> list[int]:
    """The counts of ``ranked``'s layers (worst first) that can be kept: ``start`` to ``most``, and no more than
    the layers the per-layer errors say add any error (keeping one that adds none cannot pass what fewer did not)."""
    adding = sum(1 for r in ranked if r.added > 0)
    return list(range(start, min(most, adding) + 1))


def ladder(counts: Sequence[int], added: Sequence[float], passes: Callable[[int], bool]) -> int | None:
    """The fewest of ``counts`` (ascending) for which ``passes`` (more kept layers err less: the first that passes
    bounds the rest): the first probe is the count whose layers add half the error ``added`` ranks (worst first),
    then a bisection of the side left; so at most 1 + ceil(log2(len(counts))) probes, where walking 1, 2, 4, 8 took
    up to 4 and found no count between them."""
    cumulative = np.cumsum([max(0.0, a) for a in added])
    mass = [float(cumulative[k - 1]) if k else 0.0 for k in counts]
    lo, hi = 0, len(counts)  # the answer's index is in [lo, hi); hi == len(counts): none passed yet
    mid = next(i for i, m in enumerate(mass) if m >= mass[-1] / 2)
    while lo < hi:
        if passes(counts[mid]):
            hi = mid
        else:
            lo = mid + 1
        mid = (lo + hi) // 2
    return counts[lo] if lo < len(counts) else None


def _op_level_plan(
    checker: Checker,
    cand: Candidate,
    variant: Variant,
    results: dict[str, CheckResult],
    cpu_ms: float,
    kind: LatencyKind,
) -> SubgraphPlan | None:
    """The subgraph with its unsupported ops on the CPU and the rest on the accelerator, if that pays."""
    found = op_level_search(checker, cand, variant, cpu_ms)
    if found is None or not all(c.passed for c in found.checks.values()):
        return None
    checks = {**results, "memory": checker.memory(cand, variant), **found.checks}
    reason = (
        f"op-level: {len(found.cpu_nodes)} unsupported op(s) ({', '.join(found.cpu_nodes)}) run on the CPU, "
        f"the rest on the NPU at {variant.label}; {found.total_ms:.2f} ms beats all-CPU {cpu_ms:.2f} ms"
    )
    return SubgraphPlan(
        cand.name, "npu", variant, "op", reason, checks, found.total_ms, cpu_ms, kind, cpu_nodes=found.cpu_nodes
    )


def plan_space(
    split: SplitModel,
    target: DeviceProfile | Builder,
    cfg: DeployConfig,
    images: Sequence[np.ndarray],
    strict: bool = False,
    log: Log | None = None,
) -> tuple[PlanSpace, Planner]:
    """The placements of ``split`` the four checks leave on ``target`` (a profile, compiled for by a builder of the
    planner's own; or a deploy's builder, for its profile) with letterboxed calibration ``images``, and the planner
    that made them (for :func:`relaxed`; close it when done)."""
    builder = target if isinstance(target, Builder) else None
    profile = target.profile if isinstance(target, Builder) else target
    assert profile is not None, "the planner needs a builder with a profile"
    planner = Planner(split, profile, cfg, images, log, builder)
    try:
        return plan_options(planner, strict), planner
    except NpuCompileError as exc:  # a compile failure outside a check is still explained, not a traceback
        planner.close()
        raise YoloEdgeError(f"{profile.name}: {exc}") from None
    except BaseException:
        planner.close()
        raise


def plan_model(
    split: SplitModel,
    target: DeviceProfile | Builder,
    cfg: DeployConfig,
    images: Sequence[np.ndarray],
    strict: bool = False,
    log: Log | None = None,
) -> PlacementPlan:
    """The fastest placement (by estimate) that passes the four checks on ``target`` (as :func:`plan_space`); see
    the module docstring."""
    space, planner = plan_space(split, target, cfg, images, strict, log)
    planner.close()
    return space.candidates()[0]
