"""``deploy``: export -> split -> plan -> build -> validate -> report -> bundle, in one call.

Three plans are evaluated on the same images, as in the reference's case study: **whole-npu** (the
whole graph on the accelerator at its first precision), **whole-cpu** (FP32 on the CPU, the reference)
and **split** (the planner's placement). Each gets a status (ok, or the check it fails), end-to-end
latency percentiles (the plans timed together, frame by frame in turn, so that a noisy minute on a
shared machine does not pick the winner), a memory peak and its mAP drift against the FP32 reference: on
labels of the model's own classes, or, without them, as agreement with the reference (``data.resolve``).
Every plan's status comes from one rule (``validate.verdict``): ok, or the checks it fails (precision,
drift, SLA, ...). The chosen plan is the faster (p95) of split and whole-cpu that is ok; whole-npu is
reported for comparison only (the decode must stay FP32 on the CPU). When no plan is ok the verdict is
FAIL (exit 1) with each plan's reason.

Example:
    >>> result = deploy(out="out/bundle")  # the demo model on `auto`  # doctest: +SKIP
    >>> result.report.passed, result.report.chosen.name  # doctest: +SKIP
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from yolo_edge.backends import create_backend, require_usable, resolve_device
from yolo_edge.backends.base import NpuCompileError
from yolo_edge.bundle import BundleMeta, DataRecord, bundle_files, check_writable, write_bundle
from yolo_edge.config import DeployConfig, DeviceProfile, load_deploy_config
from yolo_edge.data.resolve import EvalData, resolve_eval_data
from yolo_edge.errors import YoloEdgeError
from yolo_edge.export import ExportedModel, demo_model_path, export_model
from yolo_edge.graph import GraphInfo
from yolo_edge.host import cpu_name
from yolo_edge.pipeline.detector import Detector
from yolo_edge.pipeline.preprocess import default_calib_dir, list_images, load_calibration, read_image
from yolo_edge.plan.placement import PlacementPlan, boundary_tensors, plan_model
from yolo_edge.progress import Bar, progress_bar
from yolo_edge.report import DeployReport, markdown, plots
from yolo_edge.runtime import EventLog, SplitExecutor, Unit, build_units, whole_graph_unit
from yolo_edge.split import SplitModel, split_model
from yolo_edge.validate.accuracy import detect_all, score
from yolo_edge.validate.latency import measure_latencies
from yolo_edge.validate.verdict import Limits, PlanRun, choose, explain
from yolo_edge.version import __version__

Log = Callable[[str], None]
DEMO_IMGSZ = 320


def _memory(plan: PlacementPlan, split: SplitModel, which: str) -> int:
    if which == "whole-cpu":
        info = GraphInfo.of(split.exported.load())
        return info.peak_activation_bytes() + info.weight_bytes()
    if which == "whole-npu":
        return plan.whole_graph_npu.required_bytes
    return max(
        (int(s.checks["memory"].numbers.get("required_bytes") or 0) for s in plan.subgraphs if s.device == "npu"),
        default=0,
    )


@dataclass
class DeployResult:
    report: DeployReport  # report.json is ``report.to_dict()``
    bundle: Path
    exit_code: int


@dataclass
class _Plans:
    """The three plans built for one deploy: their runs, their detectors, and the split's compiled units."""

    whole: PlanRun
    reference: PlanRun
    split: PlanRun
    detectors: dict[str, Detector]
    split_units: list[Unit]
    events: EventLog  # the split's fallback events

    @property
    def runs(self) -> list[PlanRun]:
        return [self.whole, self.reference, self.split]


