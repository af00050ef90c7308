"""mAP with pycocotools: against ground truth, or (no labels) against a reference model's detections.

Agreement (no labels): the reference's detections at or above the deploy confidence (what a user of the
reference would see) are the ground truth, in the model's own categories; the candidate is scored with
all its detections, like any mAP. The reference scored this way against itself gets exactly 1.0.

Example:
    >>> ds = load_dataset("datasets/shapes/data.yaml").subset(100)  # doctest: +SKIP
    >>> coco_map(ds, [detect(r.path) for r in ds.records])  # doctest: +SKIP
    MapResult(map50=0.93, map50_95=0.71)
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from yolo_edge.config import NmsConfig
from yolo_edge.data.dataset import Dataset
from yolo_edge.data.resolve import EvalData
from yolo_edge.errors import YoloEdgeError
from yolo_edge.pipeline.detector import Detector
from yolo_edge.pipeline.postprocess import Detections
from yolo_edge.pipeline.preprocess import read_image
from yolo_edge.progress import Bar


@dataclass(frozen=True)
class MapResult:
    map50: float
    map50_95: float

    def to_dict(self) -> dict[str, float]:
        return {"map50": round(self.map50, 4), "map50_95": round(self.map50_95, 4)}

    def minus(self, other: MapResult) -> MapResult:
        return MapResult(self.map50 - other.map50, self.map50_95 - other.map50_95)


def _gt_coco(dataset: Dataset, boxes: Sequence[np.ndarray], classes: Sequence[np.ndarray]) -> COCO:
    images: list[dict[str, object]] = []
    anns: list[dict[str, object]] = []
    for i, (rec, b, c) in enumerate(zip(dataset.records, boxes, classes)):
        images.append({"id": i + 1, "width": rec.width, "height": rec.height, "file_name": rec.path.name})
        for box, cls in zip(b, c):
            w, h = float(box[2] - box[0]), float(box[3] - box[1])
            anns.append(
                {
                    "id": len(anns) + 1,
                    "image_id": i + 1,
                    "category_id": int(cls) + 1,
                    "bbox": [float(box[0]), float(box[1]), w, h],
                    "area": w * h,
                    "iscrowd": 0,
                }
            )
    gt = COCO()
    gt.dataset = {
        "images": images,
        "annotations": anns,
        "categories": [{"id": k + 1, "name": n} for k, n in enumerate(dataset.names)],
    }
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
    return gt


def _evaluate(gt: COCO, detections: Sequence[Detections]) -> MapResult:
    rows = []
    for i, det in enumerate(detections):
        for box, conf, cls in zip(det.xyxy, det.confidence, det.class_id):
            rows.append([i + 1, box[0], box[1], box[2] - box[0], box[3] - box[1], conf, cls + 1])
    if not rows:
        return MapResult(0.0, 0.0)
    with contextlib.redirect_stdout(io.StringIO()):
        dt = gt.loadRes(np.asarray(rows, dtype=np.float64))
        ev = COCOeval(gt, dt, "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return MapResult(map50=float(max(ev.stats[1], 0.0)), map50_95=float(max(ev.stats[0], 0.0)))


def detect_all(detector: Detector, dataset: Dataset, nms: NmsConfig, bar: Bar, desc: str) -> list[Detections]:
    """``detector`` on every image of ``dataset``, in order, with the evaluation NMS settings."""
    return [detector.detect(read_image(r.path), nms)[0] for r in bar(dataset.records, desc)]


def score(data: EvalData, reference: Sequence[Detections], detections: Sequence[Detections], conf: float) -> MapResult:
    """mAP of ``detections`` against ``data``'s labels, or (unlabelled) their agreement with ``reference``,
    whose detections at ``conf`` or more are the ground truth."""
    if data.labelled:
        return coco_map(data.dataset, detections)
    return agreement_map(data.dataset, reference, detections, conf)


def coco_map(dataset: Dataset, detections: Sequence[Detections]) -> MapResult:
    """mAP50 and mAP50-95 of ``detections`` (one per dataset image, same order) against the labels."""
    if len(detections) != len(dataset):
        raise ValueError(f"{len(detections)} detections for {len(dataset)} images")
    if not any(len(r.classes) for r in dataset.records):
        raise YoloEdgeError(
            f"the {len(dataset)} evaluation images have no labelled object of the model's classes "
            f"({', '.join(dataset.names[:6])}{', ...' if len(dataset.names) > 6 else ''}): mAP cannot be measured"
        )
    return _evaluate(
        _gt_coco(dataset, [r.boxes for r in dataset.records], [r.classes for r in dataset.records]), detections
    )


def agreement_map(
    dataset: Dataset, reference: Sequence[Detections], candidate: Sequence[Detections], conf: float
) -> MapResult:
    """mAP of ``candidate`` with ``reference``'s detections scoring ``conf`` or more as the ground truth
    (unlabelled data), in the categories ``dataset.names`` (the model's classes)."""
    if len(reference) != len(dataset) or len(candidate) != len(dataset):
        raise ValueError(
            f"{len(reference)} reference and {len(candidate)} candidate detections for {len(dataset)} images"
        )
    keep = [d.confidence >= conf for d in reference]
    if not any(k.any() for k in keep):
        raise YoloEdgeError(
            f"the FP32 reference detects nothing at confidence >= {conf} on the {len(dataset)} evaluation "
            "images, so agreement cannot be measured; pass --data with images (or labels) the model detects objects in"
        )
    return _evaluate(
        _gt_coco(
            dataset, [d.xyxy[k] for d, k in zip(reference, keep)], [d.class_id[k] for d, k in zip(reference, keep)]
        ),
        candidate,
    )
