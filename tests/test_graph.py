"""ONNX analysis on graphs small enough to count by hand: shapes, bytes, FLOPs, weights, liveness peak."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.model.graph import GraphInfo


def _tiny() -> onnx.ModelProto:
    """x [1,4,8,8] -> Relu a -> Relu b -> Add(a, b) y; plus a 1x1 Conv on y with 8 output channels -> z."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8, 8, 8])
    w = numpy_helper.from_array(np.ones((8, 4, 1, 1), np.float32), "w")
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="r1"),
        helper.make_node("Relu", ["a"], ["b"], name="r2"),
        helper.make_node("Add", ["a", "b"], ["y"], name="add"),
        helper.make_node("Conv", ["y", "w"], ["z"], name="conv"),
    ]
    graph = helper.make_graph(nodes, "tiny", [x], [z], initializer=[w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_liveness_peak_counted_by_hand() -> None:
    info = GraphInfo.of(_tiny())
    # x 1 KiB; r1: x+a; r2: a+b (x freed); add: a+b+y = 3 KiB (a and b die after it); conv: y+z = 1+2 KiB
    assert info.peak_activation_bytes() == 3 * 1024
    assert info.peak_activation_bytes(dtype_bytes=1) == 3 * 256  # the same at INT8 width
    assert info.weight_bytes() == 8 * 4 * 4 and info.weight_bytes(dtype_bytes=2) == 8 * 4 * 2


def test_flops_and_shapes_counted_by_hand() -> None:
    info = GraphInfo.of(_tiny())
    assert info.tensor("z").shape == (1, 8, 8, 8) and info.tensor("a").bytes == 1024
    by_node = {n.name: info.node_flops(n) for n in info.nodes}
    assert by_node == {"r1": 256, "r2": 256, "add": 256, "conv": 2 * 8 * 8 * 8 * 4}  # 2 per MAC, 4 inputs per output
    assert info.total_flops() == sum(by_node.values()) and info.param_count() == 32


def test_a_dynamic_shape_is_a_one_line_error() -> None:
    model = _tiny()
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "h"
    with pytest.raises(YoloEdgeError, match="no static shape; export the model with a fixed imgsz"):
        GraphInfo.of(model).tensor("a")