def deploy(
    model: str | Path | None = None,
    device: str = "auto",
    imgsz: int | str | None = None,
    sla_ms: float | None = None,
    data: str | Path | None = None,
    calib: str | Path | None = None,
    out: str | Path = "out/bundle",
    strict: bool = False,
    config: str | Path | DeployConfig | None = None,
    quiet: bool = False,
    log: Log | None = None,
    class_map: str | None = None,
) -> DeployResult:
    """Deploy ``model`` (default: the shipped demo) to ``device`` and prove it; see the module docstring.
    ``config`` is a deploy config (a YAML path or a :class:`DeployConfig`; default: the shipped one)."""
    say: Log = log or ((lambda _m: None) if quiet else (lambda m: print(m, file=sys.stderr)))
    bar = progress_bar(not quiet)
    out = Path(out)
    cfg = _settings(config, sla_ms)
    check_writable(out)
    profile = resolve_device(device)
    require_usable(profile)
    calib_dir = Path(calib) if calib else default_calib_dir()
    n_calib = cfg.calib_images + cfg.checks.precision.images
    calib_files = list_images(calib_dir, "calibration folder")[:n_calib]
    model = model or demo_model_path()
    if imgsz is None and Path(str(model)) == demo_model_path():
        imgsz = DEMO_IMGSZ
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="yolo-edge-deploy-") as tmp, ExitStack() as stack:
        say(f"exporting {model}")
        exported = export_model(model, imgsz=imgsz, out_dir=tmp)
        evaldata = resolve_eval_data(data, exported.meta.names, calib_dir, n_calib, class_map)
        if evaldata.warning:
            say(f"warning: {evaldata.warning}")
        split = split_model(exported)
        images = load_calibration(calib_dir, exported.meta.imgsz, n_calib)
        say(f"planning on {profile.name} ({profile.kind}, latency {profile.latency})")
        plan = plan_model(split, profile, cfg, images, strict=strict, log=say)
        plans = _build_plans(split, plan, profile, cfg, boundary_tensors(split, images[: cfg.calib_images]), stack, say)
        _evaluate(plans, evaldata, cfg, bar, say)
        # whole-npu is a comparison row, never the deployment: decode must stay FP32 on the CPU
        chosen, none_ok = choose([plans.reference, plans.split])
        chosen_plan = plan if chosen.name == "split" else plan.all_cpu()
        report = _report(str(model), profile, cfg, plan, chosen_plan, plans, chosen, none_ok, evaldata, t0)
        files = _bundle_files(exported, split, profile, cfg, calib_files, plans, chosen_plan, evaldata, report)
    bundle = write_bundle(out, files)
    return DeployResult(report, bundle, 0 if report.passed else 1)


def _bundle_files(
    exported: ExportedModel,
    split: SplitModel,
    profile: DeviceProfile,
    cfg: DeployConfig,
    calib_files: list[Path],
    plans: _Plans,
    chosen_plan: PlacementPlan,
    evaldata: EvalData,
    report: DeployReport,
) -> dict[str, bytes]:
    """Everything the bundle holds, by relative path: the chosen plan's units and events, and what proved it."""
    on_split = report.chosen.name == "split"
    data = DataRecord(evaldata.origin, evaldata.kind, evaldata.class_map)
    meta = BundleMeta(
        __version__,
        exported.meta,
        profile.name,
        report.chosen.name,
        data,
        cfg.validate.sla_ms,
        cfg.runtime.fuse_units,
        tuple(p.name for p in calib_files),
    )
    units = plans.split_units if on_split else []
    events = plans.events if on_split else EventLog()
    return bundle_files(
        exported,
        split,
        chosen_plan,
        profile,
        cfg,
        calib_files,
        units,
        meta,
        report.to_dict(),
        markdown(report),
        plots(report),
        events,
    )


def _settings(config: str | Path | DeployConfig | None, sla_ms: float | None) -> DeployConfig:
    cfg = config if isinstance(config, DeployConfig) else load_deploy_config(config)
    if sla_ms is None:
        return cfg
    if sla_ms <= 0:
        raise YoloEdgeError(f"--sla-ms must be positive, got {sla_ms}")
    return replace(cfg, validate=replace(cfg.validate, sla_ms=float(sla_ms)))


def _build_plans(
    split: SplitModel,
    plan: PlacementPlan,
    profile: DeviceProfile,
    cfg: DeployConfig,
    calib: list[dict[str, np.ndarray]],
    stack: ExitStack,
    say: Log,
) -> _Plans:
    """Compile whole-cpu (the FP32 reference), the split and, where it can run, whole-npu; ``stack`` closes them."""
    meta, fuse = split.exported.meta, cfg.runtime.fuse_units
    say("whole-cpu: the FP32 reference")
    cpu_units = build_units(split, plan.all_cpu(), profile, calib, EventLog(), fuse=fuse)
    detectors = {
        "whole-cpu": stack.enter_context(Detector(SplitExecutor(cpu_units, cfg.runtime, profile), meta, cfg.nms))
    }
    say("split: the planned placement")
    events = EventLog()
    units = build_units(split, plan, profile, calib, events, fuse=fuse) if plan.npu_subgraphs else cpu_units
    detectors["split"] = stack.enter_context(
        Detector(SplitExecutor(units, cfg.runtime, profile, events), meta, cfg.nms)
    )
    whole, whole_detector = _whole_npu(plan, split, profile, cfg, calib, say)
    if whole_detector is not None:
        detectors["whole-npu"] = stack.enter_context(whole_detector)
    reference = PlanRun("whole-cpu", memory_peak_bytes=_memory(plan, split, "whole-cpu"))
    split_run = PlanRun("split", memory_peak_bytes=_memory(plan, split, "split"), same_as_cpu=not plan.npu_subgraphs)
    return _Plans(whole, reference, split_run, detectors, units, events)


