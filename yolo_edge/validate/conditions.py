"""Conditions the calibration never saw, applied to the judging images (``yolo-edge val --conditions``): a plan
is judged against the FP32 reference under each one, both seeing the same changed image, so the drift is what the
deployment loses there beyond what the FP32 model loses.

Each is photometric (no box moves, so labels stay valid) and deterministic (the noise is seeded by the image's
index): ``dark`` (x0.25 brightness) and ``night`` (x0.1), the rows of issue #54's table that lost most; ``bright``
(x1.8, clipped), ``low_contrast`` (0.4x about the mean), ``noise`` (Gaussian, sigma 12 of 255), ``blur`` (Gaussian,
sigma 2), ``jpeg`` (quality 15).
"""

from __future__ import annotations

import os
import statistics
import time
import typing
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from itertools import repeat
from typing import Any

import cv2
import numpy as np

from yolo_edge.core.codec import plain
from yolo_edge.core.config import Condition, DeployConfig, NmsConfig, ValidateConfig
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.host import runtime_threads
from yolo_edge.core.progress import Bar
from yolo_edge.data.resolve import EvalData, EvalKind
from yolo_edge.pipeline.detector import Detector
from yolo_edge.pipeline.postprocess import Detections
from yolo_edge.pipeline.preprocess import read_image
from yolo_edge.validate.accuracy import Interval, Kept, MapResult, Scorer
from yolo_edge.validate.sequential import look_sizes, sample, widened
from yolo_edge.validate.verdict import UNDECIDED, drift_failure

Change = Callable[[np.ndarray, int], np.ndarray]  # a BGR uint8 image and its index -> the changed image


def _gain(g: float) -> Change:
    return lambda img, _i: np.clip(img.astype(np.float32) * g, 0, 255).astype(np.uint8)


def _low_contrast(img: np.ndarray, _i: int) -> np.ndarray:
    mean = img.reshape(-1, img.shape[-1]).mean(axis=0)
    return np.clip((img.astype(np.float32) - mean) * 0.4 + mean, 0, 255).astype(np.uint8)


def _noise(img: np.ndarray, i: int) -> np.ndarray:
    rng = np.random.default_rng(i)
    return np.clip(img.astype(np.float32) + rng.normal(0, 12, img.shape), 0, 255).astype(np.uint8)


def _blur(img: np.ndarray, _i: int) -> np.ndarray:
    return cv2.GaussianBlur(img, (0, 0), 2.0)


def _jpeg(img: np.ndarray, _i: int) -> np.ndarray:
    ok, data = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 15])
    back = cv2.imdecode(data, cv2.IMREAD_COLOR) if ok else None
    assert back is not None, "OpenCV could not encode and decode a JPEG of the image"
    return np.asarray(back, dtype=np.uint8)


CONDITIONS: dict[str, Change] = {
    "dark": _gain(0.25),
    "night": _gain(0.1),
    "bright": _gain(1.8),
    "low_contrast": _low_contrast,
    "noise": _noise,
    "blur": _blur,
    "jpeg": _jpeg,
}
assert tuple(CONDITIONS) == typing.get_args(Condition), "config.Condition names the conditions defined here"


def parse_conditions(text: str | Sequence[str]) -> list[str]:
    """``all``, or condition names (comma-separated, or a list), each known; a one-line error naming them else."""
    names = text.split(",") if isinstance(text, str) else list(text)
    names = [n.strip() for n in names if n.strip()]
    if names == ["all"]:
        return list(CONDITIONS)
    if not names:
        raise YoloEdgeError(f"no condition named: name some of {', '.join(CONDITIONS)} (comma-separated), or all")
    unknown = [n for n in names if n not in CONDITIONS]
    if unknown:
        raise YoloEdgeError(
            f"unknown condition(s) {unknown}: name some of {', '.join(CONDITIONS)} (comma-separated), or all"
        )
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class Judged:
    """A plan under one condition against the FP32 reference under the same one."""

    reference: MapResult
    deployed: MapResult
    drift_interval: Interval | None
    kept: Kept | None
    images: int
    kind: EvalKind

    @property
    def drift(self) -> MapResult:
        return self.deployed.minus(self.reference)

    def verdict(self, max_drift: float) -> list[str]:
        """``[]``, ``["drift"]`` or ``["undecided drift"]``: the deploy's drift rule on this condition's figures."""
        return drift_failure(self.drift, self.drift_interval, -max_drift)

    def to_dict(self) -> dict[str, Any]:
        return plain(
            {
                "reference": self.reference.to_dict(),
                "deployed": self.deployed.to_dict(),
                "drift": self.drift.to_dict(),
                "drift_interval": None if self.drift_interval is None else self.drift_interval.to_dict(),
                "kind": self.kind,
                "images": self.images,
                "boxes_kept": None if self.kept is None else self.kept.to_dict(),
            }
        )


