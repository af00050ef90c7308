"""Op-level fallback: a subgraph with a few ops the accelerator cannot run, cut into runs of nodes on one
device each (as onnxruntime's GetCapability partitions a graph), the unsupported runs on the CPU.

Kept only when the pieces plus the transfers between them beat the whole subgraph on the CPU, and when
the pieces at the accelerator's precision still pass the precision check end to end. Times come from
the cost model (the board's CPU and its accelerator, both modelled): op level is for modelled profiles,
whose hardware is not here; the refused ops come from the profile's op list or the vendor's compiler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from yolo_edge.backends.base import NpuCompileError, run_chain
from yolo_edge.core.config import PRECISION_BYTES, Variant
from yolo_edge.devices.cost import cpu_time, npu_time, transfer_time
from yolo_edge.devices.limits import memory_use, memory_violation
from yolo_edge.model.graph import GraphInfo
from yolo_edge.model.split import Piece, cut, device_runs
from yolo_edge.plan.checks import Candidate, Checker, judge
from yolo_edge.plan.results import CheckResult, Performance


@dataclass(frozen=True)
class OpLevelResult:
    checks: dict[str, CheckResult]  # precision and performance of the op-level pieces
    total_ms: float  # modelled: accelerator pieces + CPU pieces + transfers
    cpu_nodes: tuple[str, ...]


def op_level_search(checker: Checker, cand: Candidate, variant: Variant, cpu_ms: float) -> OpLevelResult | None:
    """The op-level split of ``cand`` and its checks; None when an accelerator piece does not fit in memory."""
    profile, precision = checker.profile, variant.precision
    assert profile.cpu is not None
    bad = checker.op_support.refused_nodes(cand)
    groups, devices = device_runs(cand.model, bad)
    pieces = cut(cand.model, groups, cand.name)
    width = PRECISION_BYTES[precision] / 4
    npu_s = cpu_s = xfer_s = 0.0
    for piece, dev in zip(pieces, devices):
        info = GraphInfo.of(piece.model)
        if dev == "npu":
            if memory_violation(memory_use(info, precision), profile):
                return None
            npu_s += npu_time(info, profile, precision, scheme=variant.scheme).total_s
        else:
            cpu_s += cpu_time(info, profile.cpu).total_s
    for k, piece in enumerate(pieces):  # every tensor entering a piece from the other device
        for name in piece.inputs:
            src = next((j for j in range(k) if name in pieces[j].outputs), None)
            if src is not None and devices[src] != devices[k]:
                xfer_s += transfer_time(int(cand.info.tensor(name).bytes * width), profile.link)
    total_ms = (npu_s + cpu_s + xfer_s) * 1e3
    limit = checker.cfg.checks.performance.max_ratio
    perf = CheckResult(
        "performance",
        total_ms < cpu_ms and total_ms <= limit * cpu_ms,
        f"op level: NPU {npu_s * 1e3:.2f} + CPU {cpu_s * 1e3:.2f} + {len(pieces) - 1} transfers {xfer_s * 1e3:.2f} ms "
        f"= {total_ms:.2f} ms vs all-CPU {cpu_ms:.2f} ms (modelled)",
        Performance(
            npu_ms=npu_s * 1e3,
            transfer_ms=xfer_s * 1e3,
            cpu_ms=cpu_ms,
            latency_kind="modelled",
            cpu_part_ms=cpu_s * 1e3,
            total_ms=total_ms,
            pieces=len(pieces),
        ),
    )
    checks = {"precision": _precision(checker, cand, pieces, devices, variant), "performance": perf}
    return OpLevelResult(checks, total_ms, tuple(sorted(bad)))


def _feeds(piece: Piece, tensors: Sequence[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    return [{n: t[n] for n in piece.inputs} for t in tensors]


def _precision(
    checker: Checker, cand: Candidate, pieces: list[Piece], devices: list[str], variant: Variant
) -> CheckResult:
    """The pieces in sequence, accelerator pieces at ``variant`` (calibrated on FP32 runs of the pieces
    before them), judged like a whole subgraph."""
    fp32 = [checker.builder.fp32(p.model) for p in pieces]
    calib: list[dict[str, np.ndarray]] = [run_chain(fp32, f) for f in cand.feeds_calib]
    try:
        exes = [
            checker.builder.compile(p.model, variant, [{n: t[n] for n in p.inputs} for t in calib])
            if d == "npu"
            else fp32[k]
            for k, (p, d) in enumerate(zip(pieces, devices))
        ]
    except NpuCompileError as exc:
        return CheckResult("precision", False, f"cannot compile a piece at {variant.label}: {exc}")
    outputs = [
        {n: out[n] for n in ref}
        for out, ref in ((run_chain(exes, f), r) for f, r in zip(cand.feeds_eval, cand.reference))
    ]
    return judge(checker.cfg, cand, variant, outputs, what="op level at ")
