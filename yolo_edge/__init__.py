"""yolo-edge: split, place, run and prove YOLOv8 detectors on edge NPU + CPU.

The public API, in the order of the data flow (``docs/ARCHITECTURE.md``): export a model, split it,
place it on a device profile, deploy it (plan, build, validate, bundle), sweep a grid of deployments on Ray,
load the bundle and detect (one image, or pipelined streams), and gate on it in CI. Every user error is a
:class:`YoloEdgeError` with a one-line message.

A walk through all of it on the shipped demo model (it runs as a test, in ``tests/test_architecture.py``):

    >>> import shutil, tempfile
    >>> from dataclasses import replace
    >>> from pathlib import Path
    >>> import cv2
    >>> from yolo_edge import (BoxAnnotator, DeployRequest, Detections, GateRequest, SweepRequest, YoloEdgeError,
    ...     check_bundle, default_calib_dir, demo_model_path, deploy, export_model, load, load_bundle,
    ...     load_calibration, load_deploy_config, load_profile, plan_model, split_model, stream, sweep)
    >>> work = Path(tempfile.mkdtemp())
    >>> exported = export_model(demo_model_path(), imgsz=320, out_dir=work)
    >>> exported.meta.names
    ('circle', 'rectangle', 'triangle', 'star', 'cross', 'ring')
    >>> split = split_model(exported)
    >>> [s.name for s in split.subgraphs]
    ['backbone', 'neck', 'head', 'decode']
    >>> cfg = load_deploy_config()
    >>> checks = replace(cfg.checks, precision=replace(cfg.checks.precision, images=2))
    >>> timing = replace(cfg.validate, latency_warmup=1, latency_runs=5)
    >>> quick = replace(cfg, calib_images=4, checks=checks, validate=timing)
    >>> images = load_calibration(default_calib_dir(), exported.meta.imgsz, 6)
    >>> plan = plan_model(split, load_profile("sim-edge-npu"), quick, images)
    >>> plan["decode"].device, plan["decode"].precision, plan.whole_graph_npu.failed_check
    ('cpu', 'fp32', 'precision')
    >>> photos = work / "photos"
    >>> photos.mkdir()
    >>> for p in sorted(default_calib_dir().glob("*.jpg"))[40:48]:
    ...     _ = shutil.copy(p, photos)
    >>> request = DeployRequest(device="sim-edge-npu", data=photos, config=quick)
    >>> result = deploy(request, out=work / "bundle", quiet=True)
    >>> result.report.data.kind, [p.name for p in result.report.plans], result.report.passed, result.exit_code
    ('agreement', ['whole-npu', 'whole-cpu', 'split'], True, 0)
    >>> bundle = load_bundle(result.bundle)
    >>> with bundle.detector() as detector:
    ...     detections, timing = detector.detect(cv2.imread(str(photos / "calib_00040.jpg")))
    >>> isinstance(detections, Detections) and len(detections) > 0 and timing.end_to_end_ms > 0
    True
    >>> [u.name for u in bundle.units] == [u.name for u in detector.executor.units]  # loaded as stored
    True
    >>> BoxAnnotator().annotate(cv2.imread(str(photos / "calib_00040.jpg")), detections).shape
    (240, 320, 3)
    >>> with load(result.bundle) as model:  # predict in one line, as with ultralytics' YOLO(...)(source)
    ...     r = model(photos / "calib_00040.jpg", conf=0.5)[0]
    ...     same = model(cv2.imread(str(photos / "calib_00040.jpg")), conf=0.5)[0]
    >>> len(r.boxes) == len(same.boxes) > 0 and sorted(r.speed) == ['inference', 'postprocess', 'preprocess']
    True
    >>> r.names[int(r.boxes.cls[0])] in exported.meta.names and r.plot().shape == (240, 320, 3)
    True
    >>> check_bundle(result.bundle, GateRequest(runs=5)).status
    'ok'
    >>> grid = SweepRequest([demo_model_path()], [320], ["sim-edge-npu", "cpu"], data=photos, config=quick, cache="")
    >>> swept = sweep(grid, use_ray=False, log=lambda _m: None)  # on Ray (local by default) without use_ray=False
    >>> sorted((o.point.device, o.latency_kind) for o in swept.outcomes)
    [('cpu', 'measured'), ('sim-edge-npu', 'modelled (board)')]
    >>> swept.best is swept.ranked[0] and swept.best.passed
    True
    >>> with stream(result.bundle, [str(photos)]) as frames:
    ...     names = [r.name for r in frames]
    >>> len(names), frames.stats[0].accounted, frames.stats[0].delivered
    (8, True, 8)
    >>> try:
    ...     load_bundle(photos)
    ... except YoloEdgeError as exc:
    ...     print(str(exc).split(";")[0].endswith("is not a yolo-edge bundle (no meta.json/plan.json)"))
    True
    >>> shutil.rmtree(work)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from yolo_edge.core.privacy import switch_off_telemetry

switch_off_telemetry()  # before any runtime initialises, in this process and every one it starts (privacy.py)

# Each public name and the module that defines it, imported when first used (PEP 562): a service that only loads a
# bundle and detects pays for the bundle reader, the runtimes and the pipeline, not for the planner, deploy, the
# reports or Ray (``benchmarks/load_time.py`` times the imports as a restart pays them).
_EXPORTS = {
    "__version__": "yolo_edge.core.version",
    "Bundle": "yolo_edge.bundle",
    "load_bundle": "yolo_edge.bundle",
    "stream": "yolo_edge.bundle",
    "GateRequest": "yolo_edge.flows.gate",
    "GateResult": "yolo_edge.flows.gate",
    "check_bundle": "yolo_edge.flows.gate",
    "DeployConfig": "yolo_edge.core.config",
    "DeviceProfile": "yolo_edge.core.config",
    "load_deploy_config": "yolo_edge.core.config",
    "load_profile": "yolo_edge.core.config",
    "DeployRequest": "yolo_edge.flows.deploy",
    "DeployResult": "yolo_edge.flows.deploy",
    "PlanResult": "yolo_edge.flows.deploy",
    "deploy": "yolo_edge.flows.deploy",
    "search_plan": "yolo_edge.flows.deploy",
    "YoloEdgeError": "yolo_edge.core.errors",
    "ExportedModel": "yolo_edge.model.meta",
    "demo_model_path": "yolo_edge.model.meta",
    "export_model": "yolo_edge.model.export",
    "BoxAnnotator": "yolo_edge.pipeline.annotate",
    "Detector": "yolo_edge.pipeline.detector",
    "StreamOptions": "yolo_edge.pipeline.engine",
    "StreamResult": "yolo_edge.pipeline.engine",
    "StreamRunner": "yolo_edge.pipeline.engine",
    "Detections": "yolo_edge.pipeline.postprocess",
    "default_calib_dir": "yolo_edge.pipeline.preprocess",
    "load_calibration": "yolo_edge.pipeline.preprocess",
    "SourceOptions": "yolo_edge.pipeline.sources",
    "PlacementPlan": "yolo_edge.plan.placement",
    "plan_model": "yolo_edge.plan.planner",
    "Model": "yolo_edge.flows.predict",
    "Results": "yolo_edge.flows.predict",
    "load": "yolo_edge.flows.predict",
    "DeployReport": "yolo_edge.flows.report",
    "SplitModel": "yolo_edge.model.split",
    "split_model": "yolo_edge.model.split",
    "SweepRequest": "yolo_edge.flows.sweep",
    "SweepResult": "yolo_edge.flows.sweep",
    "sweep": "yolo_edge.flows.sweep",
}

__all__ = [
    "__version__",
    "BoxAnnotator",
    "Bundle",
    "DeployConfig",
    "DeployReport",
    "DeployRequest",
    "DeployResult",
    "Detections",
    "Detector",
    "DeviceProfile",
    "ExportedModel",
    "GateRequest",
    "GateResult",
    "Model",
    "PlacementPlan",
    "PlanResult",
    "Results",
    "SourceOptions",
    "SplitModel",
    "StreamOptions",
    "StreamResult",
    "StreamRunner",
    "SweepRequest",
    "SweepResult",
    "YoloEdgeError",
    "check_bundle",
    "default_calib_dir",
    "demo_model_path",
    "deploy",
    "export_model",
    "load",
    "load_bundle",
    "load_calibration",
    "load_deploy_config",
    "load_profile",
    "plan_model",
    "search_plan",
    "split_model",
    "stream",
    "sweep",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'yolo_edge' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:
    from yolo_edge.bundle import Bundle, load_bundle, stream
    from yolo_edge.core.config import DeployConfig, DeviceProfile, load_deploy_config, load_profile
    from yolo_edge.core.errors import YoloEdgeError
    from yolo_edge.core.version import __version__
    from yolo_edge.flows.deploy import DeployRequest, DeployResult, PlanResult, deploy, search_plan
    from yolo_edge.flows.gate import GateRequest, GateResult, check_bundle
    from yolo_edge.flows.predict import Model, Results, load
    from yolo_edge.flows.report import DeployReport
    from yolo_edge.flows.sweep import SweepRequest, SweepResult, sweep
    from yolo_edge.model.export import export_model
    from yolo_edge.model.meta import ExportedModel, demo_model_path
    from yolo_edge.model.split import SplitModel, split_model
    from yolo_edge.pipeline.annotate import BoxAnnotator
    from yolo_edge.pipeline.detector import Detector
    from yolo_edge.pipeline.engine import StreamOptions, StreamResult, StreamRunner
    from yolo_edge.pipeline.postprocess import Detections
    from yolo_edge.pipeline.preprocess import default_calib_dir, load_calibration
    from yolo_edge.pipeline.sources import SourceOptions
    from yolo_edge.plan.placement import PlacementPlan
    from yolo_edge.plan.planner import plan_model
