"""Sequential judging: a plan's drift judged on a growing sample of the judging images, stopped where it is decided.

A search judges many candidates, and most are decided long before the last image: one whose INT8 head loses boxes
fails on a quarter of the images, one that agrees with the reference passes there. :class:`Looks` holds the samples
(``plan.search_looks``: fractions of the judging images, each a prefix of one seeded permutation, so every trial is
judged on the same images at each look and a larger look holds the smaller) with a scorer and the reference's
accuracy for each, and at last every image with the deploy's own scorer. A look before the last judges at a wider
interval, ``1 - (1 - confidence) / looks`` (the error rate split over the looks, as Bonferroni does): a look errs
less often than the last, which judges as deploy always has, so looking early adds little to how often a trial is
wrongly decided. An early pass only orders the search: the chosen plan is judged again on every image, at the
configured confidence, before deploy reports it (``flows.search``). A look whose sample holds nothing to score (no
labelled object, or nothing the reference detects) is not taken.

Example:
    >>> looks = Looks(evaldata, reference_dets, scorer, cfg)  # doctest: +SKIP
    >>> [(look.size, look.level) for look in looks.looks]  # doctest: +SKIP
    [(75, 0.9667), (150, 0.9667), (300, 0.9)]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from yolo_edge.core.config import DeployConfig
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.data.resolve import EvalData
from yolo_edge.pipeline.postprocess import Detections
from yolo_edge.validate.accuracy import Accuracy, Scorer
from yolo_edge.validate.verdict import drift_failure

MIN_LOOK = 30  # a look on fewer judging images than this is not taken: its interval would decide nothing


@dataclass(frozen=True)
class Look:
    """One sample of the judging images: their indices (in the data set's order), its scorer and the reference's
    accuracy on it, and the interval's coverage it judges at."""

    images: tuple[int, ...]
    scorer: Scorer
    reference: Accuracy
    level: float

    @property
    def size(self) -> int:
        return len(self.images)


@dataclass(frozen=True)
class Judged:
    """A plan's drift at one look: its accuracy there (and against the reference's), and what it decides."""

    look: Look
    accuracy: Accuracy
    drift: Accuracy
    fails: tuple[str, ...]  # () passes, ("drift",) fails, ("undecided drift",) neither

    @property
    def decided(self) -> bool:
        return self.fails != ("undecided drift",)


def look_sizes(fractions: Sequence[float], n: int) -> list[int]:
    """The looks' sample sizes of ``n`` images: each fraction's, where it holds at least :data:`MIN_LOOK` images and
    fewer than ``n``, then ``n``."""
    return [*sorted({k for f in fractions if MIN_LOOK <= (k := round(f * n)) < n}), n]


def sample(n: int, size: int, seed: int = 0) -> tuple[int, ...]:
    """The first ``size`` of one seeded permutation of ``n`` image indices, in index order: every look of every plan
    draws the same images, and a larger look holds the smaller."""
    return tuple(sorted(int(i) for i in np.random.default_rng(seed).permutation(n)[:size]))


def widened(confidence: float, looks: int) -> float:
    """The interval's coverage at a look before the last of ``looks``: the error rate split over them."""
    return 1 - (1 - confidence) / looks


class Looks:
    """The looks of one deploy's search (module docstring); the last is every judging image, at the configured
    confidence, with the deploy's scorer (what the three-plan table judges with)."""

    def __init__(
        self,
        data: EvalData,
        reference: Sequence[Detections],
        scorer: Scorer,
        reference_accuracy: Accuracy,
        cfg: DeployConfig,
        seed: int = 0,
    ) -> None:
        n = len(data.dataset)
        *sizes, _ = look_sizes(cfg.plan.search_looks, n)
        v = cfg.validate
        wider = replace(v, confidence=widened(v.confidence, len(sizes) + 1))
        self.looks: list[Look] = []
        for k in sizes:
            picked = sample(n, k, seed)
            sub = replace(data, dataset=data.dataset.pick(picked))
            ref = [reference[i] for i in picked]
            try:  # an early look decides by labels where there are labels: no agreement figure beside them
                look_scorer = Scorer(sub, ref, wider, cfg.nms, agreement=False)
                self.looks.append(Look(picked, look_scorer, look_scorer.score(ref), wider.confidence))
            except YoloEdgeError:  # nothing to score on this sample: judged at the next look
                continue
        self.looks.append(Look(tuple(range(n)), scorer, reference_accuracy, v.confidence))
        self.max_drift = v.max_drift

    @property
    def all(self) -> Look:
        return self.looks[-1]

    def judge(self, look: Look, detections: dict[int, Detections]) -> Judged:
        """The drift of ``detections`` (by image index; every image of ``look`` among them) at ``look``."""
        accuracy = look.scorer.score([detections[i] for i in look.images])
        drift = accuracy.minus(look.reference)
        fails = drift_failure(drift.map, drift.interval, -self.max_drift)
        return Judged(look, accuracy, drift, tuple(fails))
