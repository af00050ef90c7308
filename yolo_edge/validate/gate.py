"""Re-measure a bundle and gate on it: ``val_bundle`` (mAP drift), ``bench_bundle`` (latency) and
``check_bundle`` (both, against limits and an optional baseline), usable from pytest:

    from yolo_edge.validate.gate import check_bundle

    def test_deployed_model_still_good():
        result = check_bundle("out/bundle", baseline="perf/baseline.json", max_drift=0.01)
        assert result.passed, result.failures
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from yolo_edge.bundle import Bundle, load_bundle
from yolo_edge.config import DeployConfig, load_deploy_config
from yolo_edge.data.synthetic import demo_val_data
from yolo_edge.deploy import DataSpec, detect_all, progress_bar, resolve_data
from yolo_edge.errors import YoloEdgeError
from yolo_edge.pipeline.preprocess import read_image
from yolo_edge.runtime import EventLog
from yolo_edge.validate.accuracy import MapResult, agreement_map, coco_map
from yolo_edge.validate.latency import LatencyResult, measure_latency


def _data(bundle: Bundle, data: str | Path | None) -> DataSpec:
    return resolve_data(data if data is not None else bundle.meta.get("data") or demo_val_data())


@dataclass(frozen=True)
class ValResult:
    reference: MapResult
    deployed: MapResult
    kind: str
    images: int

    @property
    def drift(self) -> MapResult:
        return self.deployed.minus(self.reference)

    def to_dict(self) -> dict[str, Any]:
        return {"reference": self.reference.to_dict(), "deployed": self.deployed.to_dict(), "drift": self.drift.to_dict(),
                "kind": self.kind, "images": self.images}


def val_bundle(bundle: Bundle, data: str | Path | None = None, cfg: DeployConfig | None = None, quiet: bool = True) -> ValResult:
    """mAP of the bundle's plan and of the FP32 reference on ``data`` (default: what deploy used)."""
    cfg = cfg or load_deploy_config()
    spec = _data(bundle, data)
    bar = progress_bar(not quiet)
    ref = detect_all(bundle.reference_detector(cfg), spec.dataset, cfg.val_nms, bar, "reference")
    dep = detect_all(bundle.detector(cfg), spec.dataset, cfg.val_nms, bar, "deployed")
    if spec.labelled:
        return ValResult(coco_map(spec.dataset, ref), coco_map(spec.dataset, dep), "mAP vs labels", len(spec.dataset))
    return ValResult(MapResult(1.0, 1.0), agreement_map(spec.dataset, ref, dep), "agreement with the FP32 reference", len(spec.dataset))


def bench_bundle(bundle: Bundle, data: str | Path | None = None, cfg: DeployConfig | None = None, runs: int | None = None,
                 events: EventLog | None = None, progress: Callable[[int, int], None] | None = None) -> LatencyResult:
    """End-to-end and per-stage latency of the bundle's plan on up to 16 images of ``data``."""
    cfg = cfg or load_deploy_config()
    spec = _data(bundle, data)
    images = [read_image(r.path) for r in spec.dataset.records[:16]]
    return measure_latency(bundle.detector(cfg, events), images, cfg.validate.latency_warmup, runs or cfg.validate.latency_runs, progress)


@dataclass
class CheckResult:
    passed: bool
    failures: list[str] = field(default_factory=list)
    measured: dict[str, Any] = field(default_factory=dict)


def check_bundle(bundle: str | Path | Bundle, baseline: str | Path | None = None, max_drift: float | None = None,
                 sla_ms: float | None = None, max_regression: float | None = None, data: str | Path | None = None,
                 runs: int | None = None, quiet: bool = True) -> CheckResult:
    """Re-measure drift and latency; one failure line per broken limit (drift, SLA, regression vs baseline)."""
    b = bundle if isinstance(bundle, Bundle) else load_bundle(bundle)
    cfg = load_deploy_config()
    max_drift = cfg.validate.max_drift if max_drift is None else max_drift
    sla_ms = float(b.meta.get("sla_ms") or cfg.validate.sla_ms) if sla_ms is None else sla_ms
    max_regression = cfg.validate.max_regression if max_regression is None else max_regression
    base = read_baseline(baseline) if baseline else None
    val = val_bundle(b, data, cfg, quiet)
    lat = bench_bundle(b, data, cfg, runs)
    p95 = lat.end_to_end["p95"]
    failures = []
    drift = val.drift
    for name, value in (("mAP50", drift.map50), ("mAP50-95", drift.map50_95)):
        if value < -max_drift:
            failures.append(f"{name} drift {value:+.4f} exceeds the limit -{max_drift}")
    if p95 > sla_ms:
        failures.append(f"p95 latency {p95:.2f} ms exceeds the SLA {sla_ms} ms")
    if base is not None and p95 > base["p95_ms"] * (1 + max_regression):
        failures.append(f"p95 latency {p95:.2f} ms is {p95 / base['p95_ms'] - 1:+.1%} over the baseline {base['p95_ms']:.2f} ms (limit +{max_regression:.0%})")
    measured = {"val": val.to_dict(), "latency": lat.to_dict(), "p95_ms": p95, "limits": {
        "max_drift": max_drift, "sla_ms": sla_ms, "max_regression": max_regression, "baseline": base}}
    return CheckResult(not failures, failures, measured)


def write_baseline(result: CheckResult, path: str | Path) -> None:
    Path(path).write_text(json.dumps({"p95_ms": result.measured["p95_ms"], "drift": result.measured["val"]["drift"]}, indent=2))


def read_baseline(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        base = json.loads(p.read_text())
        float(base["p95_ms"])
    except FileNotFoundError:
        raise YoloEdgeError(f"baseline not found: {p}; record one with yolo-edge check BUNDLE --write-baseline {p}") from None
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
        raise YoloEdgeError(f"{p} is not a yolo-edge baseline (JSON with p95_ms)") from None
    return base  # type: ignore[no-any-return]
