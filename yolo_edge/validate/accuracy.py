"""mAP with pycocotools: against ground truth, or (no labels) against a reference model's detections.

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

from yolo_edge.data.dataset import Dataset
from yolo_edge.pipeline.postprocess import Detections


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
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": int(cls) + 1,
                         "bbox": [float(box[0]), float(box[1]), w, h], "area": w * h, "iscrowd": 0})
    gt = COCO()
    gt.dataset = {"images": images, "annotations": anns,
                  "categories": [{"id": k + 1, "name": n} for k, n in enumerate(dataset.names)]}
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
    return gt


def _evaluate(gt: COCO, detections: Sequence[Detections]) -> MapResult:
    rows = []
    for i, det in enumerate(detections):
        for box, conf, cls in zip(det.xyxy, det.confidence, det.class_id):
            rows.append([i + 1, box[0], box[1], box[2] - box[0], box[3] - box[1], conf, cls + 1])
    if not rows or not gt.dataset["annotations"]:
        return MapResult(0.0, 0.0)
    with contextlib.redirect_stdout(io.StringIO()):
        dt = gt.loadRes(np.asarray(rows, dtype=np.float64))
        ev = COCOeval(gt, dt, "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return MapResult(map50=float(max(ev.stats[1], 0.0)), map50_95=float(max(ev.stats[0], 0.0)))


def coco_map(dataset: Dataset, detections: Sequence[Detections]) -> MapResult:
    """mAP50 and mAP50-95 of ``detections`` (one per dataset image, same order) against the labels."""
    if len(detections) != len(dataset):
        raise ValueError(f"{len(detections)} detections for {len(dataset)} images")
    return _evaluate(_gt_coco(dataset, [r.boxes for r in dataset.records], [r.classes for r in dataset.records]), detections)


def agreement_map(dataset: Dataset, reference: Sequence[Detections], candidate: Sequence[Detections]) -> MapResult:
    """mAP of ``candidate`` with ``reference``'s detections as pseudo ground truth (for unlabelled data)."""
    return _evaluate(_gt_coco(dataset, [d.xyxy for d in reference], [d.class_id for d in reference]), candidate)
