"""Gate on a bundle: ``check_bundle`` re-measures it (``val``: mAP drift and latency) against
limits and an optional baseline, usable from pytest:

    from yolo_edge import check_bundle

    def test_deployed_model_still_good():
        result = check_bundle("out/bundle", GateRequest(baseline="perf/baseline.json", max_drift=0.01))
        assert result.passed, result.failures
"""

from __future__ import annotations

import hashlib
import json
import math
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yolo_edge.bundle import Bundle, load_bundle
from yolo_edge.bundle.layout import MODEL
from yolo_edge.core.cluster import probe
from yolo_edge.core.codec import dumps, plain
from yolo_edge.core.config import MAX_RUNS, FrameKind
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import atomic_write, json_loads, printable, read_regular
from yolo_edge.core.progress import progress_bar
from yolo_edge.data.resolve import EvalData
from yolo_edge.flows.val import ValRequest, ValResult, bench_spread, bundle_eval_data, val_bundle
from yolo_edge.model.meta import sha256_file
from yolo_edge.runtime.events import EventLog
from yolo_edge.validate.latency import LatencyResult
from yolo_edge.validate.noise import FAILS, UNDECIDED, Spread, judge, undecided_line
from yolo_edge.validate.verdict import (
    UNDECIDED_REGRESSION,
    Limits,
    explain,
    failures,
    status,
)


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
    identity: dict[str, Any]  # what the figures are of: the model, its size and classes, the device (a baseline's)
    accuracy: dict[str, Any]  # the deployed plan's accuracy and the data it was measured on (a baseline's)
    spread: Spread | None = None  # a measured latency's interval, reference and load (None: modelled, exact)

    @property
    def undecided(self) -> bool:
        """Nothing failed, but a verdict (drift or latency) was within the noise: neither passed nor failed."""
        return self.status.startswith("undecided")

    @property
    def p95_ms(self) -> float:
        """The p95 judged: of the quiet rounds where the latency is measured (:class:`Spread`), else the exact one."""
        return self.latency.end_to_end.p95 if self.spread is None else self.spread.p95

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
                "spread": None if self.spread is None else self.spread.to_dict(),
                "limits": {
                    "max_drift": self.limits.max_drift,
                    "sla_ms": self.limits.sla_ms,
                    "max_regression": self.max_regression,
                    "baseline": baseline,
                },
            }
        )


@dataclass(frozen=True)
class GateRequest:
    """What the gate judges a bundle by: limits (each default: the one the bundle was deployed with), a
    ``baseline`` (``yolo-edge check --save-baseline``'s file), the images (default: what deploy judged on) with their
    ``class_map``, ``runs`` timed frames (default: the config's), and where drift is scored (``shards`` /
    ``ray_address``: on Ray, as ``val_bundle``)."""

    baseline: str | Path | None = None
    max_drift: float | None = None
    sla_ms: float | None = None
    max_regression: float | None = None
    data: str | Path | None = None
    class_map: str | None = None
    runs: int | None = None
    shards: int | None = None
    ray_address: str | None = None

    def __post_init__(self) -> None:
        """Each limit and count as the CLI would take it, or a one-line error (from Python too: a NaN SLA or a
        string of runs would otherwise judge nothing, or fail deep inside the measurement)."""
        for name, hi in (("max_drift", 1.0), ("sla_ms", MAX_MS), ("max_regression", MAX_REGRESSION)):
            value = getattr(self, name)
            if value is not None and (not _real(value) or not 0 <= value <= hi or (name == "sla_ms" and value == 0)):
                raise YoloEdgeError(f"{name} must be a number from 0 to {hi:g}, got {printable(repr(value), 60)}")
        for name, top in (("runs", MAX_RUNS), ("shards", MAX_RUNS)):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= top):
                raise YoloEdgeError(f"{name} must be a whole number from 1 to {top}, got {printable(repr(value), 60)}")


