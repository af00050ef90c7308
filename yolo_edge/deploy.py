"""``deploy``: export -> split -> plan -> build -> validate -> report -> bundle, in one call.

Three plans are evaluated on the same images, as in the reference's case study: **whole-npu** (the
whole graph on the accelerator at its first precision), **whole-cpu** (FP32 on the CPU, the reference)
and **split** (the planner's placement). Each gets a status (ok, or the check it fails), end-to-end
latency percentiles (the plans timed together, frame by frame in turn, so that a noisy minute on a
shared machine does not pick the winner), a memory peak and its mAP drift against the FP32 reference. The chosen plan is
the faster (p95) of split and whole-cpu that is ok and within the drift limit; whole-npu is reported for
comparison only (the decode must stay FP32 on the CPU).

Example:
    >>> result = deploy(out="out/bundle")  # the demo model on `auto`  # doctest: +SKIP
    >>> result.report["verdict"], result.report["chosen_plan"]  # doctest: +SKIP
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from yolo_edge import __version__
from yolo_edge.backends import create_backend, resolve_device
from yolo_edge.backends.base import NpuCompileError
from yolo_edge.bundle import bundle_files, check_writable, write_bundle
from yolo_edge.config import DeployConfig, DeviceProfile, NmsConfig, load_deploy_config
from yolo_edge.data.dataset import Dataset, image_folder, load_dataset
from yolo_edge.data.synthetic import demo_val_data
from yolo_edge.errors import YoloEdgeError
from yolo_edge.export import demo_model_path, export_model
from yolo_edge.graph import GraphInfo
from yolo_edge.pipeline.detector import Detector
from yolo_edge.pipeline.postprocess import Detections
from yolo_edge.pipeline.preprocess import default_calib_dir, list_images, load_calibration, read_image
from yolo_edge.plan.placement import PlacementPlan, make_plan, stage_tensors
from yolo_edge.report import markdown, plots
from yolo_edge.runtime import EventLog, SplitExecutor, build_stages, whole_graph_stage
from yolo_edge.split import SplitModel, split_model
from yolo_edge.validate.accuracy import MapResult, agreement_map, coco_map
from yolo_edge.validate.latency import LatencyResult, measure_latencies

Log = Callable[[str], None]
DEMO_IMGSZ = 320


@dataclass
class DataSpec:
    dataset: Dataset
    source: str
    labelled: bool


def resolve_data(data: str | Path | None) -> DataSpec:
    """``--data``: a data.yaml or COCO JSON (labelled), a folder of images (unlabelled), or the demo val split."""
    if data is None:
        path = demo_val_data()
        return DataSpec(load_dataset(path), f"demo val split ({path})", True)
    p = Path(data)
    if p.is_dir():
        return DataSpec(image_folder(p), str(p), False)
    return DataSpec(load_dataset(p), str(p), True)


def progress_bar(enabled: bool) -> Callable[[Sequence[Any], str], Any]:
    def wrap(items: Sequence[Any], desc: str) -> Any:
        if not enabled:
            return items
        from tqdm import tqdm

        return tqdm(items, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True)

    return wrap


def detect_all(detector: Detector, dataset: Dataset, nms: NmsConfig, bar: Callable[..., Any], desc: str) -> list[Detections]:
    return [detector.detect(read_image(r.path), nms)[0] for r in bar(dataset.records, desc)]


@dataclass
class PlanRun:
    name: str
    status: str
    latency: LatencyResult | None = None
    map: MapResult | None = None
    drift: MapResult | None = None
    memory_peak_bytes: int | None = None
    detections: list[Detections] | None = None

    def ok(self, max_drift: float) -> bool:
        return self.status == "ok" and self.drift is not None and min(self.drift.map50, self.drift.map50_95) >= -max_drift

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "status": self.status,
            "latency_ms": None if self.latency is None else {k: self.latency.end_to_end[k] for k in ("p50", "p95", "p99")},
            "latency_kind": None if self.latency is None else self.latency.kind,
            "latency": None if self.latency is None else self.latency.to_dict(),
            "memory_peak_bytes": self.memory_peak_bytes,
            "map": None if self.map is None else self.map.to_dict(),
            "map_drift": None if self.drift is None else self.drift.to_dict(),
        }


def evaluate(name: str, detector: Detector, spec: DataSpec, cfg: DeployConfig, reference: list[Detections] | None,
             bar: Callable[..., Any]) -> PlanRun:
    """Accuracy on ``spec`` (mAP, or agreement with ``reference``); latency comes later, all plans together."""
    dets = detect_all(detector, spec.dataset, cfg.val_nms, bar, f"{name}: validate")
    if spec.labelled:
        m = coco_map(spec.dataset, dets)
    else:
        m = agreement_map(spec.dataset, reference, dets) if reference is not None else MapResult(1.0, 1.0)
    return PlanRun(name, "ok", None, m, None, None, dets)


def _memory(plan: PlacementPlan, split: SplitModel, which: str) -> int:
    if which == "whole-cpu":
        info = GraphInfo.of(split.exported.load())
        return info.peak_activation_bytes() + info.weight_bytes()
    if which == "whole-npu":
        return int(plan.whole_graph_npu["checks"]["memory"].get("required_bytes") or 0)  # type: ignore[index, union-attr]
    return max((int(s.checks["memory"].numbers.get("required_bytes") or 0) for s in plan.subgraphs if s.device == "npu"), default=0)  # type: ignore[arg-type]


@dataclass
class DeployResult:
    report: dict[str, Any]
    bundle: Path
    exit_code: int


def deploy(model: str | Path | None = None, device: str = "auto", imgsz: int | str | None = None, sla_ms: float | None = None,
           data: str | Path | None = None, calib: str | Path | None = None, out: str | Path = "out/bundle",
           strict: bool = False, config: str | Path | None = None, quiet: bool = False, log: Log | None = None) -> DeployResult:
    """Deploy ``model`` (default: the shipped demo) to ``device`` and prove it; see the module docstring."""
    say: Log = log or ((lambda _m: None) if quiet else (lambda m: print(m, file=sys.stderr)))
    bar = progress_bar(not quiet)
    out = Path(out)
    cfg = load_deploy_config(config)
    if sla_ms is not None:
        if sla_ms <= 0:
            raise YoloEdgeError(f"--sla-ms must be positive, got {sla_ms}")
        cfg = replace(cfg, validate=replace(cfg.validate, sla_ms=float(sla_ms)))
    check_writable(out)
    profile = resolve_device(device)
    calib_dir = Path(calib) if calib else default_calib_dir()
    list_images(calib_dir, "calibration folder")
    model = model or demo_model_path()
    if imgsz is None and Path(str(model)) == demo_model_path():
        imgsz = DEMO_IMGSZ
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="yolo-edge-deploy-") as tmp:
        say(f"exporting {model}")
        exported = export_model(model, imgsz=imgsz, out_dir=tmp)
        spec = resolve_data(data)
        split = split_model(exported)
        images = load_calibration(calib_dir, exported.meta.imgsz, cfg.calib_images + cfg.checks.precision.images)
        say(f"planning on {profile.name} ({profile.kind}, latency {profile.latency})")
        plan = make_plan(split, profile, cfg, images, strict=strict, log=say)
        calib_tensors = stage_tensors(split, images[:cfg.calib_images])
        bench_images = [read_image(r.path) for r in spec.dataset.records[:16]]
        events = EventLog()

        say("whole-cpu: the FP32 reference")
        cpu_exec = SplitExecutor(build_stages(split, plan.all_cpu(), profile, calib_tensors, EventLog(), fuse=cfg.runtime.fuse_stages), cfg.runtime, profile)
        detectors = {"whole-cpu": Detector(cpu_exec, exported.meta, cfg.nms)}
        ref = evaluate("whole-cpu", detectors["whole-cpu"], spec, cfg, None, bar)
        ref.drift = MapResult(0.0, 0.0)
        ref.memory_peak_bytes = _memory(plan, split, "whole-cpu")

        say("split: the planned placement")
        stages = build_stages(split, plan, profile, calib_tensors, events, fuse=cfg.runtime.fuse_stages) if plan.npu_subgraphs else list(cpu_exec.stages)
        split_exec = SplitExecutor(stages, cfg.runtime, profile, events)
        detectors["split"] = Detector(split_exec, exported.meta, cfg.nms)
        split_run = evaluate("split", detectors["split"], spec, cfg, ref.detections, bar)
        split_run.memory_peak_bytes = _memory(plan, split, "split")
        if not plan.npu_subgraphs:
            split_run.status = "no subgraph placed on the NPU"

        whole, whole_detector = _whole_npu(plan, split, profile, cfg, spec, ref, calib_tensors, bar, say)
        if whole_detector is not None:
            detectors["whole-npu"] = whole_detector
        say(f"latency: {', '.join(detectors)}, frame by frame in turn")
        ticks = iter(bar(range(cfg.validate.latency_runs), "latency"))  # advanced once per timed frame
        latencies = measure_latencies(detectors, bench_images, cfg.validate.latency_warmup, cfg.validate.latency_runs,
                                      progress=lambda _i, _n: next(ticks, None))
        if whole_detector is not None:
            whole_detector.executor.close()
        runs = [whole, ref, split_run]
        for r in runs:
            r.latency = latencies.get(r.name)
        for r in runs:
            if r.map is not None and r.drift is None:
                r.drift = r.map.minus(ref.map) if spec.labelled and ref.map else MapResult(r.map.map50 - 1.0, r.map.map50_95 - 1.0)
        # whole-npu is a comparison row, never the deployment: decode must stay FP32 on the CPU
        eligible = [r for r in (ref, split_run) if r.ok(cfg.validate.max_drift)]
        chosen = min(eligible, key=lambda r: r.latency.end_to_end["p95"]) if eligible else ref  # type: ignore[union-attr]
        chosen_plan = plan if chosen.name == "split" else plan.all_cpu()
        assert chosen.latency is not None and chosen.drift is not None
        meets_sla = chosen.latency.meets(cfg.validate.sla_ms)
        within = min(chosen.drift.map50, chosen.drift.map50_95) >= -cfg.validate.max_drift
        report: dict[str, Any] = {
            "yolo_edge": __version__, "model": str(model), "device": profile.name, "device_kind": profile.kind,
            "imgsz": list(exported.meta.imgsz), "sla_ms": cfg.validate.sla_ms, "max_drift": cfg.validate.max_drift,
            "verdict": "pass" if meets_sla and within else "fail",
            "verdict_reasons": ([] if meets_sla else [f"p95 {chosen.latency.end_to_end['p95']:.2f} ms > SLA {cfg.validate.sla_ms} ms"])
            + ([] if within else [f"mAP drift {chosen.drift.to_dict()} beyond {cfg.validate.max_drift}"]),
            "chosen_plan": chosen.name,
            "plans": [r.to_dict() for r in runs],
            "map": {"reference": ref.map.to_dict() if ref.map else None, "deployed": chosen.map.to_dict() if chosen.map else None,
                    "kind": "mAP vs labels" if spec.labelled else "agreement with the FP32 reference"},
            "data": {"source": spec.source, "images": len(spec.dataset), "kind": "labelled" if spec.labelled else "unlabelled (agreement)"},
            "placement": chosen_plan.to_dict(),
            "split_plan": plan.to_dict(),
            "fallback_events": events.summary(),
            "wall_s": round(time.perf_counter() - t0, 1),
        }
        samples = {r.name: list(r.latency.samples_ms) for r in runs if r.latency is not None}
        meta = {"yolo_edge": __version__, "model": exported.meta.to_dict(), "device": profile.name, "chosen_plan": chosen.name,
                "data": spec.source if data is not None else None, "sla_ms": cfg.validate.sla_ms, "fuse_stages": cfg.runtime.fuse_stages}
        chosen_stages = stages if chosen.name == "split" else []
        files = bundle_files(exported, split, chosen_plan, profile, chosen_stages, meta, report, markdown(report), plots(report, samples),
                             events if chosen.name == "split" else EventLog())
        for ex in (cpu_exec, split_exec):
            ex.close()
    bundle = write_bundle(out, files)
    return DeployResult(report, bundle, 0 if report["verdict"] == "pass" else 1)


def _whole_npu(plan: PlacementPlan, split: SplitModel, profile: DeviceProfile, cfg: DeployConfig, spec: DataSpec,
               ref: PlanRun, calib: list[dict[str, np.ndarray]], bar: Callable[..., Any], say: Log) -> tuple[PlanRun, Detector | None]:
    """The whole-graph plan's accuracy, and its detector for the joint latency run (None if it cannot run)."""
    w = plan.whole_graph_npu
    status = "ok" if w["passed"] else f"fails {w['failed_check']}"
    if w["failed_check"] in ("op_support", "memory"):
        return PlanRun("whole-npu", status, memory_peak_bytes=_memory(plan, split, "whole-npu")), None
    say(f"whole-npu: the whole graph at {w['precision']}")
    try:
        stage = whole_graph_stage(split.exported.load(), create_backend(profile), str(w["precision"]), [{"images": c["images"]} for c in calib])
    except NpuCompileError as exc:
        return PlanRun("whole-npu", f"fails to compile: {exc}"), None
    detector = Detector(SplitExecutor([stage], cfg.runtime, profile), split.exported.meta, cfg.nms)
    run = evaluate("whole-npu", detector, spec, cfg, ref.detections, bar)
    run.status = status
    run.memory_peak_bytes = _memory(plan, split, "whole-npu")
    return run, detector

