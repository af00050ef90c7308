"""The CPU decode of the detect head's raw outputs, candidates first: each anchor's class logits are compared with
logit(conf) (the sigmoid is monotonic), and only the anchors over it get a sigmoid and a DFL box decode. ultralytics
decodes every anchor before NMS, as the ONNX decode subgraph does; both give the same detections
(``tests/test_pipeline.py``; ``benchmarks/decode.py`` times the three). NMS and the mapping to the image are
``pipeline.postprocess``'s; the planner prices the decode with it (``plan.checks``), the board model by its work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

BOX_BRANCH = re.compile(r"/cv2\.\d+/")  # Detect's box-distribution conv branch (4 * reg_max channels)
CLASS_BRANCH = re.compile(r"/cv3\.\d+/")  # its class-logit branch (nc channels)
LOGIT_MARGIN = 1e-3  # candidates are pre-selected this far below logit(conf); the exact test is on the score


@dataclass(frozen=True)
class HeadOutputs:
    """The head's six raw outputs as the CPU decode reads them: per level (largest first) the box distribution
    ``(1, 4 * reg_max, h, w)`` and the class logits ``(1, nc, h, w)``, by tensor name, with the level's stride."""

    boxes: tuple[str, ...]
    classes: tuple[str, ...]
    strides: tuple[int, ...]
    reg_max: int

    @classmethod
    def find(cls, shapes: dict[str, tuple[int, ...]], height: int) -> HeadOutputs | None:
        """The head outputs among a frame's final tensors ``shapes`` (name -> shape; ``height`` the model input's),
        recognised by the branch their ultralytics names carry; None when they are not the head's (``output0``)."""
        paired = _paired(shapes)
        if paired is None:
            return None
        boxes, classes = paired
        return cls(boxes, classes, tuple(height // shapes[b][2] for b in boxes), shapes[boxes[0]][1] // 4)

    def work(self, tensors: dict[str, np.ndarray]) -> tuple[int, int]:
        """(anchors over every level, classes): what the decode's logit scan reads."""
        return sum(tensors[n][0, 0].size for n in self.classes), tensors[self.classes[0]].shape[1]


def _paired(shapes: dict[str, tuple[int, ...]]) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(box maps, class maps), largest level first, when ``shapes`` are exactly the head's raw outputs, paired per
    level; else None."""
    boxes = sorted((n for n in shapes if BOX_BRANCH.search(n)), key=lambda n: -shapes[n][2])
    classes = sorted((n for n in shapes if CLASS_BRANCH.search(n)), key=lambda n: -shapes[n][2])
    if not boxes or len(boxes) != len(classes) or len(boxes) + len(classes) != len(shapes):
        return None
    if any(len(shapes[n]) != 4 for n in shapes) or shapes[boxes[0]][1] % 4:
        return None
    if any(shapes[b][2:] != shapes[c][2:] for b, c in zip(boxes, classes)):
        return None
    return tuple(boxes), tuple(classes)


def head_maps(shapes: dict[str, tuple[int, ...]]) -> tuple[str, ...]:
    """Every map among ``shapes`` (name -> shape) when they are exactly the head's raw outputs, else (): the decode
    reads them in either memory layout, ``(1, C, H, W)`` as they are or ``(1, H, W, C)`` as a convolution writes
    them, handed over as its ``(1, C, H, W)`` view (:func:`head_candidates` scans the class logits in the order they
    lie in memory; :func:`head_xywh` gathers only the candidates' boxes)."""
    paired = _paired(shapes)
    return (*paired[0], *paired[1]) if paired is not None else ()


def _logit(p: float) -> float:
    return float(np.log(p / (1.0 - p))) if 0.0 < p < 1.0 else (-np.inf if p <= 0.0 else np.inf)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-x, dtype=np.float32))).astype(np.float32, copy=False)


