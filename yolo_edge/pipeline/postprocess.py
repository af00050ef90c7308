"""Decode output -> class-aware NMS -> boxes in original-image pixels, as a validated ``Detections``.

Matches ultralytics' ``non_max_suppression`` (best class per box, ``max_nms`` candidates, class offset
of 7680 px, greedy IoU suppression) and ``scale_boxes``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from yolo_edge.pipeline.preprocess import Letterboxed

MAX_WH = 7680  # ultralytics' per-class box offset for class-aware NMS
MAX_NMS = 30000


@dataclass(frozen=True)
class Detections:
    """Detections of one image: ``xyxy`` (N, 4) float32 pixels, ``confidence`` (N,), ``class_id`` (N,)."""

    xyxy: np.ndarray
    confidence: np.ndarray
    class_id: np.ndarray
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        n = len(self.xyxy)
        if self.xyxy.shape != (n, 4) or self.confidence.shape != (n,) or self.class_id.shape != (n,):
            raise ValueError(
                f"inconsistent detections: xyxy {self.xyxy.shape}, confidence {self.confidence.shape}, class_id "
                f"{self.class_id.shape}"
            )
        if n and (self.class_id.min() < 0 or self.class_id.max() >= len(self.names)):
            raise ValueError(f"class ids outside 0..{len(self.names) - 1}")

    def __len__(self) -> int:
        return len(self.xyxy)

    @property
    def class_names(self) -> list[str]:
        return [self.names[i] for i in self.class_id]

    @classmethod
    def empty(cls, names: tuple[str, ...]) -> Detections:
        return cls(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64), names)

    def to_list(self) -> list[dict[str, object]]:
        return [
            {
                "xyxy": [round(float(v), 2) for v in box],
                "confidence": round(float(c), 4),
                "class_id": int(k),
                "class_name": self.names[k],
            }
            for box, c, k in zip(self.xyxy, self.confidence, self.class_id)
        ]


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float) -> np.ndarray:
    """Greedy NMS over xyxy ``boxes``; returns kept indices in descending score order (torchvision semantics)."""
    order = np.argsort(-scores, kind="stable")
    x1, y1, x2, y2 = boxes.T
    areas = (x2 - x1) * (y2 - y1)
    keep = []
    while order.size:
        i = order[0]
        keep.append(i)
        rest = order[1:]
        w = np.clip(np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]), 0, None)
        h = np.clip(np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]), 0, None)
        inter = w * h
        overlap = inter / (areas[i] + areas[rest] - inter)
        order = rest[overlap <= iou]
    return np.asarray(keep, dtype=np.int64)


def postprocess(
    output: np.ndarray,
    lb: Letterboxed,
    names: tuple[str, ...],
    conf: float = 0.25,
    iou: float = 0.7,
    max_det: int = 300,
    multi_label: bool = False,
) -> Detections:
    """Turn ``output0`` (1, 4+nc, anchors) of one image into Detections in original-image pixels.

    ``multi_label`` keeps every class above ``conf`` for a box (as ultralytics' validator does), instead of
    only the best one (as its predictor does).
    """
    pred = output[0].T  # (anchors, 4+nc)
    scores_all = pred[:, 4:]
    if multi_label and scores_all.shape[1] > 1:
        idx, cls = np.nonzero(scores_all > conf)
        score = scores_all[idx, cls]
        xywh = pred[idx, :4]
    else:
        best = scores_all.argmax(1)
        score = scores_all[np.arange(len(best)), best]
        keep = score > conf
        xywh, score, cls = pred[keep, :4], score[keep], best[keep]
    if not len(score):
        return Detections.empty(names)
    if len(score) > MAX_NMS:
        top = np.argsort(-score, kind="stable")[:MAX_NMS]
        xywh, score, cls = xywh[top], score[top], cls[top]
    xyxy = np.concatenate([xywh[:, :2] - xywh[:, 2:] / 2, xywh[:, :2] + xywh[:, 2:] / 2], axis=1)
    kept = nms(xyxy + cls[:, None].astype(np.float32) * MAX_WH, score, iou)[:max_det]
    xyxy, score, cls = xyxy[kept], score[kept], cls[kept]
    xyxy = xyxy - np.array([lb.pad[0], lb.pad[1], lb.pad[0], lb.pad[1]], np.float32)
    xyxy = xyxy / np.array([lb.gain[1], lb.gain[0], lb.gain[1], lb.gain[0]], np.float32)
    h, w = lb.orig_shape
    xyxy = np.clip(xyxy, 0, [w, h, w, h]).astype(np.float32)
    return Detections(xyxy=xyxy, confidence=score.astype(np.float32), class_id=cls.astype(np.int64), names=names)
