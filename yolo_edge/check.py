"""Gate on a bundle: ``check_bundle`` re-measures it (``validate.bundle``: mAP drift and latency) against
limits and an optional baseline, usable from pytest:

    from yolo_edge import check_bundle

    def test_deployed_model_still_good():
        result = check_bundle("out/bundle", baseline="perf/baseline.json", max_drift=0.01)
        assert result.passed, result.failures
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yolo_edge.bundle import Bundle, load_bundle
from yolo_edge.codec import dumps, plain
from yolo_edge.errors import YoloEdgeError
from yolo_edge.files import atomic_write, json_loads, read_regular
from yolo_edge.runtime import EventLog
from yolo_edge.validate.bundle import ValResult, bench_bundle, bundle_eval_data, val_bundle
from yolo_edge.validate.latency import LatencyResult
from yolo_edge.validate.verdict import Limits, explain, failures, status


@dataclass
class GateResult:
    """What ``check`` measured and concluded; ``to_dict()`` is ``check --json``."""

    passed: bool
    status: str  # the words deploy's table uses: ok, fails drift, fails SLA, ... (plus placement, regression)
    failures: list[str]  # one line per broken limit, with its numbers
    val: ValResult
    latency: LatencyResult
    limits: Limits
    max_regression: float
    baseline_p95_ms: float | None

    @property
    def p95_ms(self) -> float:
        return self.latency.end_to_end.p95

    def to_dict(self) -> dict[str, Any]:
        baseline = None if self.baseline_p95_ms is None else {"p95_ms": self.baseline_p95_ms}
        return plain(
            {
                "passed": self.passed,
                "status": self.status,
                "failures": self.failures,
                "val": self.val.to_dict(),
                "latency": self.latency.to_dict(),
                "p95_ms": self.p95_ms,
                "limits": {
                    "max_drift": self.limits.max_drift,
                    "sla_ms": self.limits.sla_ms,
                    "max_regression": self.max_regression,
                    "baseline": baseline,
                },
            }
        )


def check_bundle(
    bundle: str | Path | Bundle,
    baseline: str | Path | None = None,
    max_drift: float | None = None,
    sla_ms: float | None = None,
    max_regression: float | None = None,
    data: str | Path | None = None,
    runs: int | None = None,
    quiet: bool = True,
    class_map: str | None = None,
    shards: int | None = None,
    ray_address: str | None = None,
) -> GateResult:
    """Re-measure drift and latency; one failure line per broken limit (drift, SLA, regression vs baseline).
    Limits default to the ones the bundle was deployed with; ``shards`` / ``ray_address``: drift scored in shards
    on Ray (``val_bundle``)."""
    b = bundle if isinstance(bundle, Bundle) else load_bundle(bundle)
    cfg = b.config
    limits = Limits(
        cfg.validate.max_drift if max_drift is None else max_drift, cfg.validate.sla_ms if sla_ms is None else sla_ms
    )
    max_regression = cfg.validate.max_regression if max_regression is None else max_regression
    base, base_kind = read_baseline(baseline) if baseline else (None, None)
    events = EventLog()
    with b.detector(events=events, as_placed=True) as detector:  # the plan as proved, however busy the machine
        ev = bundle_eval_data(b, data, class_map)  # read once: val and bench use the same images
        val = val_bundle(b, ev, quiet, detector=detector, shards=shards, ray_address=ray_address)
        lat = bench_bundle(b, ev, runs, detector=detector)
    p95 = lat.end_to_end.p95
    fails = failures(val.drift, p95, limits, interval=val.drift_interval)
    lines = explain(fails, val.drift, p95, limits, val.drift_interval)
    faulted = accelerator_faults(b, lat, events)
    if faulted:  # the figures are the CPU's, not the deployed plan's
        fails.insert(0, "accelerator")
        lines.insert(0, faulted)
    if detector.executor.placement_problems:  # the bundle does not run what deploy proved
        fails.insert(0, "placement")
        lines[:0] = detector.executor.placement_problems
    if base_kind is not None and base_kind != lat.kind:  # a host's board model against the board's own timing
        fails.append("baseline")
        lines.append(
            f"the baseline's latency is {base_kind} but this run's is {lat.kind}: record the baseline where the "
            "check runs (yolo-edge check BUNDLE --write-baseline FILE, on the board for its measured latency)"
        )
    elif base is not None and p95 > base * (1 + max_regression):
        fails.append("regression")
        lines.append(
            f"p95 latency {p95:.2f} ms is {p95 / base - 1:+.1%} over the baseline {base:.2f} ms "
            f"(limit +{max_regression:.0%})"
        )
    return GateResult(not fails, status(fails), lines, val, lat, limits, max_regression, base)


FAULTS = ("runtime_error", "timeout", "nan")  # the accelerator failed the call (not a slow frame parked on the CPU)


def accelerator_faults(bundle: Bundle, lat: LatencyResult, events: EventLog) -> str | None:
    """Why the gate cannot vouch for the deployed plan: its accelerator units failed calls and ran on the CPU for
    a share of the timed frames (the runtime's fallback keeps every frame, so drift and latency alone read fine).
    A call or two retried on the CPU is noise; a share of unit runs on the accelerator below 99 % of the plan's
    is not. None: it ran as deployed."""
    units = bundle.units
    planned = sum(u.device == "npu" for u in units) / len(units) if units else 0.0
    by_trigger = events.summary().by_trigger
    faults = {k: v for k, v in by_trigger.items() if k in FAULTS}
    if not planned or not faults or lat.npu_share >= 0.99 * planned:
        return None
    shown = ", ".join(f"{k} {v}" for k, v in sorted(faults.items()))
    return (
        f"the accelerator failed calls ({shown}) and ran {lat.npu_share:.0%} of the timed unit runs where the plan "
        f"puts {planned:.0%} on it: the figures are the CPU fallback's, not the deployed plan's; run the check where "
        "the accelerator works (yolo-edge devices)"
    )


def write_baseline(result: GateResult, path: str | Path) -> None:
    """Record the measured p95 and drift (atomically); ``check_can_write`` it before measuring."""
    doc = {"p95_ms": result.p95_ms, "kind": result.latency.kind, "drift": result.val.drift.to_dict()}
    atomic_write(Path(path), dumps(doc).encode())


MAX_BASELINE_BYTES = 1 << 20  # write_baseline writes a few hundred bytes


def read_baseline(path: str | Path) -> tuple[float, str | None]:
    """The p95 (ms) of a baseline written by ``write_baseline`` (a positive, finite number of milliseconds) and how
    its latency was obtained (``measured``, ``modelled (board)``; None in a baseline that does not say)."""
    p = Path(path)
    if not p.exists():
        raise YoloEdgeError(f"baseline not found: {p}; record one with yolo-edge check BUNDLE --write-baseline {p}")
    data = read_regular(p, "baseline", MAX_BASELINE_BYTES)  # a FIFO or /dev/zero: refused, not read for ever
    try:
        base = json_loads(data)
        p95 = float(base["p95_ms"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, UnicodeDecodeError):
        raise YoloEdgeError(f"{p} is not a yolo-edge baseline (JSON with p95_ms)") from None
    if not (math.isfinite(p95) and p95 > 0):
        raise YoloEdgeError(
            f"{p}: p95_ms is {base['p95_ms']!r}, not a positive number of milliseconds; record it again with "
            f"yolo-edge check BUNDLE --write-baseline {p}"
        )
    kind = base.get("kind")
    return p95, kind if isinstance(kind, str) else None
