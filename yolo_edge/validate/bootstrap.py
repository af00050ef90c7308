"""How sure a drift is: a paired bootstrap over the judging images (and, without labels, over the pseudo-label
draws), with COCO's own matching and accumulation.

An evaluation matches every detection to the ground truth once, image by image (faster-coco-eval's C++
``evaluate``); a bootstrap replicate re-accumulates those per-image matches over a resample of the images,
drawn with replacement (its C++ ``accumulate``, with the images' evaluations repeated as drawn), so a
replicate costs a sort and a precision-recall sweep, not a new matching. The resamples are drawn once per
:class:`~yolo_edge.validate.accuracy.Scorer`: the reference and every plan are resampled the same way, and a
plan's drift replicate is its figure minus the reference's on the same images (paired, so what both get
right or wrong alike cancels). Without resampling (every image once) the figure is exactly COCOeval's
mAP50 and mAP50-95 (``tests/test_verdict.py``).

Example:
    >>> ev = Evaluation(gt, results)  # doctest: +SKIP
    >>> ev.map, ev.resampled(Resamples.draw(200, len(dataset), 8).images).shape  # doctest: +SKIP
    ((0.93, 0.71), (200, 2))
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import faster_coco_eval.faster_eval_api_cpp as coco_cpp
import numpy as np
from faster_coco_eval import COCO, COCOeval_faster

from yolo_edge.core.host import runtime_threads


@dataclass(frozen=True)
class Resamples:
    """The bootstrap's draws: ``images[r]`` the image indices of replicate ``r`` (with replacement) and
    ``draws[r]`` how often it counts each pseudo-label draw (multinomial, summing to the number of draws)."""

    images: np.ndarray  # (B, n) int
    draws: np.ndarray  # (B, D) int

    @classmethod
    def draw(cls, replicates: int, images: int, draws: int, seed: int = 0) -> Resamples:
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, images, size=(replicates, images)) if images else np.zeros((replicates, 0), np.int64)
        return cls(idx, rng.multinomial(draws, [1 / draws] * draws, size=replicates))


class Evaluation:
    """One result set matched against one ground truth (area "all", up to 100 detections per image: the two
    figures COCO's mAP50 and mAP50-95 are), kept for re-accumulation over resamples of the images."""

    def __init__(self, gt: COCO, results: COCO) -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            ev = COCOeval_faster(gt, results, "bbox", print_function=lambda *_a, **_k: None, separate_eval=True)
            ev.params.areaRng, ev.params.areaRngLbl, ev.params.maxDets = [[0, 1e10]], ["all"], [100]
            ev.evaluate()
        self._params = ev._paramsEval
        self._per_image = ev._evalImgs_cpp  # [category][image], row-major
        self.map = self._accumulate(np.arange(len(self._params.imgIds)))  # mAP50, mAP50-95: COCOeval's

    def _accumulate(self, images: np.ndarray) -> tuple[float, float]:
        n = len(self._params.imgIds)
        picked = [self._per_image[k * n + int(i)] for k in range(len(self._params.catIds)) for i in images]
        params = copy.copy(self._params)
        params.imgIds = [self._params.imgIds[int(i)] for i in images]
        precision = coco_cpp.COCOevalAccumulate(params, picked)["precision"][:, :, :, 0, -1]  # [IoU, recall, class]
        valid = precision > -1
        if not valid.any():
            return 0.0, 0.0
        at50 = precision[0][valid[0]]
        return float(at50.mean()) if at50.size else 0.0, float(precision[valid].mean())

    def resampled(self, images: np.ndarray) -> np.ndarray:
        """mAP50 and mAP50-95 on each row of ``images`` (image indices): shape (B, 2). The replicates are
        accumulated on a thread per core (``runtime_threads``): the C++ accumulation runs partly outside the GIL,
        and each replicate is independent, so the figures are the same as one after the other."""
        workers = min(runtime_threads() or os.cpu_count() or 1, len(images))
        if workers <= 1:
            return np.array([self._accumulate(idx) for idx in images]).reshape(len(images), 2)
        with ThreadPoolExecutor(workers, thread_name_prefix="yolo-edge-bootstrap") as pool:
            return np.array(list(pool.map(self._accumulate, images))).reshape(len(images), 2)