def check_bundle(bundle: str | Path | Bundle, request: GateRequest | None = None, quiet: bool = True) -> GateResult:
    """Re-measure drift and latency; one failure line per broken limit (drift, SLA, regression vs baseline), as
    the ``request`` asks (:class:`GateRequest`)."""
    r = request or GateRequest()
    if r.ray_address is not None:  # a cluster that is not there (or not Ray) is said now, not after the work
        probe(r.ray_address)
    b = bundle if isinstance(bundle, Bundle) else load_bundle(bundle)
    limits, max_regression = _limits(b, r.max_drift, r.sla_ms, r.max_regression)
    base = read_baseline(r.baseline) if r.baseline else None
    events = EventLog()
    with b.detector(events=events, as_placed=True) as detector:  # the plan as proved, however busy the machine
        ev = bundle_eval_data(b, r.data, r.class_map)  # read once: val and bench use the same images
        val = val_bundle(b, ValRequest(ev, shards=r.shards, ray_address=r.ray_address), quiet, detector)
        gate = LatencyGate(limits.sla_ms, base, max_regression)
        lat, spread = bench_spread(b, ev, r.runs, detector, gate.decided, progress_bar(not quiet))
    ident, acc = identity(b), accuracy_record(val, ev)
    p95 = lat.end_to_end.p95
    fails = failures(val.drift, p95, limits, interval=val.drift_interval, spread=spread)
    found = list(zip(fails, explain(fails, val.drift, p95, limits, val.drift_interval, spread)))
    faulted = accelerator_faults(b, lat, events)  # the figures are the CPU's, not the deployed plan's
    first = [("placement", line) for line in detector.executor.placement_problems]  # not what deploy proved
    first += [("accelerator", faulted)] if faulted else []
    if base is not None:
        exact = p95 if spread is None else None  # measured: judged with its spread
        found += _against_baseline(base, ident, acc, lat.kind, exact, limits.max_drift, max_regression)
        comparable = spread is not None and not _not_comparable(base, ident, lat.kind)
        found += gate.regression(spread) if comparable and spread is not None else []
    fails, lines = [f for f, _ in first + found], [line for _, line in first + found]
    base_p95 = None if base is None else base.p95_ms
    return GateResult(not fails, status(fails), lines, val, lat, limits, max_regression, base_p95, ident, acc, spread)


MAX_REGRESSION = 10.0  # +1000 %: a larger allowance is no gate


def _limits(
    b: Bundle, max_drift: float | None, sla_ms: float | None, max_regression: float | None
) -> tuple[Limits, float]:
    """The gate's limits: those given, checked, else the ones the bundle was deployed with."""
    if max_drift is not None and not 0 <= max_drift <= 1:
        raise YoloEdgeError(f"max drift must be between 0 and 1 (a share of mAP), got {max_drift}")
    if max_regression is not None and not 0 <= max_regression <= MAX_REGRESSION:
        raise YoloEdgeError(
            f"max regression must be between 0 and {MAX_REGRESSION} (+{MAX_REGRESSION:.0%}), got {max_regression}"
        )
    v = b.config.validate
    limits = Limits(v.max_drift if max_drift is None else max_drift, v.sla_ms if sla_ms is None else sla_ms)
    return limits, v.max_regression if max_regression is None else max_regression


@dataclass(frozen=True)
class LatencyGate:
    """A measured latency against the SLA and a baseline, by its spread (:mod:`yolo_edge.validate.noise`): the
    baseline's p95 over its reference's is compared with this run's, so a runner that is slower or busier than
    the baseline's does not read as a regression (a baseline without its reference: the p95 itself)."""

    sla_ms: float
    base: Baseline | None
    max_regression: float

    def regression(self, s: Spread) -> list[tuple[str, str]]:
        if self.base is None:
            return []
        base, allowed = self.base, 1 + self.max_regression
        if base.reference_p95_ms is not None:
            was, lo, hi, now = base.p95_ms / base.reference_p95_ms, s.ratio_lo, s.ratio_hi, s.ratio
            what, unit = f"p95 {now:.2f}x its FP32 reference [{lo:.2f}, {hi:.2f}]", "x"
        else:
            was, lo, hi, now = base.p95_ms, s.lo, s.hi, s.p95
            what, unit = f"p95 {now:.2f} ms [{lo:.2f}, {hi:.2f}]", " ms"
        limit = f"(limit +{self.max_regression:.0%})"
        verdict = judge(lo, hi, was * allowed, s.quiet)
        if verdict == FAILS:
            return [("regression", f"{what} is {now / was - 1:+.1%} over the baseline's {was:.2f}{unit} {limit}")]
        if verdict == UNDECIDED:
            line = undecided_line(f"{what} against the baseline's {was:.2f}{unit}", s, limit)
            return [(UNDECIDED_REGRESSION, line)]
        return []

    def decided(self, s: Spread) -> bool:
        """Whether this spread decides every latency verdict (else the gate times the plan again)."""
        sla = judge(s.lo, s.hi, self.sla_ms, s.quiet)
        return sla != UNDECIDED and not any(fail == UNDECIDED_REGRESSION for fail, _ in self.regression(s))


