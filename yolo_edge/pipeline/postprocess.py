"""Decode output -> class-aware NMS -> boxes in original-image pixels, as a validated ``Detections``.

Matches ultralytics' ``non_max_suppression`` (best class per box or every class above ``conf``, ``max_nms``
candidates, greedy IoU suppression per class) and ``scale_boxes``, in numpy: no torch on the board
(``benchmarks/run_all.py`` times it against ultralytics' torch path, post-processing table).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from yolo_edge.core.codec import plain
from yolo_edge.core.config import NmsConfig
from yolo_edge.model.decode import HeadOutputs, classes_over, head_candidates, head_xywh
from yolo_edge.pipeline.preprocess import Letterboxed

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
        """One JSON record per box (``codec.plain``: floats rounded by the one rule)."""
        return plain(
            [
                {
                    "xyxy": box,
                    "confidence": c,
                    "class_id": int(k),
                    "class_name": self.names[k],
                }
                for box, c, k in zip(self.xyxy, self.confidence, self.class_id)
            ]
        )


NMS_BLOCK = 512  # dense fallback: boxes compared at once, bounding its IoU matrices at NMS_BLOCK x kept values
NMS_PAIRS = 1 << 22  # pairs of same-class boxes above which NMS uses the dense blocks (one huge class)


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of xyxy boxes ``a`` and ``b``, broadcast (float32, as torchvision's)."""
    w = np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0])
    h = np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1])
    inter = np.clip(w, 0, None) * np.clip(h, 0, None)
    union = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1]) + (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    with np.errstate(divide="ignore", invalid="ignore"):
        return inter / (union - inter)


KEPT_IOU = 0.5  # a reference box is kept by a box of the same class overlapping it this much
Boxes = tuple[np.ndarray, np.ndarray]  # one image's xyxy (N, 4) and class ids (N,)


def boxes_kept(reference: Sequence[Boxes], candidate: Sequence[Boxes], iou: float = KEPT_IOU) -> int:
    """How many of ``reference``'s boxes (per image) ``candidate`` keeps: a box of the same class at IoU >= ``iou``
    in the same image (one candidate box may keep several reference boxes, as a user comparing the two sees it)."""
    if len(reference) != len(candidate):
        raise ValueError(f"{len(candidate)} candidate images for {len(reference)} reference images")
    kept = 0
    for (rb, rc), (cb, cc) in zip(reference, candidate):
        if not len(rb) or not len(cb):
            continue
        same = rc[:, None] == cc[None, :]
        overlap = box_iou(rb[:, None, :].astype(np.float64), cb[None, :, :].astype(np.float64))
        kept += int(((overlap >= iou) & same).any(axis=1).sum())
    return kept


def _fixed_point(n: int, first: np.ndarray, second: np.ndarray, alive: np.ndarray | None = None) -> np.ndarray:
    """Greedy NMS without a Python loop per box. ``(first[k], second[k])`` are the overlapping pairs, the
    first ahead of the second in score order: the first suppresses the second if it is kept. The kept set is
    the unique fixed point of "a box is kept iff it is alive and no kept box ahead of it overlaps it";
    iterating that rule from "every alive box" settles at least one more leading box per round and, in
    practice, stops after as many rounds as the longest chain of suppressions."""
    alive = np.ones(n, bool) if alive is None else alive
    kept = alive
    while True:
        suppressed = np.zeros(n, bool)
        suppressed[second[kept[first]]] = True
        nxt = alive & ~suppressed
        if np.array_equal(nxt, kept):
            return kept
        kept = nxt


def _x_overlapping_pairs(boxes: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of boxes of one group whose x-ranges overlap (the only pairs with an IoU above 0), once each,
    as (first, second) indices with first < second: a sweep over the boxes sorted by (group, x1)."""
    by_x = np.lexsort((boxes[:, 0], group))
    span = float(boxes[:, 2].max() - boxes[:, 0].min()) + 1.0
    key = group[by_x] * span + (boxes[by_x, 0] - boxes[:, 0].min())  # groups apart, x1 increasing inside
    ends = group[by_x] * span + (boxes[by_x, 2] - boxes[:, 0].min())  # each box's x2 on the same axis
    partners = np.maximum(np.searchsorted(key, ends, side="left") - np.arange(len(key)) - 1, 0)
    first = np.repeat(np.arange(len(key)), partners)
    second = first + 1 + np.arange(len(first)) - np.repeat(np.cumsum(partners) - partners, partners)
    a, b = by_x[first], by_x[second]
    return np.minimum(a, b), np.maximum(a, b)


def _nms_pairs(boxes: np.ndarray, group: np.ndarray, iou: float) -> np.ndarray | None:
    """Kept mask of ``boxes`` (in score order inside each group), resolving the overlapping pairs of each
    group at once; None when they are more than ``NMS_PAIRS`` (one huge crowded class)."""
    first, second = _x_overlapping_pairs(boxes, group)
    if len(first) > NMS_PAIRS:
        return None
    over = box_iou(boxes[first], boxes[second]) > iou
    return _fixed_point(len(boxes), first[over], second[over])


def _nms_blocks(boxes: np.ndarray, iou: float) -> np.ndarray:
    """Kept mask of score-ordered ``boxes`` in blocks of ``NMS_BLOCK``: a block is thinned by the boxes kept
    so far, then resolved inside itself; memory stays bounded whatever the number of boxes."""
    kept = np.zeros(len(boxes), bool)
    kept_boxes = boxes[:0]
    upper = np.triu(np.ones((NMS_BLOCK, NMS_BLOCK), bool), 1)
    for start in range(0, len(boxes), NMS_BLOCK):
        block = boxes[start : start + NMS_BLOCK]
        alive = np.asarray(~(box_iou(kept_boxes[:, None], block[None]) > iou).any(0))
        first, second = np.nonzero((box_iou(block[:, None], block[None]) > iou) & upper[: len(block), : len(block)])
        mask = _fixed_point(len(block), first, second, alive)
        kept[start : start + len(block)] = mask
        kept_boxes = np.concatenate([kept_boxes, block[mask]])
    return kept


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float, classes: np.ndarray | None = None) -> np.ndarray:
    """Greedy NMS over xyxy ``boxes``, per class when ``classes`` is given; returns kept indices in descending
    score order (torchvision's ``nms``/``batched_nms`` result). Only boxes of one class whose x-ranges overlap
    are compared, each pair once, in numpy; past ``NMS_PAIRS`` such pairs, bounded dense blocks. Equal scores
    go in index order (torchvision leaves them to its sort)."""
    group = np.zeros(len(scores), np.int64) if classes is None else classes
    order = np.lexsort((-scores, group))  # by class, then by score (stable)
    ranked = boxes[order].astype(np.float32, copy=False)
    mask = _nms_pairs(ranked, group[order], iou) if len(order) else np.zeros(0, bool)
    if mask is not None:
        kept = order[mask]
    else:
        span = ranked.max() - ranked.min() + 1  # classes shifted apart, as ultralytics' 7680 px offset
        offset = (group[order] * span).astype(np.float32)[:, None]
        by_score = np.argsort(-scores[order], kind="stable")  # one score order across classes, boxes kept apart
        kept = order[by_score[_nms_blocks((ranked + offset)[by_score], iou)]]
    kept = np.sort(kept)
    return kept[np.argsort(-scores[kept], kind="stable")]


PREDICT_NMS = NmsConfig(conf=0.25, iou=0.7, max_det=300)  # ultralytics' predictor's defaults


def postprocess(
    tensors: dict[str, np.ndarray],
    lb: Letterboxed,
    names: tuple[str, ...],
    settings: NmsConfig = PREDICT_NMS,
    head: HeadOutputs | None = None,
) -> Detections:
    """Turn one image's final tensors into Detections in original-image pixels: ``output0`` (1, 4+nc, anchors),
    its only tensor, or with ``head`` the head's raw outputs, decoded candidates first (only the anchors over
    ``conf`` get a DFL decode; ultralytics decodes every anchor before NMS). Both give the same detections
    (``tests/test_pipeline.py``; ``benchmarks/decode.py`` times them).

    ``settings``' ``multi_label`` keeps every class above ``conf`` for a box (as ultralytics' validator does),
    instead of only the best one (as its predictor does). ``benchmarks/run_all.py`` times it against ultralytics'.
    ``classes``: only candidates of these class ids go on to NMS (ultralytics' ``classes=``).
    """
    conf, multi_label, classes = settings.conf, settings.multi_label, settings.classes
    if head is None:
        (output0,) = tensors.values()
        # anchors in order (as ultralytics), read in output0's own (4+nc, anchors) layout: no transposed copy
        idx, cls, score = classes_over(output0[0, 4:], conf, multi_label)
    else:
        idx, cls, score = head_candidates(tensors, head, conf, multi_label)
    if classes is not None:
        wanted = np.isin(cls, np.asarray(classes, dtype=np.int64))
        idx, cls, score = idx[wanted], cls[wanted], score[wanted]
    if not len(score):
        return Detections.empty(names)
    if len(score) > MAX_NMS:
        top = np.argsort(-score, kind="stable")[:MAX_NMS]
        idx, cls, score = idx[top], cls[top], score[top]
    xywh = output0[0, :4, idx] if head is None else head_xywh(tensors, head, idx)  # (candidates, 4)
    xyxy = np.concatenate([xywh[:, :2] - xywh[:, 2:] / 2, xywh[:, :2] + xywh[:, 2:] / 2], axis=1)
    kept = nms(xyxy, score, settings.iou, cls)[: settings.max_det]
    xyxy, score, cls = xyxy[kept], score[kept], cls[kept]
    xyxy = xyxy - np.array([lb.pad[0], lb.pad[1], lb.pad[0], lb.pad[1]], np.float32)
    xyxy = xyxy / np.array([lb.gain[1], lb.gain[0], lb.gain[1], lb.gain[0]], np.float32)
    h, w = lb.orig_shape
    xyxy = np.clip(xyxy, 0, [w, h, w, h]).astype(np.float32)
    return Detections(xyxy=xyxy, confidence=score.astype(np.float32), class_id=cls.astype(np.int64), names=names)
