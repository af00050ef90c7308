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
    >>> result.report["verdict"], result.report["chosen_plan"]  # doctest: +SKIP
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from yolo_edge import __version__
from yolo_edge.backends import create_backend, resolve_device
from yolo_edge.backends.base import NpuCompileError
from yolo_edge.bundle import bundle_files, check_writable, write_bundle
from yolo_edge.config import DeployConfig, DeviceProfile, load_deploy_config
from yolo_edge.data.resolve import resolve_eval_data
from yolo_edge.errors import YoloEdgeError
from yolo_edge.export import demo_model_path, export_model
from yolo_edge.graph import GraphInfo
from yolo_edge.host import cpu_name
from yolo_edge.pipeline.detector import Detector
from yolo_edge.pipeline.postprocess import Detections
from yolo_edge.pipeline.preprocess import default_calib_dir, list_images, load_calibration, read_image
from yolo_edge.plan.placement import PlacementPlan, make_plan, stage_tensors
from yolo_edge.progress import progress_bar
from yolo_edge.report import markdown, plots
from yolo_edge.runtime import EventLog, SplitExecutor, build_stages, whole_graph_stage
from yolo_edge.split import SplitModel, split_model
from yolo_edge.validate.accuracy import MapResult, detect_all, score
from yolo_edge.validate.latency import LatencyResult, measure_latencies
from yolo_edge.validate.verdict import OK, Limits, explain, failures, status

Log = Callable[[str], None]
DEMO_IMGSZ = 320


@dataclass
class PlanRun:
    name: str
    planned: str | None = None  # the planner's failed check for this plan (precision, op_support, memory, to compile)
    latency: LatencyResult | None = None
    map: MapResult | None = None
    drift: MapResult | None = None
    memory_peak_bytes: int | None = None
    detections: list[Detections] | None = None
    same_as_cpu: bool = False  # the split placed nothing on the NPU: it is the whole-cpu plan
    fails: list[str] = field(default_factory=list)

    def judge(self, limits: Limits) -> None:
        self.fails = failures(self.drift, None if self.latency is None else self.latency.end_to_end["p95"], limits, self.planned)

    @property
    def status(self) -> str:
        return "no subgraph on the NPU (= whole-cpu)" if self.same_as_cpu else status(self.fails)

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "status": self.status, "fails": list(self.fails),
            "latency_ms": None if self.latency is None else {k: self.latency.end_to_end[k] for k in ("p50", "p95", "p99")},
            "latency_kind": None if self.latency is None else self.latency.kind,
            "latency": None if self.latency is None else self.latency.to_dict(),
            "memory_peak_bytes": self.memory_peak_bytes,
            "map": None if self.map is None else self.map.to_dict(),
            "map_drift": None if self.drift is None else self.drift.to_dict(),
        }


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


def choose(runs: list[PlanRun]) -> tuple[PlanRun, list[str]]:
    """The deployed plan: the fastest (p95) that is ok; when none is, the fastest within the drift limit
    (else the first), with one reason per plan why it is not ok."""
    ok = [r for r in runs if r.ok and r.latency is not None]
    if ok:
        return min(ok, key=lambda r: r.latency.end_to_end["p95"]), []  # type: ignore[union-attr]
    usable = [r for r in runs if r.latency is not None and "drift" not in r.fails and not r.planned]
    chosen = min(usable, key=lambda r: r.latency.end_to_end["p95"]) if usable else runs[0]  # type: ignore[union-attr]
    return chosen, [f"{r.name} {r.status}" for r in runs]


