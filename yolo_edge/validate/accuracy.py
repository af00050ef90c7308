"""COCO mAP (faster-coco-eval: pycocotools' COCOeval in C++, as ultralytics validates; the same figures,
``tests/test_verdict.py``): against ground truth, or (no labels) against pseudo-labels drawn from the FP32
reference, so that a plan's drift reads on the same scale either way.

Agreement on the labelled scale: taking the reference's boxes as exact ground truth makes sub-pixel jitter
at IoU 0.90-0.95 a miss and ignores whether a changed detection was a real object, so such a drift is
several times what labels would show (the demo's INT8 split: -0.0095 against -0.0002 with labels; symmetric
INT8 activations -0.019 against -0.002). Instead, each of ``draws`` pseudo-label sets keeps every reference
detection as a true object with probability equal to its confidence (YOLOv8's scores are close to
calibrated), and places its true box off the reference's by ``box_noise`` x the box size per edge (Gaussian,
seeded): a reference that localises this well is as strict as labels about a candidate's box jitter. Both
the reference and the candidate are scored against the same draws; the drift is the mean paired
difference, and the reference's own figure (below 1) is what a labelled mAP would be if the reference were
exactly as right as it is confident. ``tests/test_verdict.py`` checks, on the demo's labelled val split,
that the verdict in agreement mode equals the verdict with labels across FP32, BF16, INT8 u8 and s8, the head
at INT8 and a broken plan.

Example:
    >>> ds = load_dataset("datasets/shapes/data.yaml").subset(100)  # doctest: +SKIP
    >>> coco_map(ds, [detect(r.path) for r in ds.records])  # doctest: +SKIP
    MapResult(map50=0.93, map50_95=0.71)
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from faster_coco_eval import COCO

from yolo_edge.core.codec import plain
from yolo_edge.core.config import NmsConfig, ValidateConfig
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.progress import Bar
from yolo_edge.data.dataset import Dataset
from yolo_edge.data.resolve import EvalData
from yolo_edge.pipeline.detector import Detector
from yolo_edge.pipeline.postprocess import KEPT_IOU, Boxes, Detections, boxes_kept
from yolo_edge.pipeline.preprocess import read_image
from yolo_edge.validate.bootstrap import Evaluation, Resamples


@dataclass(frozen=True)
class MapResult:
    map50: float
    map50_95: float

    def to_dict(self) -> dict[str, float]:
        return plain({"map50": self.map50, "map50_95": self.map50_95})

    def minus(self, other: MapResult) -> MapResult:
        return MapResult(self.map50 - other.map50, self.map50_95 - other.map50_95)


def gt_coco(dataset: Dataset, boxes: Sequence[np.ndarray], classes: Sequence[np.ndarray]) -> COCO:
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


def coco_rows(detections: Sequence[Detections]) -> np.ndarray:
    """COCO result rows ``[image_id, x, y, w, h, score, category_id]`` (ids from 1) of every detection."""
    parts = [
        np.column_stack(
            [
                np.full(len(d.confidence), i + 1),
                d.xyxy[:, :2],
                d.xyxy[:, 2:] - d.xyxy[:, :2],
                d.confidence,
                d.class_id + 1,
            ]
        )
        for i, d in enumerate(detections)
        if len(d.confidence)
    ]
    return np.concatenate(parts).astype(np.float64) if parts else np.zeros((0, 7))


def _evaluate(gt: COCO, detections: Sequence[Detections]) -> MapResult:
    rows = coco_rows(detections)
    return MapResult(*Evaluation(gt, _results(gt, rows)).map) if len(rows) else MapResult(0.0, 0.0)


def _results(gt: COCO, rows: np.ndarray) -> COCO:
    """``rows`` as a COCO result set of ``gt``'s images and categories: of any ground truth drawn on the same
    dataset too (:func:`gt_coco` takes both from the dataset), so one serves every pseudo-label draw."""
    with contextlib.redirect_stdout(io.StringIO()):
        return gt.loadRes(rows)


def detect_all(
    detector: Detector,
    dataset: Dataset,
    nms: NmsConfig,
    bar: Bar,
    desc: str,
    condition: Callable[[np.ndarray, int], np.ndarray] | None = None,
) -> list[Detections]:
    """``detector`` on every image of ``dataset``, in order, with the evaluation NMS settings (each image changed
    by ``condition`` first, where given: :mod:`yolo_edge.validate.conditions`)."""
    change = condition or (lambda img, _i: img)
    return [detector.detect(change(read_image(r.path), i), nms)[0] for i, r in enumerate(bar(dataset.records, desc))]


@dataclass(frozen=True)
class Accuracy:
    """A plan's accuracy on the evaluation images: against labels where there are labels, and always its
    agreement with the reference (pseudo-labels); ``map`` is the one that decides. Each carries its bootstrap
    replicates (mAP50, mAP50-95 per row, the same resamples for every plan a scorer scores), so a drift
    (:meth:`minus`) carries its paired replicates and :attr:`interval` how sure it is."""

    labels: MapResult | None
    agreement: MapResult | None  # None: labelled images on which the reference detects nothing
    labels_samples: np.ndarray | None = field(default=None, compare=False, repr=False)
    agreement_samples: np.ndarray | None = field(default=None, compare=False, repr=False)
    level: float = 0.9  # the intervals' coverage
    kept: Kept | None = None  # the reference's boxes at the operating confidence that these detections keep

    @property
    def map(self) -> MapResult:
        found = self.labels or self.agreement
        assert found is not None
        return found

    @property
    def criterion(self) -> str:
        """``labels`` or ``agreement``: what decided."""
        return "labels" if self.labels else "agreement"

    @property
    def interval(self) -> Interval | None:
        """The deciding figure's central ``level`` bootstrap interval (None: not resampled)."""
        return _interval(self.labels_samples if self.labels else self.agreement_samples, self.level)

    @property
    def agreement_interval(self) -> Interval | None:
        return _interval(self.agreement_samples, self.level)

    def minus(self, other: Accuracy) -> Accuracy:
        labels = self.labels.minus(other.labels) if self.labels and other.labels else None
        agreement = self.agreement.minus(other.agreement) if self.agreement and other.agreement else None
        return Accuracy(
            labels,
            agreement,
            _paired(self.labels_samples, other.labels_samples) if labels else None,
            _paired(self.agreement_samples, other.agreement_samples) if agreement else None,
            self.level,
            self.kept,
        )


