"""Compile-time limits of a device profile: operator support and memory (DRAM budget, on-chip SRAM).

Shared by the planner's checks and the simulated NPU's compiler, so both refuse the same graphs.
Tileable ops (convolutions, elementwise, pooling, resize, channel concat/split) stream through SRAM in
tiles; the others (softmax, transpose, reshape, concat/split/slice over other axes) need their whole
working set, inputs plus outputs, in SRAM at once.

Memory is counted as the runtime holds a graph (:class:`Residency`): ``batch`` frames a call, one context per
NPU core a stream's pool loads, each context's activation buffers its own (live activations by liveness at the
variant's activation width, times the batch) and its weights its own unless the runtime shares them
(``Backend.memory``, a :class:`RuntimeMemory`, which adds the runtime's own memory per context and its
activations' multiple where they were measured). :meth:`MemoryUse.batch_fit` is the largest batch within the
budget: a larger one asked for runs as sub-batches of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import onnx

from yolo_edge.core.config import ACTIVATION_BYTES, MAX_BATCH, PRECISION_BYTES, DeviceProfile
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
class RuntimeMemory:
    """What a runtime holds of a graph besides its bytes as the liveness count has them: whether its contexts share
    one copy of the weights, its own memory per context (``own_mb``: libraries' buffers, compiled kernels, the graph
    read), and its activations as a multiple of the liveness peak (``activation_factor``: buffers it does not reuse).
    Measured for the host's runtimes by ``benchmarks/memory_estimate.py`` (fitted on the demo, checked on YOLOv8n at
    640); a board's runtime is counted as the liveness count has it (0 and 1) until measured."""

    shares_weights: bool = False
    own_mb: float = 0.0
    activation_factor: float = 1.0


@dataclass(frozen=True)
class Residency:
    """How the runtime holds a graph: ``batch`` frames a call, ``contexts`` of it loaded at once (a stream's pool:
    one per NPU core), and what the ``runtime`` holds besides (:class:`RuntimeMemory`)."""

    batch: int = 1
    contexts: int = 1
    runtime: RuntimeMemory = RuntimeMemory()


@dataclass(frozen=True)
class MemoryUse:
    peak_activation_bytes: int  # one frame's live activations at their peak, at the variant's activation width
    weight_bytes: int  # one copy of the weights at the variant's weight width
    largest_untiled_bytes: int  # working set of the largest non-tileable op, one frame
    largest_untiled_node: str
    residency: Residency = Residency()

    def dram_at(self, batch: int) -> int:
        """Bytes held at ``batch`` frames a call: every context's weights (once where shared) and activations."""
        r, rt = self.residency, self.residency.runtime
        copies = 1 if rt.shares_weights else r.contexts
        frame = math.ceil(self.peak_activation_bytes * rt.activation_factor)
        return self.weight_bytes * copies + int(rt.own_mb * 2**20) * r.contexts + frame * batch * r.contexts

    @property
    def dram_bytes(self) -> int:
        return self.dram_at(self.residency.batch)

    @property
    def untiled_bytes(self) -> int:
        """The largest untiled working set of one call (the whole batch's tensors at once)."""
        return self.largest_untiled_bytes * self.residency.batch

    def batch_fit(self, profile: DeviceProfile) -> int:
        """The largest batch (up to ``MAX_BATCH``) whose DRAM and untiled working set fit ``profile``; 0: not even
        one frame does."""
        return batch_fit([self], profile)