def deploy(model: str | Path | None = None, device: str = "auto", imgsz: int | str | None = None, sla_ms: float | None = None,
           data: str | Path | None = None, calib: str | Path | None = None, out: str | Path = "out/bundle",
           strict: bool = False, config: str | Path | None = None, quiet: bool = False, log: Log | None = None,
           class_map: str | None = None) -> DeployResult:
    """Deploy ``model`` (default: the shipped demo) to ``device`` and prove it; see the module docstring."""
    say: Log = log or ((lambda _m: None) if quiet else (lambda m: print(m, file=sys.stderr)))
    bar = progress_bar(not quiet)
    out = Path(out)
    cfg = load_deploy_config(config)
    if sla_ms is not None:
        if sla_ms <= 0:
            raise YoloEdgeError(f"--sla-ms must be positive, got {sla_ms}")
        cfg = replace(cfg, validate=replace(cfg.validate, sla_ms=float(sla_ms)))
    limits = Limits(cfg.validate.max_drift, cfg.validate.sla_ms)
    check_writable(out)
    profile = resolve_device(device)
    calib_dir = Path(calib) if calib else default_calib_dir()
    n_calib = cfg.calib_images + cfg.checks.precision.images
    calib_files = list_images(calib_dir, "calibration folder")[:n_calib]
    model = model or demo_model_path()
    if imgsz is None and Path(str(model)) == demo_model_path():
        imgsz = DEMO_IMGSZ
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="yolo-edge-deploy-") as tmp:
        say(f"exporting {model}")
        exported = export_model(model, imgsz=imgsz, out_dir=tmp)
        evaldata = resolve_eval_data(data, exported.meta.names, calib_dir, n_calib, class_map)
        if evaldata.warning:
            say(f"warning: {evaldata.warning}")
        split = split_model(exported)
        images = load_calibration(calib_dir, exported.meta.imgsz, n_calib)
        say(f"planning on {profile.name} ({profile.kind}, latency {profile.latency})")
        plan = make_plan(split, profile, cfg, images, strict=strict, log=say)
        calib_tensors = stage_tensors(split, images[:cfg.calib_images])
        bench_images = [read_image(r.path) for r in evaldata.dataset.records[:16]]
        events = EventLog()

        say("whole-cpu: the FP32 reference")
        cpu_exec = SplitExecutor(build_stages(split, plan.all_cpu(), profile, calib_tensors, EventLog(), fuse=cfg.runtime.fuse_stages), cfg.runtime, profile)
        detectors = {"whole-cpu": Detector(cpu_exec, exported.meta, cfg.nms)}
        ref = PlanRun("whole-cpu", detections=detect_all(detectors["whole-cpu"], evaldata.dataset, cfg.val_nms, bar, "whole-cpu: validate"),
                      memory_peak_bytes=_memory(plan, split, "whole-cpu"))
        assert ref.detections is not None

        def evaluate(run: PlanRun, detector: Detector) -> PlanRun:
            run.detections = detect_all(detector, evaldata.dataset, cfg.val_nms, bar, f"{run.name}: validate")
            return run

        say("split: the planned placement")
        stages = build_stages(split, plan, profile, calib_tensors, events, fuse=cfg.runtime.fuse_stages) if plan.npu_subgraphs else list(cpu_exec.stages)
        split_exec = SplitExecutor(stages, cfg.runtime, profile, events)
        detectors["split"] = Detector(split_exec, exported.meta, cfg.nms)
        split_run = evaluate(PlanRun("split", memory_peak_bytes=_memory(plan, split, "split"), same_as_cpu=not plan.npu_subgraphs),
                             detectors["split"])

        whole, whole_detector = _whole_npu(plan, split, profile, cfg, calib_tensors, say)
        if whole_detector is not None:
            detectors["whole-npu"] = whole_detector
            evaluate(whole, whole_detector)
        say(f"latency: {', '.join(detectors)}, frame by frame in turn")
        ticks = iter(bar(range(cfg.validate.latency_runs), "latency"))  # advanced once per timed frame
        latencies = measure_latencies(detectors, bench_images, cfg.validate.latency_warmup, cfg.validate.latency_runs,
                                      progress=lambda _i, _n: next(ticks, None))
        if whole_detector is not None:
            whole_detector.executor.close()
        runs = [whole, ref, split_run]
        for r in runs:
            r.latency = latencies.get(r.name)
            if r.detections is not None:  # the reference is scored like every plan: its agreement with itself is computed
                r.map = score(evaldata, ref.detections, r.detections, cfg.nms.conf)
        assert ref.map is not None
        for r in runs:
            r.drift = None if r.map is None else r.map.minus(ref.map)
            r.judge(limits)
        # whole-npu is a comparison row, never the deployment: decode must stay FP32 on the CPU
        chosen, none_ok = choose([ref, split_run])
        chosen_plan = plan if chosen.name == "split" else plan.all_cpu()
        assert chosen.latency is not None
        reasons = (["no plan passes: " + "; ".join(none_ok)] if none_ok else []) + explain(
            chosen.fails, chosen.drift, chosen.latency.end_to_end["p95"], limits)
        report: dict[str, Any] = {
            "yolo_edge": __version__, "model": str(model), "model_names": list(exported.meta.names),
            "device": profile.name, "device_kind": profile.kind, "host_cpu": cpu_name(),
            "imgsz": list(exported.meta.imgsz), "sla_ms": cfg.validate.sla_ms, "max_drift": cfg.validate.max_drift,
            "verdict": "pass" if chosen.ok else "fail",
            "verdict_reasons": reasons,
            "chosen_plan": chosen.name,
            "plans": [r.to_dict() for r in runs],
            "map": {"reference": ref.map.to_dict(), "deployed": chosen.map.to_dict() if chosen.map else None,
                    "kind": evaldata.kind, "text": evaldata.kind_text},
            "data": {"source": evaldata.source, "images": len(evaldata.dataset), "kind": evaldata.kind,
                     "class_map": evaldata.class_map, "warning": evaldata.warning},
            "placement": chosen_plan.to_dict(),
            "split_plan": plan.to_dict(),
            "fallback_events": events.summary(),
            "wall_s": round(time.perf_counter() - t0, 1),
        }
        samples = {r.name: list(r.latency.samples_ms) for r in runs if r.latency is not None}
        meta = {"yolo_edge": __version__, "model": exported.meta.to_dict(), "device": profile.name, "chosen_plan": chosen.name,
                "data": {"origin": evaldata.origin, "kind": evaldata.kind, "class_map": evaldata.class_map},
                "sla_ms": cfg.validate.sla_ms, "fuse_stages": cfg.runtime.fuse_stages}
        chosen_stages = stages if chosen.name == "split" else []
        files = bundle_files(exported, split, chosen_plan, profile, cfg, calib_files, chosen_stages, meta, report, markdown(report),
                             plots(report, samples), events if chosen.name == "split" else EventLog())
        for ex in (cpu_exec, split_exec):
            ex.close()
    bundle = write_bundle(out, files)
    return DeployResult(report, bundle, 0 if chosen.ok else 1)


def _whole_npu(plan: PlacementPlan, split: SplitModel, profile: DeviceProfile, cfg: DeployConfig,
               calib: list[dict[str, np.ndarray]], say: Log) -> tuple[PlanRun, Detector | None]:
    """The whole-graph plan, and its detector for accuracy and the joint latency run (None if it cannot run)."""
    w = plan.whole_graph_npu
    run = PlanRun("whole-npu", planned=w["failed_check"] or None, memory_peak_bytes=_memory(plan, split, "whole-npu"))  # type: ignore[arg-type]
    if w["failed_check"] in ("op_support", "memory"):
        return run, None
    say(f"whole-npu: the whole graph at {w['precision']}")
    try:
        stage = whole_graph_stage(split.exported.load(), create_backend(profile), str(w["precision"]),
                                  [{"images": c["images"]} for c in calib], w.get("int8_scheme"))  # type: ignore[arg-type]
    except NpuCompileError:
        run.planned = "to compile"
        return run, None
    return run, Detector(SplitExecutor([stage], cfg.runtime, profile), split.exported.meta, cfg.nms)