def _evaluate(plans: _Plans, evaldata: EvalData, cfg: DeployConfig, bar: Bar, say: Log) -> None:
    """Every plan that runs: detections on the evaluation images, latency measured together frame by frame
    in turn, accuracy scored like the reference's (whose agreement with itself is computed), status judged."""
    for run in plans.runs:
        if run.name in plans.detectors:
            run.detections = detect_all(
                plans.detectors[run.name], evaldata.dataset, cfg.val_nms, bar, f"{run.name}: validate"
            )
    say(f"latency: {', '.join(plans.detectors)}, frame by frame in turn")
    bench_images = [read_image(r.path) for r in evaldata.dataset.records[:16]]
    ticks = iter(bar(range(cfg.validate.latency_runs), "latency"))  # advanced once per timed frame
    latencies = measure_latencies(
        plans.detectors,
        bench_images,
        cfg.validate.latency_warmup,
        cfg.validate.latency_runs,
        progress=lambda _i, _n: next(ticks, None),
    )
    reference = plans.reference.detections
    assert reference is not None
    limits = Limits(cfg.validate.max_drift, cfg.validate.sla_ms)
    for run in plans.runs:
        run.latency = latencies.get(run.name)
        run.map = None if run.detections is None else score(evaldata, reference, run.detections, cfg.nms.conf)
    for run in plans.runs:
        run.drift = None if run.map is None or plans.reference.map is None else run.map.minus(plans.reference.map)
        run.judge(limits)


def _report(
    model: str,
    profile: DeviceProfile,
    cfg: DeployConfig,
    plan: PlacementPlan,
    chosen_plan: PlacementPlan,
    plans: _Plans,
    chosen: PlanRun,
    none_ok: list[str],
    evaldata: EvalData,
    t0: float,
) -> DeployReport:
    """The plans, the verdict and why, the data it was proven on, both placements, fallback events."""
    assert chosen.latency is not None
    limits = Limits(cfg.validate.max_drift, cfg.validate.sla_ms)
    reasons = (["no plan passes: " + "; ".join(none_ok)] if none_ok else []) + explain(
        chosen.fails, chosen.drift, chosen.latency.end_to_end.p95, limits
    )
    return DeployReport(
        model=model,
        model_names=evaldata.dataset.names,
        profile=profile,
        host_cpu=cpu_name(),
        imgsz=plan.imgsz,
        limits=limits,
        plans=tuple(plans.runs),
        chosen=chosen,
        reasons=tuple(reasons),
        data=evaldata,
        placement=chosen_plan,
        split_plan=plan,
        fallback_events=plans.events.summary(),
        wall_s=round(time.perf_counter() - t0, 1),
    )


def _whole_npu(
    plan: PlacementPlan,
    split: SplitModel,
    profile: DeviceProfile,
    cfg: DeployConfig,
    calib: list[dict[str, np.ndarray]],
    say: Log,
) -> tuple[PlanRun, Detector | None]:
    """The whole-graph plan, and its detector for accuracy and the joint latency run (None if it cannot run)."""
    w = plan.whole_graph_npu
    run = PlanRun("whole-npu", planned=w.failed_check, memory_peak_bytes=_memory(plan, split, "whole-npu"))
    if w.failed_check in ("op_support", "memory") or w.precision is None:
        return run, None
    say(f"whole-npu: the whole graph at {w.precision}")
    try:
        unit = whole_graph_unit(
            split.exported.load(),
            create_backend(profile),
            w.precision,
            [{"images": c["images"]} for c in calib],
            w.int8_scheme,
        )
    except NpuCompileError:
        run.planned = "to compile"
        return run, None
    return run, Detector(SplitExecutor([unit], cfg.runtime, profile), split.exported.meta, cfg.nms)
