"""Latency: warm-up, then N timed frames; end to end and per phase; p50/p95/p99; peak RSS; SLA verdict."""

from __future__ import annotations

import resource
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from yolo_edge.core.codec import plain
from yolo_edge.core.config import BOARD, FrameKind
from yolo_edge.core.stats import Percentiles, percentiles
from yolo_edge.pipeline.detector import Detector, FrameTiming

Progress = Callable[[int, int], None]
# how a plan's frame times were obtained: on this host; a simulated accelerator's modelled, the rest measured here; or
# every phase the simulated board's (devices/board.py)
LATENCY_IMAGES = 16  # the latency frames: the first evaluation images, cycled
POSTPROCESS = "decode+nms"  # the last phase: the candidate-first decode of the head's outputs (if any) and NMS


def peak_rss_bytes() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


@dataclass(frozen=True)
class LatencyResult:
    end_to_end: Percentiles
    phases: dict[str, Percentiles]  # preprocess, each unit, transfers, nms
    kind: FrameKind
    runs: int
    npu_share: float  # fraction of phase runs that ran on the NPU
    peak_rss_bytes: int
    samples_ms: tuple[float, ...]

    def to_dict(self) -> dict[str, object]:
        return plain(
            {
                "end_to_end": self.end_to_end.to_dict(),
                "phases": {k: v.to_dict() for k, v in self.phases.items()},
                "kind": self.kind,
                "runs": self.runs,
                "npu_share": self.npu_share,
                "peak_rss_bytes": self.peak_rss_bytes,
            }
        )


def measure_latency(
    detector: Detector, images: Sequence[np.ndarray], warmup: int, runs: int, progress: Progress | None = None
) -> LatencyResult:
    """Run ``warmup`` untimed then ``runs`` timed frames over ``images`` (cycled)."""
    return measure_latencies({"": detector}, images, warmup, runs, progress)[""]


def measure_latencies(
    detectors: Mapping[str, Detector],
    images: Sequence[np.ndarray],
    warmup: int,
    runs: int,
    progress: Progress | None = None,
) -> dict[str, LatencyResult]:
    """Time several detectors on the same frames, interleaved: frame i runs on each in turn (the order
    rotating every frame), so a change in the machine's speed lands on all of them alike and their
    percentiles compare (timed one after the other, a noisy minute decides which plan wins). A detector whose
    frame times are modelled from the frame (:attr:`Detector.frame_determined`) runs each distinct image once."""
    timings = time_frames(detectors, images, warmup, runs, progress=progress)
    return {name: summarise(t) for name, t in timings.items()}


def time_frames(
    detectors: Mapping[str, Detector],
    images: Sequence[np.ndarray],
    warmup: int,
    runs: int,
    start: int = 0,
    progress: Progress | None = None,
) -> dict[str, list[FrameTiming]]:
    """The frame timings of :func:`measure_latencies`; ``start``: the first frame's index (images cycled from
    there), for timing in rounds."""
    names = list(detectors)
    timed = [n for n in names if not detectors[n].frame_determined]
    # a simulated board's frame times are the frame's own: each distinct image is simulated once, no warm-up (there
    # is nothing to warm), and frame i counts the time of image i (cycled), as timing it again would give
    once = {n: [detectors[n].detect(im)[1] for im in images[:runs]] for n in names if n not in timed}
    for i in range(warmup if timed else 0):
        for name in timed:
            detectors[name].detect(images[i % len(images)])
    timings: dict[str, list[FrameTiming]] = {name: [] for name in names}
    for i in range(start, start + runs):
        k = i % len(timed) if timed else 0
        for name in timed[k:] + timed[:k]:
            timings[name].append(detectors[name].detect(images[i % len(images)])[1])
        for name, frames in once.items():
            timings[name].append(frames[i % len(frames)])
        if progress:
            progress(i + 1 - start, runs)
    return timings


def summarise(timings: list[FrameTiming]) -> LatencyResult:
    parts: dict[str, list[float]] = {"preprocess": [t.preprocess_ms for t in timings]}
    for name in timings[0].unit_ms:
        parts[name] = [t.unit_ms[name] for t in timings]
    parts["transfers"] = [t.transfer_ms for t in timings]
    parts[POSTPROCESS] = [t.postprocess_ms for t in timings]
    e2e = [t.end_to_end_ms for t in timings]
    on_npu = sum(d == "npu" for t in timings for d in t.unit_device.values())
    total = sum(len(t.unit_device) for t in timings)
    kind: FrameKind = (
        BOARD
        if all(t.board for t in timings)
        else "modelled NPU + measured CPU"
        if any(t.modelled for t in timings)
        else "measured"
    )
    return LatencyResult(
        percentiles(e2e),
        {k: percentiles(v) for k, v in parts.items()},
        kind,
        len(timings),
        on_npu / total if total else 0.0,
        peak_rss_bytes(),
        tuple(e2e),
    )