def head_candidates(
    tensors: dict[str, np.ndarray], head: HeadOutputs, conf: float, multi_label: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(anchor index, class, score) of every candidate above ``conf`` (every class above it with ``multi_label``,
    else each anchor's best), from the class logits: they are compared with logit(``conf``) (the sigmoid is
    monotonic) and only the anchors over it get a sigmoid, which the exact ``score > conf`` test then reads.
    Anchors are numbered as in ``output0`` (levels in order, row-major inside each), in that order."""
    cut = _logit(conf) - LOGIT_MARGIN
    idx, cls, score, offset = [], [], [], 0
    for name in head.classes:
        a, k, logit = _over(tensors[name][0], cut, multi_label)
        s = _sigmoid(logit)
        keep = s > conf
        idx.append(a[keep] + offset)
        cls.append(k[keep])
        score.append(s[keep])
        offset += tensors[name][0, 0].size
    return np.concatenate(idx), np.concatenate(cls), np.concatenate(score)


def _over(maps: np.ndarray, cut: float, multi_label: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(anchor, class, logit) of one level's class logits ``maps`` (nc, h, w) over ``cut``: every class over it with
    ``multi_label``, else each anchor's best; anchors ascending, classes ascending within one. Read in the order the
    logits lie in memory, the same result either way: channel-minor (NHWC) as one pass over the whole map, else
    per channel plane (:func:`classes_over`)."""
    nc = maps.shape[0]
    if nc > 1 and maps.strides[0] == maps.itemsize:  # (h, w, nc) in memory: one comparison pass, in that order
        rows = maps.transpose(1, 2, 0).reshape(-1, nc)  # (anchors, nc): a view
        i = np.flatnonzero(rows > cut)
        if multi_label:
            a, k = np.divmod(i, nc)
            return a, k, rows.reshape(-1)[i]
        a = np.unique(i // nc)
        over = rows[a]
        k = over.argmax(1)
        return a, k, over[np.arange(len(a)), k]
    return classes_over(maps.reshape(nc, -1), cut, multi_label)


def classes_over(values: np.ndarray, cut: float, multi_label: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(anchor, class, value) of a (nc, anchors) matrix's values over ``cut`` (class logits, or ``output0``'s
    scores), read per class row: every class over it with ``multi_label``, else each anchor's best; anchors
    ascending, classes ascending within one."""
    if multi_label and len(values) > 1:
        k, a = np.nonzero(values > cut)
        order = np.argsort(a, kind="stable")
        k, a = k[order], a[order]
        return a, k, values[k, a]
    best = values.max(0)
    a = np.flatnonzero(best > cut)
    return a, values[:, a].argmax(0), best[a]


def head_xywh(tensors: dict[str, np.ndarray], head: HeadOutputs, idx: np.ndarray) -> np.ndarray:
    """xywh (input pixels) of the anchors ``idx`` only: their DFL softmax, its expectation, dist2bbox and stride,
    in the order of ultralytics' decode (float32)."""
    out = np.empty((len(idx), 4), np.float32)
    bins = np.arange(head.reg_max, dtype=np.float32)
    offset = 0
    for name, stride in zip(head.boxes, head.strides):
        h, w = tensors[name].shape[2:]
        here = (idx >= offset) & (idx < offset + h * w)
        local = idx[here] - offset
        offset += h * w
        if not len(local):
            continue
        dist = tensors[name][0].reshape(4, head.reg_max, h * w)[:, :, local]  # (4, reg_max, n)
        e = np.exp(dist - dist.max(1, keepdims=True))
        ltrb = np.einsum("kbn,b->kn", e / e.sum(1, keepdims=True), bins).astype(np.float32)  # (4, n)
        ax = (local % w).astype(np.float32) + 0.5
        ay = (local // w).astype(np.float32) + 0.5
        x1, y1, x2, y2 = ax - ltrb[0], ay - ltrb[1], ax + ltrb[2], ay + ltrb[3]
        s = np.float32(stride)
        out[here] = np.stack([(x1 + x2) / 2 * s, (y1 + y2) / 2 * s, (x2 - x1) * s, (y2 - y1) * s], 1)
    return out


def count_candidates(tensors: dict[str, np.ndarray], head: HeadOutputs | None, conf: float) -> int:
    """Anchors whose best class score passes ``conf``: what the decode and NMS work on (the board model's price)."""
    if head is None:
        (output0,) = tensors.values()
        return int(np.count_nonzero(output0[0, 4:].max(axis=0) > conf))
    return len(head_candidates(tensors, head, conf, False)[0])
