"""Latency statistics: the percentiles every table, report and gate shows (a base module: the stream engine,
the latency measurement and the search all summarize frames with it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from yolo_edge.core.codec import plain


@dataclass(frozen=True)
class Percentiles:
    """Milliseconds: median, p95, p99 and mean of a set of frames."""

    p50: float
    p95: float
    p99: float
    mean: float

    def to_dict(self) -> dict[str, float]:
        return plain({"p50": self.p50, "p95": self.p95, "p99": self.p99, "mean": self.mean})


def percentiles(values: Sequence[float]) -> Percentiles:
    a = np.asarray(values, dtype=np.float64)
    p50, p95, p99 = (round(float(np.percentile(a, q)), 3) for q in (50, 95, 99))
    return Percentiles(p50, p95, p99, round(float(a.mean()), 3))


def median_ratio_se(a: Sequence[float], b: Sequence[float]) -> float:
    """Standard error of the median of the paired ratios ``a[i] / b[i]`` (frames timed in turn), from their
    median absolute deviation (robust to a neighbour's burst): 1.4826 x MAD is the spread of a normal sample,
    1.2533 x spread / sqrt(n) its median's standard error. 0 for fewer than two pairs."""
    n = min(len(a), len(b))
    if n < 2:
        return 0.0
    r = np.asarray(a[:n], dtype=np.float64) / np.maximum(np.asarray(b[:n], dtype=np.float64), 1e-9)
    mad = float(np.median(np.abs(r - np.median(r))))
    return 1.2533 * 1.4826 * mad / float(np.sqrt(n))
