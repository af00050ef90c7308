"""One rule for whether a plan is acceptable, used by deploy's table, report.json, report.md and ``check``.

A plan fails for the reasons, in this order: the planner's own verdict on it (``precision``,
``op_support``, ``memory``, ``to compile``), ``drift`` (mAP50 or mAP50-95 below the reference by more
than the limit), ``SLA`` (p95 end-to-end latency above it). A figure that is missing or not a number
fails too: a verdict that cannot be computed is never ``ok``.

A drift with its bootstrap interval (:mod:`yolo_edge.validate.bootstrap`) passes when the whole interval
is within the limit and fails when the whole interval of mAP50 or of mAP50-95 is beyond it; an interval that
straddles the limit is ``undecided drift``: not ``ok`` (nothing unproven ships as proven), and not a
failure the search relaxes on (the difference is inside the noise). :func:`more_images` says how many more
judging images would decide it.

Example:
    >>> status(failures(MapResult(-0.03, -0.01), 12.0, Limits(max_drift=0.01, sla_ms=100.0)))
    'fails drift'
    >>> status(failures(MapResult(0.0, 0.0), 12.0, Limits(max_drift=0.01, sla_ms=100.0)))
    'ok'
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from yolo_edge.core.codec import plain
from yolo_edge.core.stats import median_ratio_se
from yolo_edge.pipeline.postprocess import Detections
from yolo_edge.validate.accuracy import Accuracy, Interval, Kept, MapResult
from yolo_edge.validate.latency import LatencyResult
from yolo_edge.validate.noise import FAILS, Spread, judge, undecided_line
from yolo_edge.validate.noise import UNDECIDED as UNDECIDED_LATENCY

OK = "ok"
UNDECIDED_EXIT = 4  # measured, neither passed nor failed (deploy, check): retry, or fail, as the CI chooses


@dataclass(frozen=True)
class Limits:
    max_drift: float  # mAP50 and mAP50-95 may fall at most this far below the FP32 reference
    sla_ms: float  # p95 end-to-end latency limit


UNDECIDED = "undecided drift"
UNDECIDED_SLA = "undecided SLA"  # a measured p95 whose interval straddles the SLA, or over it on a busy machine
UNDECIDED_REGRESSION = "undecided regression"  # the same against a baseline


def failures(
    drift: MapResult | None,
    p95_ms: float | None,
    limits: Limits,
    planned: tuple[str, ...] = (),
    interval: Interval | None = None,
    spread: Spread | None = None,
) -> list[str]:
    """Why a plan is not acceptable (empty: it is). ``planned`` are the planner's failed checks, if any; a plan
    it stopped before anything ran (no figures) fails for those reasons alone. ``interval``: the drift's bootstrap
    interval (None: judged on the figure alone); ``spread``: a measured p95's interval and the machine's load
    (:mod:`yolo_edge.validate.noise`; None: the p95 is exact, a simulated board's)."""
    out = list(planned)
    if drift is None and p95_ms is None and planned:
        return out
    out += drift_failure(drift, interval, -limits.max_drift)
    if spread is not None:
        verdict = judge(spread.lo, spread.hi, limits.sla_ms, spread.quiet)
        out += {FAILS: ["SLA"], UNDECIDED_LATENCY: [UNDECIDED_SLA]}.get(verdict, [])
    elif p95_ms is None or not (math.isfinite(p95_ms) and p95_ms <= limits.sla_ms):
        out.append("SLA")
    return out


def drift_failure(drift: MapResult | None, interval: Interval | None, floor: float) -> list[str]:
    figures = [] if drift is None else [drift.map50, drift.map50_95]
    if len(figures) < 2 or not all(math.isfinite(d) for d in figures):
        return ["drift"]
    if interval is None:
        return [] if all(d >= floor for d in figures) else ["drift"]
    if interval.hi.map50 < floor or interval.hi.map50_95 < floor:
        return ["drift"]
    return [] if min(interval.lo.map50, interval.lo.map50_95) >= floor else [UNDECIDED]


def more_images(drift: MapResult, interval: Interval, floor: float) -> int | None:
    """About how many more judging images would decide an undecided drift: an interval's width falls as one
    over the square root of the images, so it must shrink until it no longer reaches across ``floor`` (None:
    the figure is at the limit, no number of images decides it)."""
    need = 0.0
    for point, lo, hi in (
        (drift.map50, interval.lo.map50, interval.hi.map50),
        (drift.map50_95, interval.lo.map50_95, interval.hi.map50_95),
    ):
        if lo >= floor or hi < floor:
            continue
        gap = abs(point - floor)
        if gap <= 1e-9:
            return None
        width = point - lo if point >= floor else hi - point
        need = max(need, interval.images * (width / gap) ** 2)
    return max(1, math.ceil(need) - interval.images)


def status(fails: list[str]) -> str:
    """``ok``, or ``fails drift, SLA``, or ``undecided drift`` (``undecided drift, SLA``; ``fails drift, SLA
    undecided``): the words the table, the reports and ``check`` show."""
    open_ = [f.removeprefix("undecided ") for f in fails if f.startswith("undecided ")]
    failed = [f for f in fails if not f.startswith("undecided ")]
    if not fails:
        return OK
    if not failed:
        return "undecided " + ", ".join(open_)
    return "fails " + ", ".join(failed) + "".join(f", {what} undecided" for what in open_)


def explain(
    fails: list[str],
    drift: MapResult | None,
    p95_ms: float | None,
    limits: Limits,
    interval: Interval | None = None,
    spread: Spread | None = None,
) -> list[str]:
    """One line per failure with its numbers."""
    lines = []
    for f in fails:
        if f in ("drift", UNDECIDED):
            lines.append(_drift_line(f, drift, interval, limits.max_drift))
        elif f == "SLA":
            shown = "not measured" if p95_ms is None else f"{p95_ms:.2f} ms"
            if spread is not None:  # the p95 of the rounds judged, with its interval
                shown = f"{spread.p95:.2f} ms [{spread.lo:.2f}, {spread.hi:.2f}]"
            lines.append(f"p95 {shown} over the SLA {limits.sla_ms} ms")
        elif f == UNDECIDED_SLA and spread is not None:
            lines.append(undecided_line("p95", spread, f"against the SLA {limits.sla_ms} ms"))
        else:
            lines.append(f"fails the {f} check" if f != "to compile" else "fails to compile")
    return lines


def _drift_line(f: str, drift: MapResult | None, interval: Interval | None, max_drift: float) -> str:
    if drift is None:
        return f"drift not measured beyond the limit -{max_drift}"
    shown = f"mAP50 {drift.map50:+.4f}, mAP50-95 {drift.map50_95:+.4f}"
    if interval is not None:
        shown += f" ({interval_text(interval)})"
    if f == "drift":
        return f"drift {shown} beyond the limit -{max_drift}"
    assert interval is not None
    more = more_images(drift, interval, -max_drift)
    decide = (
        "the drift is at the limit: no number of images decides it"
        if more is None
        else f"about {more} more judging images would decide it"
    )
    return f"drift {shown} straddles the limit -{max_drift}: undecided, neither passed nor failed; {decide}"


def interval_text(interval: Interval) -> str:
    """``90 % interval [-0.0210, +0.0031] / [-0.0302, -0.0010] over 5 images``."""
    lo, hi = interval.lo, interval.hi
    return (
        f"{interval.level:.0%} interval [{lo.map50:+.4f}, {hi.map50:+.4f}] / [{lo.map50_95:+.4f}, {hi.map50_95:+.4f}]"
        f" over {interval.images} images"
    )


def kept_text(kept: Kept) -> str:
    """``keeps 86 of the FP32 reference's 90 boxes at conf 0.25 (same class, IoU >= 0.5)``."""
    return f"keeps {kept.kept} of the FP32 reference's {kept.of} {kept.counted}"


@dataclass
class PlanRun:
    """One of the plans deploy compares (whole-npu, whole-cpu, split): what it measured, and its status."""

    name: str
    planned: tuple[
        str, ...
    ] = ()  # the planner's failed checks for this plan (op_support, memory, precision, to compile)
    latency: LatencyResult | None = None
    accuracy: Accuracy | None = None  # against labels where there are labels, and agreement with the reference
    accuracy_drift: Accuracy | None = None  # both, minus the reference's
    memory_peak_bytes: int | None = None
    detections: list[Detections] | None = None
    same_as_cpu: bool = False  # the split placed nothing on the NPU: it is the whole-cpu plan
    fails: list[str] = field(default_factory=list)
    spread: Spread | None = None  # a measured latency's p95 interval, ratio to the reference and load

    @property
    def map(self) -> MapResult | None:
        """The accuracy figure that decides (labels where there are labels, else agreement)."""
        return None if self.accuracy is None else self.accuracy.map

    @property
    def drift(self) -> MapResult | None:
        """The drift that decides, against the reference."""
        return None if self.accuracy_drift is None else self.accuracy_drift.map

    @property
    def criterion(self) -> str | None:
        """``labels`` or ``agreement``: which drift decided (None: not measured)."""
        return None if self.accuracy is None else self.accuracy.criterion

    @property
    def drift_interval(self) -> Interval | None:
        """The deciding drift's bootstrap interval (None: not measured)."""
        return None if self.accuracy_drift is None else self.accuracy_drift.interval

    @property
    def agreement_drift(self) -> MapResult | None:
        """The drift in agreement with the reference (pseudo-labels), reported beside the labelled one."""
        return None if self.accuracy_drift is None else self.accuracy_drift.agreement

    @property
    def kept(self) -> Kept | None:
        """The reference's boxes at the operating confidence that this plan keeps (None: not measured)."""
        return None if self.accuracy is None else self.accuracy.kept

    def judge(self, limits: Limits) -> None:
        p95 = None if self.latency is None else self.latency.end_to_end.p95
        self.fails = failures(self.drift, p95, limits, self.planned, self.drift_interval, self.spread)

    @property
    def status(self) -> str:
        return "no subgraph on the NPU (= whole-cpu)" if self.same_as_cpu else status(self.fails)

    @property
    def undecided(self) -> bool:
        """Failing nothing that was decided: every reason an interval that straddles its limit (the drift on too few
        images, a p95 within the machine's noise), so the plan is neither proven nor refuted."""
        return not self.same_as_cpu and bool(self.fails) and all(f.startswith("undecided ") for f in self.fails)

    @property
    def ok(self) -> bool:
        """Judged and failing nothing (a split with no subgraph on the NPU is whole-cpu, not a plan of its own)."""
        return not self.same_as_cpu and not self.fails

    def to_dict(self) -> dict[str, Any]:
        return plain(
            {
                "name": self.name,
                "status": self.status,
                "fails": list(self.fails),
                "latency_ms": None
                if self.latency is None
                else {
                    "p50": self.latency.end_to_end.p50,
                    "p95": self.latency.end_to_end.p95,
                    "p99": self.latency.end_to_end.p99,
                },
                "latency_kind": None if self.latency is None else self.latency.kind,
                "latency_spread": None if self.spread is None else self.spread.to_dict(),
                "latency": None if self.latency is None else self.latency.to_dict(),
                "memory_peak_bytes": self.memory_peak_bytes,
                "map": None if self.map is None else self.map.to_dict(),
                "map_drift": None if self.drift is None else self.drift.to_dict(),
                "map_drift_interval": None if self.drift_interval is None else self.drift_interval.to_dict(),
                "agreement_drift": None if self.agreement_drift is None else self.agreement_drift.to_dict(),
                "criterion": self.criterion,
                "boxes_kept": None if self.kept is None else self.kept.to_dict(),
            }
        )


def _tied(run: PlanRun, fastest: PlanRun, margin: float) -> bool:
    """Whether ``run`` is as fast as ``fastest`` within ``margin`` or the noise of their paired frame times (the
    plans are timed frame by frame in turn: frame i of each is one round, under one load)."""
    assert run.latency is not None and fastest.latency is not None
    a, b = np.asarray(run.latency.samples_ms), np.asarray(fastest.latency.samples_ms)
    if run is fastest:
        return True
    if len(a) != len(b) or len(a) < 2 or not (b > 0).all():
        return run.latency.end_to_end.p50 <= fastest.latency.end_to_end.p50 * (1 + margin)
    se = median_ratio_se(run.latency.samples_ms, fastest.latency.samples_ms)  # as the search's tie rule reads it
    return float(np.median(a / b)) - 1 <= max(margin, 2 * se)


def choose(runs: list[PlanRun], tie_margin: float = 0.0) -> tuple[PlanRun, list[str]]:
    """The deployed plan: the fastest that is ok, by median (the plans are timed frame by frame in turn, so a
    shared machine's load lands on each; a tail is one neighbour's burst, and the SLA is judged on p95 already).
    A plan whose frames take, paired round by round with the fastest's, a median ratio within ``tie_margin`` of
    1 or within twice that median's standard error is a tie, won by the first of ``runs`` (the caller lists the one
    with the least at low precision first): a near-tie is the machine's load, not the plan, and must not flip the
    choice between a quiet run and a busy one. When none is ok, the fastest within the drift limit (else the
    first), with one reason per plan why it is not."""
    ok = [r for r in runs if r.ok and r.latency is not None]
    if ok:
        fastest = min(ok, key=lambda r: r.latency.end_to_end.p50)  # type: ignore[union-attr]
        return next(r for r in ok if _tied(r, fastest, tie_margin)), []
    usable = [r for r in runs if r.latency is not None and "drift" not in r.fails and not r.planned]
    chosen = min(usable, key=lambda r: r.latency.end_to_end.p95) if usable else runs[0]  # type: ignore[union-attr]
    return chosen, [f"{r.name} {r.status}" for r in runs]