def batch_fit(uses: list[MemoryUse], profile: DeviceProfile) -> int:
    """The largest batch (up to ``MAX_BATCH``) at which ``uses`` (graphs resident together: a deployment's
    accelerator units) fit ``profile``'s DRAM together and each its SRAM; 0: not at batch 1."""
    budget = profile.memory_mb * 2**20
    fixed = sum(u.dram_at(0) for u in uses)
    per_frame = sum(u.dram_at(1) for u in uses) - fixed
    fit = MAX_BATCH if per_frame <= 0 else int((budget - fixed) // per_frame)
    if profile.sram_kb is not None:
        untiled = max((u.largest_untiled_bytes for u in uses), default=0)
        fit = min(fit, int(profile.sram_kb * 1024 // untiled) if untiled else fit)
    return max(0, min(fit, MAX_BATCH))


def memory_use(
    info: GraphInfo, precision: str, scheme: str | None = None, residency: Residency = Residency()
) -> MemoryUse:
    """``info``'s memory at ``precision`` (INT8: activations at ``scheme``'s width, w8a16's two bytes), held as
    ``residency`` says."""
    width = PRECISION_BYTES[precision]
    act_width = ACTIVATION_BYTES.get(scheme or "", width) if precision == "int8" else width
    worst, worst_node = 0, ""
    for node in info.nodes:
        if node.op_type in QDQ_OPS or _tileable(node, info):
            continue
        ws = sum(
            info.tensors[t].bytes_at(act_width)
            if info.tensors[t].elem_type == onnx.TensorProto.FLOAT
            else info.tensors[t].bytes
            for t in [*node.input, *node.output]
            if t in info.tensors and t not in info.initializers
        )
        if ws > worst:
            worst, worst_node = ws, node.name
    return MemoryUse(info.peak_activation_bytes(act_width), info.weight_bytes(width), worst, worst_node, residency)


def memory_violation(use: MemoryUse, profile: DeviceProfile) -> str | None:
    """Why the graph does not fit the profile's memory at one frame a call (a larger batch runs as sub-batches of
    :meth:`MemoryUse.batch_fit`), or None when it fits."""
    one = replace(use, residency=replace(use.residency, batch=1))
    budget = profile.memory_mb * 2**20
    contexts = use.residency.contexts
    held = f" ({contexts} contexts)" if contexts > 1 else ""
    if one.dram_bytes > budget:
        weights = use.weight_bytes * (1 if use.residency.runtime.shares_weights else contexts)
        return (
            f"needs {one.dram_bytes / 2**20:.1f} MiB{held} (weights {weights / 2**20:.1f}, the rest activations and "
            f"the runtime's own) > {profile.memory_mb:.0f} MiB"
        )
    if profile.sram_kb is not None and one.untiled_bytes > profile.sram_kb * 1024:
        return (
            f"{use.largest_untiled_node} cannot be tiled and needs {one.untiled_bytes / 2**20:.2f} MiB "
            f"of SRAM at once > {profile.sram_kb / 1024:.0f} MiB"
        )
    return None


BATCHES = (1, 2, 4, 8, 16, 32)  # the batches whose need report.json gives (beside the one planned)


@dataclass(frozen=True)
class ResidentMemory:
    """A deployment's accelerator units held together (``units``: name and memory of each, as the runtime holds
    them) against the profile's budget: what each and all need by batch, and the largest batch that fits."""

    budget_bytes: int
    batch: int  # planned (plan.batch, deploy --batch)
    batch_fit: int  # the largest batch at which every unit fits together (0: not one frame)
    units: tuple[tuple[str, MemoryUse], ...]
    unit_fits: tuple[int, ...]  # each unit's largest batch alone

    @classmethod
    def of(cls, units: list[tuple[str, MemoryUse]], profile: DeviceProfile) -> ResidentMemory:
        batch = max((u.residency.batch for _, u in units), default=1)
        fit = batch_fit([u for _, u in units], profile)
        return cls(
            int(profile.memory_mb * 2**20), batch, fit, tuple(units), tuple(u.batch_fit(profile) for _, u in units)
        )

    def need_at(self, batch: int) -> int:
        return sum(u.dram_at(batch) for _, u in self.units)

    @property
    def runs_at(self) -> int:
        """The batch a call runs at: the one planned, or sub-batches of the largest that fits."""
        return max(1, min(self.batch, self.batch_fit))

    @property
    def batches(self) -> list[int]:
        """The batches whose need is reported: 1, 2, 4 ... 32 and the one planned."""
        return sorted({*BATCHES, self.batch})

    def to_dict(self) -> dict[str, object]:
        def mib(n: int) -> float:
            return round(n / 2**20, 3)

        batches = self.batches
        return {
            "budget_mb": mib(self.budget_bytes),
            "batch": self.batch,
            "batch_fit": self.batch_fit,
            "runs_at": self.runs_at,
            "need_mb_by_batch": {str(b): mib(self.need_at(b)) for b in batches},
            "units": [
                {
                    "name": name,
                    "weights_mb": mib(u.weight_bytes),
                    "activations_mb_per_frame": mib(u.peak_activation_bytes),
                    "contexts": u.residency.contexts,
                    "shared_weights": u.residency.runtime.shares_weights,
                    "runtime_own_mb": u.residency.runtime.own_mb,
                    "activation_factor": u.residency.runtime.activation_factor,
                    "batch_fit": fit,
                    "need_mb_by_batch": {str(b): mib(u.dram_at(b)) for b in batches},
                }
                for (name, u), fit in zip(self.units, self.unit_fits)
            ],
        }
