"""The four checks' results, typed: a verdict, a one-line reason and what the check measured, as one dataclass
per check. Code reads the measurements as fields; they become JSON only in ``CheckResult.to_dict`` (through
``codec.plain``, which rounds) and come back through ``CheckResult.from_dict`` (plan.json, report.json).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from yolo_edge.core.codec import plain
from yolo_edge.core.config import LatencyKind


@dataclass(frozen=True)
class OpSupport:
    """1. What the profile's op list, or the runtime's own query, says of the graph's ops."""

    mode: str  # list, query, all
    ops: int | None = None
    unsupported: int | None = None
    unsupported_ops: str | None = None  # the op types refused, by the op list


@dataclass(frozen=True)
class Memory:
    """2. The graph's memory at a precision against the profile's budgets."""

    peak_activation_bytes: int
    weight_bytes: int
    required_bytes: int
    budget_bytes: int
    largest_untiled_bytes: int
    largest_untiled_node: str | None
    sram_bytes: int | None
    batch: int = 1  # frames a call, as planned (plan.batch)
    contexts: int = 1  # copies loaded at once (a stream's pool: one per NPU core)
    batch_fit: int | None = None  # the largest batch within the budgets (0: not one frame)


@dataclass(frozen=True)
class Precision:
    """3. The graph at low precision against FP32 on the evaluation images: the detector output (boxes, class
    scores) through the later subgraphs in FP32, and its own outputs (local); what was not measured is None
    (a graph that did not compile, a rule)."""

    precision: str
    variant: str | None = None
    images: int | None = None
    box_cosine: float | None = None
    score_cosine: float | None = None
    score_max_error: float | None = None
    local_min_cosine: float | None = None
    local_worst_tensor: str | None = None
    max_abs_error: float | None = None
    nan_inf: int | None = None
    sensitive_ops: str | None = None
    threshold_cosine: float | None = None  # below it: broken
    threshold_flips: float | None = None  # over it: broken
    threshold_local_cosine: float | None = None
    worst_layers: str | None = None  # the backend's per-layer error, where it failed at INT8
    flips: float | None = None  # the share of class scores over the operating confidence in only one of the two
    scores_over: int | None = None  # class scores over the operating confidence in the FP32 model's output


@dataclass(frozen=True)
class Performance:
    """4. The accelerator's time (and transfers) against the CPU's; op level adds its pieces' split."""

    npu_ms: float | None = None
    transfer_ms: float | None = None
    cpu_ms: float | None = None
    ratio: float | None = None
    max_ratio: float | None = None
    latency_kind: LatencyKind | None = None
    cpu_part_ms: float | None = None  # op level: the CPU pieces
    total_ms: float | None = None  # op level: accelerator pieces + CPU pieces + transfers
    pieces: int | None = None
    ratio_low: float | None = None  # measured: the per-round ratios' spread (quartiles; each round under one load)
    ratio_high: float | None = None
    close: bool | None = None  # the limit inside that spread after re-measuring: kept, for the verdict to decide


Measured = OpSupport | Memory | Precision | Performance
MEASURES: dict[str, type[OpSupport] | type[Memory] | type[Precision] | type[Performance]] = {
    "op_support": OpSupport,
    "memory": Memory,
    "precision": Precision,
    "performance": Performance,
}


@dataclass(frozen=True)
class CheckResult:
    name: str  # op_support, memory, precision, performance
    passed: bool | None  # None: not evaluated (the reason says why)
    reason: str
    measured: Measured | None = None

    def to_dict(self) -> dict[str, object]:
        fields = {} if self.measured is None else plain(self.measured)
        return {"passed": self.passed, "reason": self.reason, **fields}

    @classmethod
    def from_dict(cls, name: str, d: dict[str, Any]) -> CheckResult:
        """What ``to_dict`` wrote; raises KeyError/TypeError on a malformed entry (a damaged plan)."""
        kind = MEASURES[name]
        known = {f.name for f in dataclasses.fields(kind)}
        values = {k: v for k, v in d.items() if k in known}
        measured = kind(**values) if values else None
        return cls(name, d["passed"], str(d["reason"]), measured)


def skipped(name: str, why: str) -> CheckResult:
    return CheckResult(name, None, f"not evaluated: {why}")