@dataclass(frozen=True)
class Kept:
    """How many of the FP32 reference's boxes at the operating confidence (``nms.conf``, of ``nms.classes`` when it
    keeps only some: what ``run`` and the stream show) a plan's detections there keep: same class, IoU >=
    :data:`KEPT_IOU`. The mAP drift scores every detection of every class down to ``val_nms.conf``; a plan within
    its limit can still lose a box a user sees."""

    kept: int
    of: int
    conf: float
    classes: tuple[int, ...] | None = None  # the operating NMS's ``classes`` when it keeps only some
    added: int = 0  # the other direction: the plan's boxes there that no FP32 box keeps (boxes it adds) ...
    boxes: int = 0  # ... of the plan's boxes there

    def __str__(self) -> str:
        return f"{self.kept}/{self.of}"

    @property
    def counted(self) -> str:
        """What is counted: ``boxes at conf 0.25 (same class, IoU >= 0.5)``, ``boxes of classes [0, 2] at ...`` when
        the operating NMS keeps only those classes."""
        which = "" if self.classes is None else f" of classes {list(self.classes)}"
        return f"boxes{which} at conf {self.conf:g} (same class, IoU >= {KEPT_IOU:g})"

    def to_dict(self) -> dict[str, object]:
        return plain(
            {
                "kept": self.kept,
                "of": self.of,
                "conf": self.conf,
                "classes": self.classes,
                "added": self.added,
                "boxes": self.boxes,
            }
        )


