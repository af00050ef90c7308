"""ONNX analysis: tensor shapes and sizes, FLOPs and bytes per node, weights, liveness peak memory,
and the YOLOv8 detect layout found from the graph itself.

Everything here works on a static-shape ``onnx.ModelProto``; shapes come from ONNX shape inference.

Example:
    >>> g = GraphInfo.of(onnx.load("yolov8n.onnx"))  # doctest: +SKIP
    >>> g.total_flops() / 1e9, g.peak_activation_bytes(dtype_bytes=1)  # doctest: +SKIP
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import onnx

from yolo_edge.core.errors import YoloEdgeError


@dataclass(frozen=True)
class Part:
    """One part of the split, in frame order, with the placement rules that concern it stated once, here."""

    name: str
    rule: str | None = None  # why a design rule keeps it FP32 on the CPU whatever the checks say, or None
    unit: bool = True  # run by the executor as (part of) a unit; False: the detector's post-processing runs it
    card_cpu: bool = False  # the design card's layout keeps it FP32 on the CPU (``plan.head_on_npu: never`` pins it)


PARTS: tuple[Part, ...] = (
    Part("backbone"),
    Part("neck"),
    Part("head", card_cpu=True),
    Part(
        "decode",
        rule="decode stays FP32 on the CPU: DFL softmax, dist2bbox and the box/score concat lose the class scores "
        "at low precision",
        unit=False,
        card_cpu=True,
    ),
)
SUBGRAPHS: tuple[str, ...] = tuple(p.name for p in PARTS)


def part(name: str) -> Part:
    """The part named ``name``; a name that is no one part (the whole model, fused parts) has none of their rules."""
    return next((p for p in PARTS if p.name == name), Part(name))


CONTROL_FLOW = ("Loop", "If", "Scan")  # no export or split yolo-edge makes has them; an untrusted graph's may never end


def control_flow(model: onnx.ModelProto) -> list[str]:
    """The control-flow ops (and ops carrying a subgraph) in ``model``: a ``Loop`` of 2e9 iterations in a tampered
    graph loads fine and never finishes its first frame, so a graph someone else wrote with any is refused."""
    return sorted(
        {
            n.op_type
            for n in model.graph.node
            if n.op_type in CONTROL_FLOW
            or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute)
        }
    )


_ELEM_BYTES: dict[int, int] = {
    onnx.TensorProto.FLOAT: 4,
    onnx.TensorProto.FLOAT16: 2,
    onnx.TensorProto.BFLOAT16: 2,
    onnx.TensorProto.DOUBLE: 8,
    onnx.TensorProto.INT8: 1,
    onnx.TensorProto.UINT8: 1,
    onnx.TensorProto.INT16: 2,
    onnx.TensorProto.INT32: 4,
    onnx.TensorProto.INT64: 8,
    onnx.TensorProto.BOOL: 1,
}
_TRANSCENDENTAL = {"Sigmoid", "Exp", "Tanh", "Log", "Softmax", "HardSigmoid", "Erf"}
_DATA_MOVEMENT = {
    "Reshape",
    "Transpose",
    "Concat",
    "Slice",
    "Split",
    "Gather",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "Identity",
    "Shape",
    "Constant",
    "Cast",
    "Expand",
    "Tile",
    "Resize",
    "Pad",
}
_LAYER_RE = re.compile(r"^/model\.(\d+)/")


@dataclass(frozen=True)
class TensorInfo:
    """A named tensor with a static shape; ``bytes`` is at the tensor's own dtype."""

    name: str
    shape: tuple[int, ...]
    elem_type: int = onnx.TensorProto.FLOAT

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def dtype_bytes(self) -> int:
        return _ELEM_BYTES.get(self.elem_type, 4)

    @property
    def bytes(self) -> int:
        return self.numel * self.dtype_bytes

    def bytes_at(self, dtype_bytes: int) -> int:
        """Size if stored at another precision (e.g. 1 for INT8 activations)."""
        return self.numel * dtype_bytes

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "shape": list(self.shape), "bytes": self.bytes}


