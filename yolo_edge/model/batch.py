"""A unit's graph at a static batch of B frames: what the vendors' compilers need (a static shape per compiled unit).

The exported graph and its units take one frame (batch 1). :func:`at_batch` gives the same graph taking B: every
input and output's first dimension B, and every constant that spells the batch out (a ``Reshape``'s target shape, a
``Resize``'s output sizes) spelled with B; then ONNX's shape inference, in strict mode, must find B at every output.
A node the batch flows through whose meaning it cannot see to be row by row (an op not known to act on each row
alone, a ``Reshape`` whose target does not begin with the batch, a ``Concat``, ``Split``, ``Slice`` or ``Softmax``
along the batch axis, a ``Transpose`` that moves it) is refused with its name: a batch that mixes rows would be
wrong, not slow. That each row's outputs equal the batch-1 graph's on that row is proven by running both
(``tests/test_batch.py``, on every backend usable here).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx
from onnx import numpy_helper

from yolo_edge.core.errors import YoloEdgeError

# ops that compute each row of the batch from that row alone, whatever their attributes (axes are checked apart)
ROW_WISE = frozenset(
    {
        "Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "BatchNormalization",
        "Sigmoid", "Relu", "LeakyRelu", "HardSigmoid", "HardSwish", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs",
        "Clip", "Erf", "Identity", "Cast", "Mul", "Add", "Sub", "Div", "Pow", "Max", "Min", "MatMul",
        "QuantizeLinear", "DequantizeLinear", "QLinearConv", "ConvInteger", "Resize", "Upsample",
        "Split", "Concat", "Slice", "Softmax", "Transpose", "Reshape",
    }
)  # fmt: skip
# of the row-wise ops, those whose axis must not be the batch's
_AXIS_OPS = {"Split": 0, "Concat": None, "Softmax": -1}  # the axis attribute's default (None: required)


class BatchRefused(YoloEdgeError):
    """A graph whose batch cannot be changed without mixing rows: which node, and why."""


def at_batch(model: onnx.ModelProto, batch: int) -> onnx.ModelProto:
    """``model`` (a graph taking one frame) taking ``batch`` frames, each row computed as the batch-1 graph computes
    it; ``model`` itself is untouched. Raises :class:`BatchRefused` naming the node that would mix rows."""
    if batch < 1:
        raise YoloEdgeError(f"a batch is a whole number of frames, at least 1; got {batch}")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    if batch == 1:
        return out
    g = out.graph
    constants = {i.name: i for i in g.initializer}
    for node in g.node:  # a Constant node's value, as an initializer of that name would hold it
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            constants[node.output[0]] = node.attribute[0].t
    carried = {i.name for i in g.input if i.name not in constants}
    _first_dim(g.input, constants, batch)
    for node in g.node:
        if not carried.intersection(node.input):
            continue  # computes on constants alone (a weight's DequantizeLinear): no batch flows through it
        _row_wise(node, g, constants, batch)
        carried.update(node.output)
    _first_dim(g.output, constants, batch)
    _drop_unread(g)
    del g.value_info[:]
    try:
        inferred = onnx.shape_inference.infer_shapes(out, strict_mode=True, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
        raise BatchRefused(f"the graph at batch {batch} does not infer: {str(exc).splitlines()[0][:200]}") from None
    for value in inferred.graph.output:
        dims = value.type.tensor_type.shape.dim
        if dims and dims[0].HasField("dim_value") and dims[0].dim_value != batch:
            raise BatchRefused(f"output '{value.name}' comes out at {_shape(value)} at batch {batch}")
    return out


def _first_dim(values: Iterable[onnx.ValueInfoProto], constants: dict[str, onnx.TensorProto], batch: int) -> None:
    """Each of ``values`` (a graph's inputs or outputs, not its constants) given the batch as its first dimension."""
    for value in values:
        if value.name in constants:
            continue
        dims = value.type.tensor_type.shape.dim
        if not dims or dims[0].dim_value != 1:
            raise BatchRefused(f"'{value.name}' does not begin with a batch of 1 ({_shape(value)}): nothing to batch")
        dims[0].dim_value = batch


def _row_wise(node: onnx.NodeProto, g: onnx.GraphProto, constants: dict[str, onnx.TensorProto], batch: int) -> None:
    """Check (and where a constant spells the batch, rewrite) one node the batch flows through."""
    if node.op_type not in ROW_WISE:
        raise BatchRefused(f"node '{node.name}' ({node.op_type}) is not known to compute each frame alone")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type in _AXIS_OPS:
        axis = attrs.get("axis", _AXIS_OPS[node.op_type])
        if axis == 0:
            raise BatchRefused(f"node '{node.name}' ({node.op_type}) works along the batch axis")
    elif node.op_type == "Transpose" and list(attrs.get("perm", [1]))[:1] != [0]:
        raise BatchRefused(f"node '{node.name}' (Transpose) moves the batch axis (perm {list(attrs.get('perm', []))})")
    elif node.op_type == "Slice" and 0 in _axes(node, constants):
        raise BatchRefused(f"node '{node.name}' (Slice) slices along the batch axis")
    elif node.op_type == "Reshape":
        _respell(node, 1, g, constants, batch, "its target shape")
    elif node.op_type == "Resize" and len(node.input) > 3 and node.input[3]:
        _respell(node, 3, g, constants, batch, "its output sizes")


def _axes(node: onnx.NodeProto, constants: dict[str, onnx.TensorProto]) -> Iterable[int]:
    """A Slice's axes (its fourth input; default every axis from the first)."""
    if len(node.input) > 3 and node.input[3]:
        if node.input[3] not in constants:
            raise BatchRefused(f"node '{node.name}' (Slice) has axes computed at run time")
        return [int(a) for a in numpy_helper.to_array(constants[node.input[3]]).ravel()]
    starts = constants.get(node.input[1])
    return range(1 if starts is None else int(numpy_helper.to_array(starts).size))


def _respell(
    node: onnx.NodeProto, index: int, g: onnx.GraphProto, constants: dict[str, onnx.TensorProto], batch: int, what: str
) -> None:
    """Give ``node``'s constant input ``index`` (a shape beginning with the batch, 1, or 0: copied from the input) a
    copy of its own with B first; refused where it is computed at run time or does not begin with the batch."""
    name = node.input[index]
    if name not in constants:
        raise BatchRefused(f"node '{node.name}' ({node.op_type}) has {what} computed at run time")
    shape = numpy_helper.to_array(constants[name]).copy()
    if shape.ndim != 1 or not shape.size or int(shape[0]) not in (0, 1):
        raise BatchRefused(f"node '{node.name}' ({node.op_type}): {what} {shape.tolist()} does not begin with a batch")
    if int(shape[0]) == 0:
        return  # 0 copies the input's first dimension: the batch, whatever it is
    shape[0] = batch
    respelled = numpy_helper.from_array(shape.astype(np.int64), f"{name}__batch{batch}__{node.name}")
    g.initializer.append(respelled)
    constants[respelled.name] = respelled
    node.input[index] = respelled.name


def _drop_unread(g: onnx.GraphProto) -> None:
    """Drop the constants a batch's copy replaced (their copies are named after them) where nothing reads them now."""
    replaced = {i.name.split("__batch")[0] for i in g.initializer if "__batch" in i.name}
    read = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    for init in [i for i in g.initializer if i.name in replaced and i.name not in read]:
        g.initializer.remove(init)
    for node in [n for n in g.node if n.op_type == "Constant" and n.output[0] in replaced - read]:
        g.node.remove(node)


def _shape(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in value.type.tensor_type.shape.dim]