def judge_under(
    reference: Detector,
    plans: Mapping[str, Detector],
    ev: EvalData,
    cfg: DeployConfig,
    bar: Bar,
    threads: bool | None = None,
) -> dict[str, dict[str, Judged]]:
    """Each plan and the FP32 reference on ``ev``'s images under each of ``cfg.validate.conditions``: condition ->
    plan -> figures (the
    reference's detections there are its pseudo-labels where ``ev`` has no labels; a condition under which it
    detects nothing on unlabelled images has no figures: ``{}``). With ``plan.search_looks`` (deploy's; val clears
    them), a plan is judged under a condition on a growing sample (:mod:`yolo_edge.validate.sequential`) and stops at
    the first look that decides its drift; ``Judged.images`` says on how many.

    An image's detectors run one after the other (``threads`` False) or at once, a thread each up to a thread per
    core (True; each detector sees one image at a time, its runtime computing outside the GIL); None (the default):
    :class:`Pace` measures both ways on the first images and keeps the faster. The figures are the same either
    way."""
    n = len(ev.dataset)
    sizes = look_sizes(cfg.plan.search_looks, n)
    interim = replace(cfg.validate, confidence=widened(cfg.validate.confidence, len(sizes)))
    found: dict[str, dict[str, Judged]] = {}
    workers = min(runtime_threads() or os.cpu_count() or 1, 1 + len(plans)) if threads is not False else 1
    with ThreadPoolExecutor(workers, thread_name_prefix="yolo-edge-conditions") as pool:
        pace = Pace(pool if workers > 1 else None, threads)
        for name in cfg.validate.conditions:
            found[name] = _judge_one(name, reference, plans, ev, cfg, bar, pace, sizes, interim)
    return found


class Pace:
    """Runs an image's detectors one after the other or on a thread each, whichever the first :attr:`TRIES` images
    of each way (alternated) took less time on: threads pay where a runtime leaves cores idle (LiteRT's reference
    kernels run on one: the demo's ethos-u55 conditions ran 1.54x as fast, rk3588's 1.44x) and cost where every
    runtime already spreads over the cores (OpenVINO's, onnxruntime's: 0.90x on sim-edge-npu);
    ``benchmarks/conditions_threads.py`` measures both, and what the choice gets. ``threaded`` True or False: that
    way, unmeasured; no pool: one after the other."""

    TRIES = 3

    def __init__(
        self,
        pool: ThreadPoolExecutor | None,
        threaded: bool | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.pool, self.clock = pool, clock
        self.took: dict[bool, list[float]] = {False: [], True: []}  # threaded? -> seconds per image
        self.threaded = threaded if pool is not None else False  # None: still measuring

    def detect(self, detectors: Sequence[Detector], image: np.ndarray, nms: NmsConfig) -> list[Detections]:
        measuring = self.threaded is None
        threaded = len(self.took[False]) > len(self.took[True]) if measuring else bool(self.threaded)  # alternated
        t0 = self.clock() if measuring else 0.0
        if threaded and self.pool is not None:
            found = list(self.pool.map(_detect, detectors, repeat(image), repeat(nms)))
        else:
            found = [_detect(d, image, nms) for d in detectors]
        if measuring:
            self.took[threaded].append(self.clock() - t0)
            if len(self.took[True]) >= self.TRIES:
                self.threaded = statistics.median(self.took[True]) < statistics.median(self.took[False])
        return found


def _judge_one(
    name: str,
    reference: Detector,
    plans: Mapping[str, Detector],
    ev: EvalData,
    cfg: DeployConfig,
    bar: Bar,
    pace: Pace,
    sizes: Sequence[int],
    interim: ValidateConfig,
) -> dict[str, Judged]:
    """:func:`judge_under` for one condition: plan -> figures."""
    n = len(ev.dataset)
    change = CONDITIONS[name]
    detected: dict[str, dict[int, Detections]] = {k: {} for k in ("whole-cpu", *plans)}
    judged: dict[str, Judged] = {}
    for size in sizes:
        last = size == n
        picked = range(n) if last else sample(n, size)
        open_ = [p for p in plans if p not in judged or judged[p].images < n and not _decided(judged[p], cfg)]
        todo = [i for i in picked if i not in detected["whole-cpu"]]
        named = [("whole-cpu", reference), *((p, plans[p]) for p in open_)]
        for i in bar(todo, f"{name}: whole-cpu, {', '.join(open_)} on {len(picked)} of {n} images"):
            image = change(read_image(ev.dataset.records[i].path), i)  # read and changed once for all of them
            done = pace.detect([d for _, d in named], image, cfg.val_nms)
            for (k, _), dets in zip(named, done):
                detected[k][i] = dets
        ref = [detected["whole-cpu"][i] for i in picked]
        if not ev.labelled and not any((d.confidence >= cfg.nms.conf).any() for d in ref):
            continue  # no labels and no reference box on this sample: nothing to agree with
        sub = ev if last else replace(ev, dataset=ev.dataset.pick(picked))
        try:  # a condition's table shows what decides: no agreement beside labels
            scorer = Scorer(sub, ref, cfg.validate if last else interim, cfg.nms, agreement=False)
        except YoloEdgeError:  # nothing to score on this sample (no labelled object): the next look
            continue
        ref_acc = scorer.score(ref)
        for plan in open_:
            acc = scorer.score([detected[plan][i] for i in picked])
            drift = acc.minus(ref_acc)
            judged[plan] = Judged(ref_acc.map, acc.map, drift.interval, acc.kept, len(picked), ev.kind)
        if all(p in judged and _decided(judged[p], cfg) for p in plans):
            break
    return {p: judged[p] for p in plans if p in judged}


def _detect(detector: Detector, image: np.ndarray, nms: NmsConfig) -> Detections:
    return detector.detect(image, nms)[0]


def _decided(j: Judged, cfg: DeployConfig) -> bool:
    return j.verdict(cfg.validate.max_drift) != [UNDECIDED]


def first_images(ev: EvalData, n: int) -> EvalData:
    """``ev`` cut to its first ``n`` images (the conditions' sample)."""
    return replace(ev, dataset=ev.dataset.subset(n))
