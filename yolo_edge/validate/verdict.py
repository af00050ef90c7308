"""One rule for whether a plan is acceptable, used by deploy's table, report.json, report.md and ``check``.

A plan fails for the reasons, in this order: the planner's own verdict on it (``precision``,
``op_support``, ``memory``, ``to compile``), ``drift`` (mAP50 or mAP50-95 below the reference by more
than the limit), ``SLA`` (p95 end-to-end latency above it). A figure that is missing or not a number
fails too: a verdict that cannot be computed is never ``ok``.

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

from yolo_edge.pipeline.postprocess import Detections
from yolo_edge.validate.accuracy import Accuracy, MapResult
from yolo_edge.validate.latency import LatencyResult

OK = "ok"


@dataclass(frozen=True)
class Limits:
    max_drift: float  # mAP50 and mAP50-95 may fall at most this far below the FP32 reference
    sla_ms: float  # p95 end-to-end latency limit


def failures(drift: MapResult | None, p95_ms: float | None, limits: Limits, planned: str | None = None) -> list[str]:
    """Why a plan is not acceptable (empty: it is). ``planned`` is the planner's failed check, if any; a plan
    it stopped before anything ran (no figures) fails for that reason alone."""
    out = [planned] if planned else []
    if drift is None and p95_ms is None and planned:
        return out
    if drift is None or not all(math.isfinite(d) and d >= -limits.max_drift for d in (drift.map50, drift.map50_95)):
        out.append("drift")
    if p95_ms is None or not (math.isfinite(p95_ms) and p95_ms <= limits.sla_ms):
        out.append("SLA")
    return out


def status(fails: list[str]) -> str:
    """``ok``, or ``fails drift, SLA``: the words the table, the reports and ``check`` show."""
    return OK if not fails else "fails " + ", ".join(fails)


def explain(fails: list[str], drift: MapResult | None, p95_ms: float | None, limits: Limits) -> list[str]:
    """One line per failure with its numbers."""
    lines = []
    for f in fails:
        if f == "drift":
            shown = "not measured" if drift is None else f"mAP50 {drift.map50:+.4f}, mAP50-95 {drift.map50_95:+.4f}"
            lines.append(f"drift {shown} beyond the limit -{limits.max_drift}")
        elif f == "SLA":
            lines.append(
                f"p95 {'not measured' if p95_ms is None else f'{p95_ms:.2f} ms'} over the SLA {limits.sla_ms} ms"
            )
        else:
            lines.append(f"fails the {f} check" if f != "to compile" else "fails to compile")
    return lines


@dataclass
class PlanRun:
    """One of the plans deploy compares (whole-npu, whole-cpu, split): what it measured, and its status."""

    name: str
    planned: str | None = None  # the planner's failed check for this plan (precision, op_support, memory, to compile)
    latency: LatencyResult | None = None
    accuracy: Accuracy | None = None  # against labels where there are labels, and agreement with the reference
    accuracy_drift: Accuracy | None = None  # both, minus the reference's
    memory_peak_bytes: int | None = None
    detections: list[Detections] | None = None
    same_as_cpu: bool = False  # the split placed nothing on the NPU: it is the whole-cpu plan
    fails: list[str] = field(default_factory=list)

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
    def agreement_drift(self) -> MapResult | None:
        """The drift in agreement with the reference (pseudo-labels), reported beside the labelled one."""
        return None if self.accuracy_drift is None else self.accuracy_drift.agreement

    def judge(self, limits: Limits) -> None:
        self.fails = failures(
            self.drift, None if self.latency is None else self.latency.end_to_end.p95, limits, self.planned
        )

    @property
    def status(self) -> str:
        return "no subgraph on the NPU (= whole-cpu)" if self.same_as_cpu else status(self.fails)

    @property
    def ok(self) -> bool:
        """Judged and failing nothing (a split with no subgraph on the NPU is whole-cpu, not a plan of its own)."""
        return not self.same_as_cpu and not self.fails

    def to_dict(self) -> dict[str, Any]:
        return {
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
            "latency": None if self.latency is None else self.latency.to_dict(),
            "memory_peak_bytes": self.memory_peak_bytes,
            "map": None if self.map is None else self.map.to_dict(),
            "map_drift": None if self.drift is None else self.drift.to_dict(),
            "agreement_drift": None if self.agreement_drift is None else self.agreement_drift.to_dict(),
            "criterion": self.criterion,
        }


def choose(runs: list[PlanRun]) -> tuple[PlanRun, list[str]]:
    """The deployed plan: the fastest that is ok, by median (the plans are timed frame by frame in turn, so a
    shared machine's load lands on each; a tail is one neighbour's burst, and the SLA is judged on p95 already);
    when none is ok, the fastest within the drift limit (else the first), with one reason per plan why it is not."""
    ok = [r for r in runs if r.ok and r.latency is not None]
    if ok:
        return min(ok, key=lambda r: r.latency.end_to_end.p50), []  # type: ignore[union-attr]
    usable = [r for r in runs if r.latency is not None and "drift" not in r.fails and not r.planned]
    chosen = min(usable, key=lambda r: r.latency.end_to_end.p95) if usable else runs[0]  # type: ignore[union-attr]
    return chosen, [f"{r.name} {r.status}" for r in runs]