def identity(b: Bundle) -> dict[str, Any]:
    """What a bundle's figures are of: its FP32 model's digest (the reference every drift is measured against, so a
    model broken alike in its reference and its units has drift 0), the checkpoint's, the input size, the classes
    and the device."""
    model = b.meta.model
    return {
        "model_sha256": sha256_file(b.path / MODEL),
        "source_sha256": model.source_sha256,
        "imgsz": list(model.imgsz),
        "names": list(model.names),
        "device": b.meta.device,
    }


def accuracy_record(val: ValResult, ev: EvalData) -> dict[str, Any]:
    """The deployed plan's accuracy as measured (against labels, or in agreement with the bundle's own reference)
    and a digest of the data it was measured on (image names, labels and class map)."""
    h = hashlib.sha256(dumps({"kind": ev.kind, "class_map": ev.class_map}).encode())
    for r in ev.dataset.records:
        h.update(f"{r.path.name}\0{r.width}x{r.height}\0".encode() + r.boxes.tobytes() + r.classes.tobytes())
    return {
        "kind": val.kind,
        "map50_95": val.deployed.map50_95,
        "map50": val.deployed.map50,
        "images": val.images,
        "data_sha256": h.hexdigest(),
    }


def _against_baseline(
    base: Baseline,
    ident: dict[str, Any],
    acc: dict[str, Any],
    kind: str,
    p95: float | None,
    max_drift: float,
    max_regression: float,
) -> list[tuple[str, str]]:
    """The failures (kind, line) of this run against a baseline: one that is of another model, size, class list or
    device, or obtained otherwise, is not compared (it says why); accuracy against labels may not fall more than
    ``max_drift`` below the baseline's on the same data; a model that is not the baseline's, on data without
    labels, cannot be compared (agreement is with its own reference); an exact (modelled) ``p95`` may not exceed
    it by ``max_regression`` (None: a measured one, judged by :class:`LatencyGate`)."""
    redo = "record the baseline for this bundle (yolo-edge check BUNDLE --write-baseline FILE)"
    refused = _not_comparable(base, ident, kind)
    if refused is not None:
        return [("baseline", f"{refused}; {redo}")]
    found = []
    theirs = (base.identity or {}).get("model_sha256")
    same_model = theirs == ident["model_sha256"]
    comparable = base.accuracy is not None and base.accuracy.get("data_sha256") == acc["data_sha256"]
    if comparable and acc["kind"] == "labels" and base.accuracy is not None:
        was, now = float(base.accuracy["map50_95"]), float(acc["map50_95"])
        if now < was - max_drift:
            found.append(
                (
                    "accuracy",
                    f"mAP50-95 against the labels {now:.4f} is {was - now:.4f} below the "
                    f"baseline's {was:.4f} on the same data (limit {max_drift})",
                )
            )
    elif not same_model:
        why = "it was measured on other data" if not comparable else "the data has no labels"
        found.append(
            (
                "baseline",
                f"this bundle's model (sha256 {ident['model_sha256'][:12]}) is not the baseline's "
                f"({str(theirs)[:12]}) and {why}, so its accuracy cannot be "
                f"compared with the baseline's: check it on the baseline's labelled data, or {redo}",
            )
        )
    if p95 is not None and p95 > base.p95_ms * (1 + max_regression):
        found.append(
            (
                "regression",
                f"p95 latency {p95:.2f} ms is {p95 / base.p95_ms - 1:+.1%} over the baseline "
                f"{base.p95_ms:.2f} ms (limit +{max_regression:.0%})",
            )
        )
    return found


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


def _not_comparable(base: Baseline, ident: dict[str, Any], kind: str) -> str | None:
    """Why this run cannot be compared with ``base`` at all (None: it can)."""
    if base.identity is None:
        return "the baseline does not say which model it was recorded for (an older yolo-edge wrote it)"
    for key, what in (("imgsz", "input size"), ("names", "class list"), ("device", "device")):
        if base.identity.get(key) != ident[key]:
            was, now = printable(base.identity.get(key), 200), printable(ident[key], 200)
            return f"the baseline is of another {what} ({was}; this bundle: {now})"
    if base.kind is not None and base.kind != kind:  # a host's board model against the board's own timing
        return (
            f"the baseline's latency is {base.kind} but this run's is {kind}: record the baseline where the check "
            "runs, on the board for its measured latency"
        )
    return None