def _shown(detections: Detections, nms: NmsConfig) -> Boxes:
    """The boxes of ``detections`` the operating ``nms`` shows: at its confidence, of its classes."""
    keep = detections.confidence >= nms.conf
    if nms.classes is not None:
        keep &= np.isin(detections.class_id, nms.classes)
    return detections.xyxy[keep], detections.class_id[keep]


@dataclass(frozen=True)
class Interval:
    """A bootstrap interval of mAP50 and mAP50-95 (or of their drifts) and the images it was resampled from."""

    lo: MapResult
    hi: MapResult
    level: float
    images: int

    def to_dict(self) -> dict[str, object]:
        return plain({"lo": self.lo.to_dict(), "hi": self.hi.to_dict(), "level": self.level, "images": self.images})


def _interval(samples: np.ndarray | None, level: float) -> Interval | None:
    if samples is None or not len(samples):
        return None
    q = np.quantile(samples[:, :2], [(1 - level) / 2, (1 + level) / 2], axis=0)
    return Interval(MapResult(*map(float, q[0])), MapResult(*map(float, q[1])), level, int(samples[0, 2]))


def _paired(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    """Replicate by replicate differences (the same resamples), the image count kept in the third column."""
    if a is None or b is None:
        return None
    return np.column_stack([a[:, :2] - b[:, :2], a[:, 2]])


class Scorer:
    """Scores plans on one evaluation set against one reference's detections (drawn into pseudo-labels once),
    each with ``validate.bootstrap`` replicates over the same resamples of the images and the draws; ``operating`` is
    the NMS a user runs (``nms``), whose boxes :class:`Kept` counts. ``agreement`` False: on labelled images the
    agreement figure is not computed (where only the labelled one is shown)."""

    def __init__(
        self,
        data: EvalData,
        reference: Sequence[Detections],
        cfg: ValidateConfig,
        operating: NmsConfig,
        agreement: bool = True,
    ) -> None:
        self.data = data
        conf = operating.conf
        detects = any((d.confidence >= conf).any() for d in reference)
        if not detects and not data.labelled:
            raise YoloEdgeError(
                f"the FP32 reference detects nothing at confidence >= {conf} on the {len(data.dataset)} evaluation "
                "images, so agreement cannot be measured; pass --data with images (or labels) the model detects "
                "objects in"
            )
        draws, noise = cfg.agreement_draws, cfg.agreement_box_noise
        beside = agreement or not data.labelled  # agreement beside labels only where asked: it decides nothing there
        self._pseudo = pseudo_labels(data.dataset, reference, draws, noise) if detects and beside else []
        self._labels = _labelled_gt(data.dataset) if data.labelled else None
        self._resamples = Resamples.draw(cfg.bootstrap, len(data.dataset), draws)
        self.level = cfg.confidence
        self.operating = operating
        self._shown = [_shown(d, operating) for d in reference]  # the reference's boxes a user sees
        self._shown_count = sum(len(b) for b, _ in self._shown)

    def score(self, detections: Sequence[Detections]) -> Accuracy:
        if len(detections) != len(self.data.dataset):
            raise ValueError(f"{len(detections)} detections for {len(self.data.dataset)} images")
        rows = coco_rows(detections)
        labels, labels_samples = self._labels_map(rows)
        agreement, agreement_samples = self._agreement_map(rows)
        shown = [_shown(d, self.operating) for d in detections]
        kept, matched = boxes_kept(self._shown, shown), boxes_kept(shown, self._shown)
        boxes = sum(len(b) for b, _ in shown)
        op = self.operating
        return Accuracy(
            labels,
            agreement,
            labels_samples,
            agreement_samples,
            self.level,
            Kept(kept, self._shown_count, op.conf, op.classes, boxes - matched, boxes),
        )

    def _labels_map(self, rows: np.ndarray) -> tuple[MapResult | None, np.ndarray | None]:
        gt = self._labels
        if gt is None:
            return None, None
        if not len(rows):
            return MapResult(0.0, 0.0), self._samples(np.zeros((len(self._resamples.images), 2)))
        ev = Evaluation(gt, _results(gt, rows))
        return MapResult(*ev.map), self._samples(ev.resampled(self._resamples.images))

    def _agreement_map(self, rows: np.ndarray) -> tuple[MapResult | None, np.ndarray | None]:
        """The mean over the pseudo-label draws; each replicate weighs the draws as its resample of them does.
        Resampled only where agreement decides (no labels): beside labels it is a figure, not a verdict, and its
        replicates (one accumulation per replicate and draw it counts) were most of a score's time."""
        if not self._pseudo:
            return None, None
        if self._labels is not None:
            if not len(rows):
                return MapResult(0.0, 0.0), None
            results = _results(self._pseudo[0], rows)
            each = np.array([Evaluation(gt, results).map for gt in self._pseudo])
            return MapResult(*map(float, each.mean(axis=0))), None
        counts = self._resamples.draws
        figures, replicates = np.zeros((len(self._pseudo), 2)), np.zeros((*counts.shape, 2))
        results = _results(self._pseudo[0], rows) if len(rows) else None
        for d, gt in enumerate(self._pseudo):
            if results is None:
                continue
            ev = Evaluation(gt, results)
            used = np.nonzero(counts[:, d])[0]
            figures[d] = ev.map
            replicates[used, d] = ev.resampled(self._resamples.images[used])
        weighted = (replicates * counts[:, :, None]).sum(axis=1) / counts.sum(axis=1, keepdims=True)
        return MapResult(*map(float, figures.mean(axis=0))), self._samples(weighted)

    def _samples(self, figures: np.ndarray) -> np.ndarray:
        return np.column_stack([figures, np.full(len(figures), len(self.data.dataset))])


def pseudo_labels(
    dataset: Dataset, reference: Sequence[Detections], draws: int, box_noise: float, seed: int = 0
) -> list[COCO]:
    """``draws`` ground-truth sets drawn from ``reference``: each detection a true object with probability its
    confidence, its edges moved by ``box_noise`` x the box's width or height (see the module docstring)."""
    if len(reference) != len(dataset):
        raise ValueError(f"{len(reference)} reference detections for {len(dataset)} images")
    rng = np.random.default_rng(seed)
    sets = []
    for _ in range(draws):
        boxes, classes = [], []
        for d in reference:
            keep = rng.random(len(d.confidence)) < d.confidence
            b = d.xyxy[keep].astype(np.float64)
            size = np.concatenate([b[:, 2:] - b[:, :2]] * 2, axis=1)
            boxes.append(b + rng.standard_normal(b.shape) * box_noise * size)
            classes.append(d.class_id[keep])
        sets.append(gt_coco(dataset, boxes, classes))
    return sets


def _labelled_gt(dataset: Dataset) -> COCO:
    if not any(len(r.classes) for r in dataset.records):
        raise YoloEdgeError(
            f"the {len(dataset)} evaluation images have no labelled object of the model's classes "
            f"({', '.join(dataset.names[:6])}{', ...' if len(dataset.names) > 6 else ''}): mAP cannot be measured"
        )
    return gt_coco(dataset, [r.boxes for r in dataset.records], [r.classes for r in dataset.records])


def coco_map(dataset: Dataset, detections: Sequence[Detections]) -> MapResult:
    """mAP50 and mAP50-95 of ``detections`` (one per dataset image, same order) against the labels."""
    if len(detections) != len(dataset):
        raise ValueError(f"{len(detections)} detections for {len(dataset)} images")
    return _evaluate(_labelled_gt(dataset), detections)
