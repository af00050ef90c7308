"""A bundle re-measured: ``val_bundle`` (mAP or agreement of its plan and of the FP32 reference),
``bench_bundle`` (its latency), on the data deploy judged it on (``bundle_eval_data``) or the user's."""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yolo_edge.bundle import Bundle
from yolo_edge.data.resolve import DEMO, EvalData, EvalKind, resolve_eval_data
from yolo_edge.errors import YoloEdgeError
from yolo_edge.pipeline.detector import Detector
from yolo_edge.pipeline.preprocess import read_image
from yolo_edge.progress import progress_bar
from yolo_edge.validate.accuracy import MapResult, Scorer, detect_all
from yolo_edge.validate.latency import LatencyResult, measure_latency


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
    kind: EvalKind
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