def write_baseline(result: GateResult, path: str | Path) -> None:
    """Record the measured p95, drift and accuracy, and what they are of (atomically); ``check_can_write`` it
    before measuring."""
    doc = {
        "p95_ms": result.p95_ms,
        "reference_p95_ms": None if result.spread is None else result.spread.reference_p95,
        "kind": result.latency.kind,
        "drift": result.val.drift.to_dict(),
        "model": result.identity,
        "accuracy": result.accuracy,
    }
    atomic_write(Path(path), dumps(doc).encode())


@dataclass(frozen=True)
class Baseline:
    """A baseline as :func:`write_baseline` wrote it: None for what an older one does not say."""

    p95_ms: float
    kind: str | None  # how its latency was obtained: measured, modelled (board)
    reference_p95_ms: float | None  # the FP32 reference's p95 timed beside it (a measured latency's)
    identity: dict[str, Any] | None
    accuracy: dict[str, Any] | None


MAX_BASELINE_BYTES = 1 << 20  # write_baseline writes a few hundred bytes


def read_baseline(path: str | Path) -> Baseline:
    """A baseline written by ``write_baseline``, every part it has checked (a baseline is someone's file, and a gate
    that reads a ``NaN`` accuracy, a string or a ``true`` as a number judges nothing): its p95 (and its reference's)
    a positive, finite number of milliseconds, its kind a latency kind, what it is of a mapping of the fields
    ``identity`` writes, its accuracy a kind, a data digest and mAPs within 0 and 1; else a one-line error (exit 2)."""
    p = Path(path)
    if not p.exists():
        raise YoloEdgeError(f"baseline not found: {p}; record one with yolo-edge check BUNDLE --write-baseline {p}")
    data = read_regular(p, "baseline", MAX_BASELINE_BYTES)  # a FIFO or /dev/zero: refused, not read for ever
    redo = f"record it again with yolo-edge check BUNDLE --write-baseline {printable(p, 200)}"
    try:
        base = json_loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise YoloEdgeError(f"{printable(p, 200)} is not a yolo-edge baseline (JSON with p95_ms); {redo}") from None
    if not isinstance(base, dict) or "p95_ms" not in base:
        raise YoloEdgeError(f"{printable(p, 200)} is not a yolo-edge baseline (JSON with p95_ms); {redo}")

    def bad(key: str, want: str) -> YoloEdgeError:
        shown = printable(repr(_at(base, key)), 60)
        return YoloEdgeError(f"{printable(p, 200)}: {key} is {shown}, not {want}; {redo}")

    def number(key: str, hi: float, optional: bool = False, positive: bool = False) -> float | None:
        value = _at(base, key)
        if value is None and optional:
            return None
        if not _real(value) or not 0 <= float(value) <= hi or (positive and value == 0):
            raise bad(key, f"a positive number up to {hi:g}" if positive else f"a number from 0 to {hi:g}")
        return float(value)

    p95 = number("p95_ms", MAX_MS, positive=True)
    ref = number("reference_p95_ms", MAX_MS, optional=True, positive=True)
    kind = base.get("kind")
    if kind is not None and kind not in LATENCY_KINDS:
        raise bad("kind", f"one of {', '.join(LATENCY_KINDS)}")
    ident, acc = base.get("model"), base.get("accuracy")
    if ident is not None:
        if not isinstance(ident, dict):
            raise bad("model", "a mapping")
        for key, types in (("model_sha256", str), ("imgsz", list), ("names", list), ("device", str)):
            if not isinstance(ident.get(key), types):
                raise bad(f"model.{key}", f"a {types.__name__}")
    if acc is not None:
        if not isinstance(acc, dict):
            raise bad("accuracy", "a mapping")
        if acc.get("kind") not in ("labels", "agreement"):
            raise bad("accuracy.kind", "labels or agreement")
        if not isinstance(acc.get("data_sha256"), str):
            raise bad("accuracy.data_sha256", "a digest")
        for key in ("map50_95", "map50"):
            number(f"accuracy.{key}", 1)
    assert p95 is not None
    return Baseline(p95, kind, ref, ident, acc)


MAX_MS = 1e7  # a p95 of over two hours is no frame's latency
LATENCY_KINDS: tuple[str, ...] = typing.get_args(FrameKind)


def _at(doc: dict[str, Any], key: str) -> Any:
    """``doc``'s value at a dotted ``key`` (None where absent)."""
    value: Any = doc
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _real(value: object) -> bool:
    """A finite JSON number (not a boolean, a string or NaN)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
