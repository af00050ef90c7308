"""Re-measure a bundle and gate on it: ``val_bundle`` (mAP drift), ``bench_bundle`` (latency) and
``check_bundle`` (both, against limits and an optional baseline), usable from pytest:

    from yolo_edge import check_bundle

    def test_deployed_model_still_good():
        result = check_bundle("out/bundle", baseline="perf/baseline.json", max_drift=0.01)
        assert result.passed, result.failures
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yolo_edge.bundle import Bundle, load_bundle
from yolo_edge.data.resolve import DEMO, EvalData, resolve_eval_data
from yolo_edge.errors import YoloEdgeError
from yolo_edge.files import atomic_write
from yolo_edge.pipeline.detector import Detector
from yolo_edge.pipeline.preprocess import read_image
from yolo_edge.progress import progress_bar
from yolo_edge.validate.accuracy import MapResult, Scorer, detect_all
from yolo_edge.validate.latency import LatencyResult, measure_latency
from yolo_edge.validate.verdict import Limits, explain, failures, status


def bundle_eval_data(
    bundle: Bundle, data: str | Path | EvalData | None = None, class_map: str | None = None
) -> EvalData:
    """``data`` if given (an already resolved :class:`EvalData` as it is), else what deploy validated the bundle
    on: the demo val split, or the user's data set where it still is, without the images that calibrated. Given
    ``data`` leaves out the bundle's calibration images too."""
    if isinstance(data, EvalData):
        return data
    names = bundle.meta.model.names
    if data is not None:
        return resolve_eval_data(data, names, class_map, bundle.meta.calib)
    recorded = bundle.meta.data
    origin = recorded.origin
    if origin == DEMO:
        return resolve_eval_data(None, names)
    if not Path(origin).exists():
        raise YoloEdgeError(
            f"{bundle.path} was validated on {origin}, which is not on this machine; pass --data "
            "(the same data set, or a folder of images for agreement with the FP32 reference)"
        )
    print(
        f"yolo-edge: judging on {origin}, the data {bundle.path} was deployed with (--data to choose)", file=sys.stderr
    )
    return resolve_eval_data(origin, names, recorded.class_map, recorded.excluded)


@dataclass(frozen=True)
class ValResult:
    reference: MapResult
    deployed: MapResult
    kind: str  # "labels" or "agreement"
    images: int

    @property
    def drift(self) -> MapResult:
        return self.deployed.minus(self.reference)

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference": self.reference.to_dict(),
            "deployed": self.deployed.to_dict(),
            "drift": self.drift.to_dict(),
            "kind": self.kind,
            "images": self.images,
        }


def val_bundle(
    bundle: Bundle,
    data: str | Path | EvalData | None = None,
    quiet: bool = True,
    class_map: str | None = None,
    detector: Detector | None = None,
) -> ValResult:
    """mAP (or agreement) of the bundle's plan (``detector``, default: built from the bundle) and of the FP32
    reference on ``data`` (default: what deploy used)."""
    cfg = bundle.config
    ev = bundle_eval_data(bundle, data, class_map)
    bar = progress_bar(not quiet)
    with bundle.reference_detector() as reference:
        ref = detect_all(reference, ev.dataset, cfg.val_nms, bar, "reference")
    with nullcontext(detector) if detector else bundle.detector() as deployed:
        dep = detect_all(deployed, ev.dataset, cfg.val_nms, bar, "deployed")
    scorer = Scorer(ev, ref, cfg.validate, cfg.nms.conf)
    return ValResult(scorer.score(ref).map, scorer.score(dep).map, ev.kind, len(ev.dataset))


def bench_bundle(
    bundle: Bundle,
    data: str | Path | EvalData | None = None,
    runs: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    detector: Detector | None = None,
) -> LatencyResult:
    """End-to-end and per-phase latency of the bundle's plan (``detector``, default: built from the bundle) on
    up to 16 images of ``data``."""
    cfg = bundle.config
    ev = bundle_eval_data(bundle, data)
    images = [read_image(r.path) for r in ev.dataset.records[:16]]
    with nullcontext(detector) if detector else bundle.detector() as deployed:
        return measure_latency(
            deployed, images, cfg.validate.latency_warmup, runs or cfg.validate.latency_runs, progress
        )


