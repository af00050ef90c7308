"""Compile-time limits of a device profile: operator support and memory (DRAM budget, on-chip SRAM).

Shared by the planner's checks and the simulated NPU's compiler, so both refuse the same graphs.
Tileable ops (convolutions, elementwise, pooling, resize, channel concat/split) stream through SRAM in
tiles; the others (softmax, transpose, reshape, concat/split/slice over other axes) need their whole
working set, inputs plus outputs, in SRAM at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from yolo_edge.core.config import PRECISION_BYTES, DeviceProfile
from yolo_edge.model.graph import GraphInfo

TILEABLE = {
    "Conv",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Sigmoid",
    "Relu",
    "Clip",
    "LeakyRelu",
    "HardSigmoid",
    "HardSwish",
    "Tanh",
    "MaxPool",
    "AveragePool",
    "Resize",
    "BatchNormalization",
}
_CHANNEL_OPS = {"Concat", "Split", "Slice"}
QDQ_OPS = {"Constant", "QuantizeLinear", "DequantizeLinear"}  # not compute: skipped by the op-list check


@dataclass(frozen=True)
class OpViolation:
    node: str
    op_type: str
    reason: str


def unsupported_ops(info: GraphInfo, profile: DeviceProfile) -> list[OpViolation]:
    """Nodes the profile's op list rejects: unknown op type, or a dtype/shape limit exceeded.

    A profile in ``query`` or ``all`` mode accepts every op here; ``query`` is answered by the runtime.
    Quantize/DequantizeLinear are not ops the NPU runs: they encode the INT8 scales of a QDQ graph (a
    bundle's INT8 artifact), which the vendor compiler folds into the ops around them.
    """
    if profile.op_support.mode != "list":
        return []
    out = []
    for node in info.nodes:
        if node.op_type in QDQ_OPS:
            continue
        limit = profile.op_support.ops.get(node.op_type)
        if limit is None:
            out.append(OpViolation(node.name, node.op_type, f"{node.op_type} is not in {profile.name}'s op list"))
            continue
        shapes = [info.tensors[i].shape for i in node.input if i in info.tensors and i not in info.initializers]
        for shape in shapes:
            if limit.max_rank is not None and len(shape) > limit.max_rank:
                out.append(OpViolation(node.name, node.op_type, f"rank {len(shape)} > {limit.max_rank}"))
            if limit.max_hw is not None and len(shape) >= 2 and shape[-1] * shape[-2] > limit.max_hw:
                out.append(
                    OpViolation(
                        node.name, node.op_type, f"H*W {shape[-2]}x{shape[-1]}={shape[-1] * shape[-2]} > {limit.max_hw}"
                    )
                )
            if limit.max_channels is not None and len(shape) == 4 and shape[1] > limit.max_channels:
                out.append(OpViolation(node.name, node.op_type, f"{shape[1]} channels > {limit.max_channels}"))
    return out


def _tileable(node: onnx.NodeProto, info: GraphInfo) -> bool:
    if node.op_type in TILEABLE:
        return True
    if node.op_type in _CHANNEL_OPS:
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        rank = len(info.tensors[node.output[0]].shape) if node.output[0] in info.tensors else 0
        return rank == 4 and axis in (1, -3)
    return False


@dataclass(frozen=True)
class MemoryUse:
    peak_activation_bytes: int
    weight_bytes: int
    largest_untiled_bytes: int  # working set of the largest non-tileable op
    largest_untiled_node: str

    @property
    def dram_bytes(self) -> int:
        return self.peak_activation_bytes + self.weight_bytes


def memory_use(info: GraphInfo, precision: str) -> MemoryUse:
    width = PRECISION_BYTES[precision]
    worst, worst_node = 0, ""
    for node in info.nodes:
        if node.op_type in QDQ_OPS or _tileable(node, info):
            continue
        ws = sum(
            info.tensors[t].bytes_at(width)
            if info.tensors[t].elem_type == onnx.TensorProto.FLOAT
            else info.tensors[t].bytes
            for t in [*node.input, *node.output]
            if t in info.tensors and t not in info.initializers
        )
        if ws > worst:
            worst, worst_node = ws, node.name
    return MemoryUse(info.peak_activation_bytes(width), info.weight_bytes(width), worst, worst_node)


def memory_violation(use: MemoryUse, profile: DeviceProfile) -> str | None:
    """Why the graph does not fit the profile's memory, or None when it fits."""
    budget = profile.memory_mb * 2**20
    if use.dram_bytes > budget:
        return (
            f"needs {use.dram_bytes / 2**20:.1f} MiB (activations {use.peak_activation_bytes / 2**20:.1f} "
            f"+ weights {use.weight_bytes / 2**20:.1f}) > {profile.memory_mb:.0f} MiB"
        )
    if profile.sram_kb is not None and use.largest_untiled_bytes > profile.sram_kb * 1024:
        return (
            f"{use.largest_untiled_node} cannot be tiled and needs {use.largest_untiled_bytes / 2**20:.2f} MiB "
            f"of SRAM at once > {profile.sram_kb / 1024:.0f} MiB"
        )
    return None