@dataclass
class GraphInfo:
    """Static-shape facts about one ONNX graph (inferred once, then cheap to query)."""

    model: onnx.ModelProto
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    initializers: dict[str, onnx.TensorProto] = field(default_factory=dict)

    @classmethod
    def of(cls, model: onnx.ModelProto) -> GraphInfo:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
        tensors: dict[str, TensorInfo] = {}
        g = inferred.graph
        for vi in [*g.input, *g.value_info, *g.output]:
            tt = vi.type.tensor_type
            dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim)
            if tt.HasField("shape") and all(d > 0 for d in dims):
                tensors[vi.name] = TensorInfo(vi.name, dims, tt.elem_type)
        inits = {t.name: t for t in g.initializer}
        for name, t in inits.items():
            tensors[name] = TensorInfo(name, tuple(t.dims), t.data_type)
        for node in g.node:  # Constant nodes carry their value as an attribute
            if node.op_type == "Constant" and node.attribute and node.attribute[0].type == onnx.AttributeProto.TENSOR:
                t = node.attribute[0].t
                tensors[node.output[0]] = TensorInfo(node.output[0], tuple(t.dims), t.data_type)
        return cls(model=inferred, tensors=tensors, initializers=inits)

    @property
    def nodes(self) -> Sequence[onnx.NodeProto]:
        return self.model.graph.node

    def tensor(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise YoloEdgeError(
                f"tensor '{name}' has no static shape; export the model with a fixed imgsz (no dynamic axes)"
            ) from None

    def node_flops(self, node: onnx.NodeProto) -> int:
        """FLOPs of one node: 2 per multiply-accumulate for Conv/MatMul/Gemm, one per output element for
        elementwise ops, four for transcendental ones, kernel-size per element for pooling, 0 for data movement."""
        if node.op_type in _DATA_MOVEMENT or not node.output:
            return 0
        out = self.tensors.get(node.output[0])
        if out is None:
            return 0
        if node.op_type == "Conv":  # weight [Cout, Cin/group, kH, kW]: one MAC per weight element per output pixel
            return 2 * out.numel * math.prod(self.tensors[node.input[1]].shape[1:])
        if node.op_type in ("MatMul", "Gemm"):
            k = self.tensors[node.input[0]].shape[-1]
            return 2 * out.numel * k
        if node.op_type in ("MaxPool", "AveragePool"):
            kernel = next(a.ints for a in node.attribute if a.name == "kernel_shape")
            return out.numel * math.prod(kernel)
        if node.op_type in _TRANSCENDENTAL:
            return 4 * out.numel
        return out.numel

    def node_bytes(self, node: onnx.NodeProto, act_bytes: int | None = None, weight_bytes: int | None = None) -> int:
        """Bytes the node reads and writes: activations and weights, each at its own dtype unless
        ``act_bytes`` / ``weight_bytes`` per element are given."""
        total = 0
        for name in [*node.input, *node.output]:
            if not name or name not in self.tensors:
                continue
            t = self.tensors[name]
            width = weight_bytes if name in self.initializers else act_bytes
            total += t.bytes if width is None or t.elem_type != onnx.TensorProto.FLOAT else t.bytes_at(width)
        return total

    def total_flops(self, nodes: Iterable[onnx.NodeProto] | None = None) -> int:
        return sum(self.node_flops(n) for n in (self.nodes if nodes is None else nodes))

    def param_count(self, nodes: Iterable[onnx.NodeProto] | None = None) -> int:
        """Elements of float initializers used by ``nodes`` (all nodes by default)."""
        used = {i for n in (self.nodes if nodes is None else nodes) for i in n.input}
        return sum(
            math.prod(t.dims)
            for name, t in self.initializers.items()
            if name in used and t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
        )

    def weight_bytes(self, dtype_bytes: int | None = None) -> int:
        """Bytes of the float weights, at their own dtype or at ``dtype_bytes`` per element."""
        return sum(
            math.prod(t.dims) * (dtype_bytes or _ELEM_BYTES.get(t.data_type, 4))
            for t in self.initializers.values()
            if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
        )

    def peak_activation_bytes(self, dtype_bytes: int | None = None) -> int:
        """Peak live activation memory executing nodes in graph (topological) order.

        A tensor is live from the node that produces it (graph inputs: from the start) until its last
        consumer has run (graph outputs: to the end). While a node runs, its inputs and outputs are live.
        """
        g = self.model.graph
        size = self._activation_sizer(dtype_bytes)
        last_use: dict[str, int] = {}
        for i, node in enumerate(g.node):
            for name in node.input:
                last_use[name] = i
        end = len(g.node)
        for o in g.output:
            last_use[o.name] = end
        live = {i.name: size(i.name) for i in g.input if i.name not in self.initializers}
        current = sum(live.values())
        peak = current
        for i, node in enumerate(g.node):
            for name in node.output:
                if name and name not in live:
                    live[name] = size(name)
                    current += live[name]
            peak = max(peak, current)
            for name in [*node.input, *node.output]:
                if name in live and last_use.get(name, -1) <= i:
                    current -= live.pop(name)
        return peak

    def _activation_sizer(self, dtype_bytes: int | None) -> Callable[[str], int]:
        def size(name: str) -> int:
            t = self.tensors.get(name)
            if t is None:
                return 0
            return t.bytes if dtype_bytes is None or t.elem_type != onnx.TensorProto.FLOAT else t.bytes_at(dtype_bytes)

        return size


@dataclass(frozen=True)
class DetectLayout:
    """Where the YOLOv8 subgraphs are in an ultralytics-exported detect graph, found from node names and edges.

    ``subgraph_of[i]`` is the subgraph index (0 backbone ... 3 decode) of ``graph.node[i]``.
    """

    sppf_layer: int
    detect_layer: int
    subgraph_of: tuple[int, ...]
    nc: int
    reg_max: int
    strides: tuple[int, ...]
    imgsz: tuple[int, int]


def _layer(node: onnx.NodeProto) -> int | None:
    m = _LAYER_RE.match(node.name)
    return int(m.group(1)) if m else None


_NOT_YOLO = "is not a YOLOv8 detect graph exported by ultralytics"


def yolov8_layout(info: GraphInfo) -> DetectLayout:
    """Find the backbone/neck/head/decode partition of a YOLOv8 detect graph.

    Backbone: layers up to the SPPF (the last layer with MaxPool before Detect); neck: up to Detect;
    head: Detect's ``cv2.*``/``cv3.*`` conv branches; decode: the rest of Detect (DFL, dist2bbox, sigmoid,
    concat). Nodes without a layer name (unnamed constants) join their producers' or consumers' subgraph.
    Raises YoloEdgeError when the graph is not a YOLOv8 detect graph.
    """
    g = info.model.graph
    image = _image_input(info)
    layers = [_layer(n) for n in g.node]
    dfl_layers = {layers[i] for i, n in enumerate(g.node) if "/dfl/" in n.name}
    if len(dfl_layers) != 1 or None in dfl_layers:
        raise YoloEdgeError(
            f"no Detect layer with a DFL found: the ONNX {_NOT_YOLO} (segment/pose/OBB heads and NMS-free "
            "exports are not supported)"
        )
    detect = dfl_layers.pop()
    assert detect is not None
    pools = [
        layer for n, layer in zip(g.node, layers) if n.op_type == "MaxPool" and layer is not None and layer < detect
    ]
    if not pools:
        raise YoloEdgeError(f"no SPPF (MaxPool) layer before Detect: the ONNX {_NOT_YOLO}")
    sppf = max(pools)
    head_re = re.compile(rf"^/model\.{detect}/cv[23]\.\d+/")

    def by_name(node: onnx.NodeProto, layer: int | None) -> int | None:
        if layer is None:
            return None  # placed from its neighbours below
        if layer <= sppf:
            return 0
        if layer < detect:
            return 1
        return 2 if head_re.match(node.name) else 3

    named = [by_name(node, layer) for node, layer in zip(g.node, layers)]
    producer = {o: i for i, n in enumerate(g.node) for o in n.output}
    consumers: dict[str, list[int]] = {}
    for i, n in enumerate(g.node):
        for name in n.input:
            consumers.setdefault(name, []).append(i)
    final = _place_unnamed(g, named, producer, consumers)
    box_out, cls_out = _head_outputs(info, final, consumers, detect)
    h, w = image.shape[2], image.shape[3]
    strides = tuple(h // t.shape[2] for t in box_out)
    return DetectLayout(
        sppf_layer=sppf,
        detect_layer=detect,
        subgraph_of=final,
        nc=cls_out[0].shape[1],
        reg_max=box_out[0].shape[1] // 4,
        strides=strides,
        imgsz=(h, w),
    )


def _head_outputs(
    info: GraphInfo, final: tuple[int, ...], consumers: dict[str, list[int]], detect: int
) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """The head's box (cv2) and class (cv3) outputs that the decode reads, largest scale first."""
    g = info.model.graph
    head_out = [
        o
        for i, n in enumerate(g.node)
        if final[i] == 2
        for o in n.output
        if any(final[c] == 3 for c in consumers.get(o, []))
    ]
    box_out = [info.tensor(o) for o in head_out if re.search(rf"/model\.{detect}/cv2\.\d+/", o)]
    cls_out = [info.tensor(o) for o in head_out if re.search(rf"/model\.{detect}/cv3\.\d+/", o)]
    if not box_out or len(box_out) != len(cls_out):
        raise YoloEdgeError(f"Detect's box and class branches do not pair up; the ONNX {_NOT_YOLO}")
    box_out.sort(key=lambda t: -t.shape[2])
    cls_out.sort(key=lambda t: -t.shape[2])
    return box_out, cls_out


def _image_input(info: GraphInfo) -> TensorInfo:
    """The single [1, 3, H, W] image input of a one-output detect graph."""
    g = info.model.graph
    real_inputs = [i for i in g.input if i.name not in info.initializers]
    if len(real_inputs) != 1 or len(g.output) != 1:
        raise YoloEdgeError(
            f"the ONNX has {len(real_inputs)} inputs and {len(g.output)} outputs; it {_NOT_YOLO} "
            "(expected 1 image input and output0)"
        )
    image = info.tensor(real_inputs[0].name)
    if len(image.shape) != 4 or image.shape[0] != 1 or image.shape[1] != 3:
        raise YoloEdgeError(
            f"input '{image.name}' has shape {list(image.shape)}; expected [1, 3, H, W] with a static batch "
            "of 1: re-export with batch=1 and a fixed imgsz"
        )
    return image


def _place_unnamed(
    g: onnx.GraphProto, named: list[int | None], producer: dict[str, int], consumers: dict[str, list[int]]
) -> tuple[int, ...]:
    """Give nodes without a layer name (None) their producers' subgraph, or for sources their consumers';
    then check that no node reads from a later subgraph and that none of the four is empty."""
    subgraph = list(named)
    changed = True
    while changed and None in subgraph:
        changed = False
        for i, n in enumerate(g.node):
            if subgraph[i] is not None:
                continue
            ups = [subgraph[producer[x]] for x in n.input if x in producer]
            downs = [subgraph[c] for o in n.output for c in consumers.get(o, [])]
            if ups and all(s is not None for s in ups):
                subgraph[i] = max(s for s in ups if s is not None)
            elif not ups and downs and all(s is not None for s in downs):
                subgraph[i] = min(s for s in downs if s is not None)
            else:
                continue
            changed = True
    if None in subgraph:
        raise YoloEdgeError(f"could not place every node in a subgraph; the ONNX {_NOT_YOLO}")
    final = tuple(int(s) for s in subgraph if s is not None)
    for i, n in enumerate(g.node):
        for x in n.input:
            if x in producer and final[producer[x]] > final[i]:
                raise YoloEdgeError(
                    f"node {n.name} in {SUBGRAPHS[final[i]]} reads {x} from a later subgraph; the ONNX {_NOT_YOLO}"
                )
    for k, name in enumerate(SUBGRAPHS):
        if k not in final:
            raise YoloEdgeError(f"the {name} subgraph is empty; the ONNX {_NOT_YOLO}")
    return final