@dataclass
class GateResult:
    """What ``check`` measured and concluded; ``to_dict()`` is ``check --json``."""

    passed: bool
    status: str  # the words deploy's table uses: ok, fails drift, fails SLA, ... (plus placement, regression)
    failures: list[str]  # one line per broken limit, with its numbers
    val: ValResult
    latency: LatencyResult
    limits: Limits
    max_regression: float
    baseline_p95_ms: float | None

    @property
    def p95_ms(self) -> float:
        return self.latency.end_to_end.p95

    def to_dict(self) -> dict[str, Any]:
        baseline = None if self.baseline_p95_ms is None else {"p95_ms": self.baseline_p95_ms}
        return {
            "passed": self.passed,
            "status": self.status,
            "failures": self.failures,
            "val": self.val.to_dict(),
            "latency": self.latency.to_dict(),
            "p95_ms": self.p95_ms,
            "limits": {
                "max_drift": self.limits.max_drift,
                "sla_ms": self.limits.sla_ms,
                "max_regression": self.max_regression,
                "baseline": baseline,
            },
        }


def check_bundle(
    bundle: str | Path | Bundle,
    baseline: str | Path | None = None,
    max_drift: float | None = None,
    sla_ms: float | None = None,
    max_regression: float | None = None,
    data: str | Path | None = None,
    runs: int | None = None,
    quiet: bool = True,
    class_map: str | None = None,
) -> GateResult:
    """Re-measure drift and latency; one failure line per broken limit (drift, SLA, regression vs baseline).
    Limits default to the ones the bundle was deployed with."""
    b = bundle if isinstance(bundle, Bundle) else load_bundle(bundle)
    cfg = b.config
    limits = Limits(
        cfg.validate.max_drift if max_drift is None else max_drift, cfg.validate.sla_ms if sla_ms is None else sla_ms
    )
    max_regression = cfg.validate.max_regression if max_regression is None else max_regression
    base = read_baseline(baseline) if baseline else None
    with b.detector() as detector:
        ev = bundle_eval_data(b, data, class_map)  # read once: val and bench use the same images
        val = val_bundle(b, ev, quiet, detector=detector)
        lat = bench_bundle(b, ev, runs, detector=detector)
    p95 = lat.end_to_end.p95
    fails = failures(val.drift, p95, limits)
    lines = explain(fails, val.drift, p95, limits)
    if detector.executor.placement_problems:  # the bundle does not run what deploy proved
        fails.insert(0, "placement")
        lines[:0] = detector.executor.placement_problems
    if base is not None and p95 > base * (1 + max_regression):
        fails.append("regression")
        lines.append(
            f"p95 latency {p95:.2f} ms is {p95 / base - 1:+.1%} over the baseline {base:.2f} ms "
            f"(limit +{max_regression:.0%})"
        )
    return GateResult(not fails, status(fails), lines, val, lat, limits, max_regression, base)


def write_baseline(result: GateResult, path: str | Path) -> None:
    """Record the measured p95 and drift (atomically); ``check_can_write`` it before measuring."""
    doc = {"p95_ms": result.p95_ms, "drift": result.val.drift.to_dict()}
    atomic_write(Path(path), json.dumps(doc, indent=2).encode())


def read_baseline(path: str | Path) -> float:
    """The p95 (ms) of a baseline written by ``write_baseline``: a positive, finite number of milliseconds."""
    p = Path(path)
    try:
        base = json.loads(p.read_text())
        p95 = float(base["p95_ms"])
    except FileNotFoundError:
        raise YoloEdgeError(
            f"baseline not found: {p}; record one with yolo-edge check BUNDLE --write-baseline {p}"
        ) from None
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, UnicodeDecodeError, IsADirectoryError):
        raise YoloEdgeError(f"{p} is not a yolo-edge baseline (JSON with p95_ms)") from None
    if not (math.isfinite(p95) and p95 > 0):
        raise YoloEdgeError(
            f"{p}: p95_ms is {base['p95_ms']!r}, not a positive number of milliseconds; record it again with "
            f"yolo-edge check BUNDLE --write-baseline {p}"
        )
    return p95
