"""Cost model: an accelerator's roofline time per op plus launch overhead, a board CPU's three costs, and boundary
transfer time.

On an accelerator an op takes ``max(flops / (peak * utilization), bytes / dram_bandwidth) + overhead``. Elementwise ops
that consume a convolution's output (SiLU's Sigmoid and Mul, residual Adds) are fused into it, as NPU
compilers do: they add their FLOPs but no DRAM traffic and no launch. Weights and activations move at
the precision's width. Figures from this module are always reported as *modelled*.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from yolo_edge.core.config import ACTIVATION_BYTES, PRECISION_BYTES, CpuModel, DeviceProfile, Link
from yolo_edge.model.graph import GraphInfo

FUSABLE = {"Sigmoid", "Mul", "Add", "Relu", "Clip", "HardSigmoid", "HardSwish", "LeakyRelu", "Tanh"}


@dataclass(frozen=True)
class CostEstimate:
    compute_s: float
    memory_s: float
    overhead_s: float
    total_s: float
    launched_ops: int

    @property
    def total_ms(self) -> float:
        return self.total_s * 1e3


def estimate(
    info: GraphInfo,
    peak_flops: float,
    dram_bps: float,
    overhead_s: float,
    value_bytes: int,
    kept: Mapping[str, tuple[float, int]] | None = None,
) -> CostEstimate:
    """Modelled time of the whole graph ``info`` on a device with the given peak, bandwidth and overhead;
    ``kept`` nodes (mixed precision) run at their own (peak, value bytes)."""
    kept = kept or {}
    producer = {o: n for n in info.nodes for o in n.output}
    fused: set[str] = set()
    compute = memory = overhead = total = 0.0
    launched = 0
    for node in info.nodes:
        if node.op_type == "Constant":
            continue
        flops = info.node_flops(node)
        peak, width = kept.get(node.name, (peak_flops, value_bytes))
        src = producer.get(node.input[0]) if node.input else None
        if node.op_type in FUSABLE and src is not None and (src.op_type == "Conv" or src.name in fused):
            fused.add(node.name)
            compute += flops / peak
            total += flops / peak
            continue
        t_c = flops / peak
        t_m = info.node_bytes(node, width, weight_bytes=width) / dram_bps
        compute += t_c
        memory += t_m
        overhead += overhead_s
        total += max(t_c, t_m) + overhead_s
        launched += 1
    return CostEstimate(compute, memory, overhead, total, launched)


def npu_time(
    info: GraphInfo,
    profile: DeviceProfile,
    precision: str,
    kept: Sequence[str] = (),
    kept_precision: str = "fp16",
    scheme: str | None = None,
) -> CostEstimate:
    """Modelled accelerator time of ``info`` at ``precision`` (an INT8 ``scheme`` with a figure of its own in the
    profile's ``peak_tops``, ``int8/w8a16``, at that figure and its activation width), the ``kept`` nodes at
    ``kept_precision`` (the profile's peak for it, else the precision's: a profile that does not say cannot price
    mixed precision)."""

    def peak(p: str) -> float:
        return profile.peak_tops.get(p, profile.peak_tops[precision]) * 1e12 * profile.utilization

    slow = {n: (peak(kept_precision), PRECISION_BYTES[kept_precision]) for n in kept}
    own = f"{precision}/{scheme}"
    width = ACTIVATION_BYTES.get(scheme or "", PRECISION_BYTES[precision])
    rate = peak(own) if own in profile.peak_tops else peak(precision)
    return estimate(info, rate, profile.dram_gbps * 1e9, profile.op_overhead_us * 1e-6, width, slow)


def cpu_time(info: GraphInfo, cpu: CpuModel) -> CostEstimate:
    """Modelled FP32 time of ``info`` run by ONNX Runtime on a board's CPU: the sum, over every op, of its
    arithmetic (``gflops``), its activation and weight traffic (``dram_gbps``: an element-wise op over a large
    tensor costs its bytes, as nothing is fused on these cores) and one launch (``op_overhead_us``). Three costs,
    fitted by least squares to published figures for whole models (``benchmarks/board_cpu_fit.py``, which prints
    each figure's error when it is left out of the fit)."""
    flops = traffic = 0.0
    launched = 0
    for node in info.nodes:
        if node.op_type == "Constant":
            continue
        flops += info.node_flops(node)
        traffic += info.node_bytes(node, PRECISION_BYTES["fp32"], weight_bytes=PRECISION_BYTES["fp32"])
        launched += 1
    compute, memory = flops / (cpu.gflops * 1e9), traffic / (cpu.dram_gbps * 1e9)
    overhead = launched * cpu.op_overhead_us * 1e-6
    return CostEstimate(compute, memory, overhead, compute + memory + overhead, launched)


def transfer_time(n_bytes: int, link: Link, tensors: int = 1) -> float:
    """Seconds to move ``n_bytes`` in ``tensors`` transfers over the host link."""
    if n_bytes == 0:
        return 0.0
    return n_bytes / (link.gbps * 1e9) + tensors * link.latency_us * 1e-6
