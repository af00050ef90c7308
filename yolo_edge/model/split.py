"""Cut an exported YOLOv8 detector into backbone, neck, head and decode subgraphs.

The cut points come from the graph: every node gets a subgraph from :func:`yolo_edge.model.graph.yolov8_layout`,
and a boundary tensor is one produced in an earlier subgraph and consumed in a later one. Each subgraph
is extracted with ``onnx.utils.Extractor`` and checked with ``onnx.checker`` (full check); the
extracted node set must equal the subgraph's own nodes, so a wrong cut fails loudly instead of silently
recomputing a neighbour's work.

Example:
    >>> split = split_model(load_onnx("yolov8n.onnx"))  # doctest: +SKIP
    >>> [s.name for s in split.subgraphs]  # doctest: +SKIP
    ['backbone', 'neck', 'head', 'decode']
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import onnx
from onnx.utils import Extractor

from yolo_edge.core.codec import dumps
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.model.graph import SUBGRAPHS, GraphInfo, TensorInfo
from yolo_edge.model.meta import ExportedModel


@dataclass(frozen=True)
class Subgraph:
    """One subgraph of the split model, a standalone ONNX with its boundary tensors."""

    name: str
    model: onnx.ModelProto
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    nodes: int
    params: int
    flops: int
    path: Path | None = None

    def to_dict(self) -> dict[str, object]:
        d: dict[str, object] = {"name": self.name}
        if self.path is not None:
            d["path"] = str(self.path)
        d.update(
            {
                "nodes": self.nodes,
                "params": self.params,
                "flops": self.flops,
                "inputs": [t.to_dict() for t in self.inputs],
                "outputs": [t.to_dict() for t in self.outputs],
            }
        )
        return d


@dataclass(frozen=True)
class SplitModel:
    """The four subgraphs in execution order; running them in sequence reproduces the full model."""

    exported: ExportedModel
    subgraphs: tuple[Subgraph, ...]

    def __getitem__(self, name: str) -> Subgraph:
        for s in self.subgraphs:
            if s.name == name:
                return s
        raise KeyError(f"no subgraph '{name}'; have {[s.name for s in self.subgraphs]}")

    @property
    def input(self) -> TensorInfo:
        return self.subgraphs[0].inputs[0]

    @property
    def output(self) -> TensorInfo:
        return self.subgraphs[-1].outputs[0]

    def boundaries(self) -> list[tuple[str, str, tuple[TensorInfo, ...]]]:
        """(producer subgraph, consumer subgraph, tensors) for every pair of subgraphs that exchange tensors."""
        out = []
        for i, src in enumerate(self.subgraphs):
            produced = {t.name for t in src.outputs}
            for dst in self.subgraphs[i + 1 :]:
                crossing = tuple(t for t in dst.inputs if t.name in produced)
                if crossing:
                    out.append((src.name, dst.name, crossing))
        return out

    def save(self, out_dir: str | Path) -> SplitModel:
        """Write ``<subgraph>.onnx`` per subgraph and ``split.json`` into ``out_dir``; returns a copy with paths."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        saved = []
        for s in self.subgraphs:
            path = out / f"{s.name}.onnx"
            tmp = path.with_suffix(".onnx.tmp")
            onnx.save(s.model, str(tmp))
            os.replace(tmp, path)
            saved.append(replace(s, path=path))
        result = replace(self, subgraphs=tuple(saved))
        (out / "split.json").write_text(dumps(result.to_dict()))
        return result

    def to_dict(self) -> dict[str, object]:
        return {
            "model": str(self.exported.path),
            "meta": self.exported.meta.to_dict(),
            "subgraphs": [s.to_dict() for s in self.subgraphs],
            "boundaries": [
                {"from": a, "to": b, "tensors": [t.to_dict() for t in ts]} for a, b, ts in self.boundaries()
            ],
        }


@dataclass(frozen=True)
class Piece:
    """A cut-out group of nodes as a standalone ONNX, with its boundary tensor names."""

    model: onnx.ModelProto
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    node_names: tuple[str, ...]


def device_runs(model: onnx.ModelProto, cpu_nodes: set[str]) -> tuple[list[list[int]], list[str]]:
    """Maximal runs of nodes on one device in execution order; constants join the next node's run."""
    nodes = list(model.graph.node)
    device = ["cpu" if n.name in cpu_nodes else "npu" for n in nodes]
    for i in range(len(nodes) - 1, -1, -1):
        if nodes[i].op_type == "Constant" and i + 1 < len(nodes):
            device[i] = device[i + 1]
    groups: list[list[int]] = []
    devices: list[str] = []
    for i, d in enumerate(device):
        if devices and devices[-1] == d:
            groups[-1].append(i)
        else:
            groups.append([i])
            devices.append(d)
    return groups, devices


def cut(model: onnx.ModelProto, groups: Sequence[Sequence[int]], label: str) -> list[Piece]:
    """Cut ``model`` into one standalone ONNX per group of node indices (groups in execution order).

    A group's inputs are the tensors it reads that an earlier group (or the graph input) produces; its
    outputs are the tensors it produces that a later group reads, or graph outputs. Constants are copied
    into every group that reads them. Raises YoloEdgeError when the cut would pull in another group's
    nodes (the groups are not a valid sequential partition).
    """
    info = GraphInfo.of(model)
    nodes = list(info.model.graph.node)
    group_of = {i: k for k, g in enumerate(groups) for i in g}
    if sorted(group_of) != list(range(len(nodes))):
        raise ValueError("groups must partition the graph's nodes")
    graph_inputs = {i.name for i in info.model.graph.input if i.name not in info.initializers}
    graph_outputs = [o.name for o in info.model.graph.output]
    produced_in = {o: group_of[i] for i, n in enumerate(nodes) for o in n.output}
    constants = {o for n in nodes if n.op_type == "Constant" for o in n.output}
    consumed_in: dict[str, set[int]] = {}
    for i, n in enumerate(nodes):
        for x in n.input:
            consumed_in.setdefault(x, set()).add(group_of[i])
    extractor = Extractor(info.model)
    pieces = []
    for k, group in enumerate(groups):
        own = [nodes[i] for i in group]
        inputs: list[str] = []
        for n in own:
            for x in n.input:
                if (
                    x
                    and x not in info.initializers
                    and x not in constants
                    and x not in inputs
                    and (x in graph_inputs or (x in produced_in and produced_in[x] < k))
                ):
                    inputs.append(x)
        outputs = [o for n in own for o in n.output if o in graph_outputs or any(s > k for s in consumed_in.get(o, ()))]
        sub = extractor.extract_model(inputs, outputs)
        got = {n.name for n in sub.graph.node if n.op_type != "Constant"}
        want = {n.name for n in own if n.op_type != "Constant"}
        if got != want:
            raise YoloEdgeError(
                f"cutting {label} part {k} at {inputs} -> {outputs} gives {len(got)} nodes, expected {len(want)}: "
                "the parts are not a sequential partition of the graph"
            )
        onnx.helper.set_model_props(sub, {p.key: p.value for p in model.metadata_props})
        onnx.checker.check_model(sub, full_check=True)
        pieces.append(Piece(sub, tuple(inputs), tuple(outputs), tuple(n.name for n in own)))
    return pieces


def split_model(exported: ExportedModel) -> SplitModel:
    """Split ``exported`` into backbone, neck, head and decode subgraphs (see module docstring)."""
    model = exported.load()
    subgraph_of = exported.layout.subgraph_of
    if len(model.graph.node) != len(subgraph_of):
        raise YoloEdgeError(f"{exported.path} changed since it was loaded; load it again")
    groups = [[i for i, s in enumerate(subgraph_of) if s == k] for k in range(len(SUBGRAPHS))]
    subgraphs = []
    for name, piece in zip(SUBGRAPHS, cut(model, groups, str(exported.path))):
        sub = piece.model
        onnx.helper.set_model_props(sub, {**{p.key: p.value for p in sub.metadata_props}, "yolo_edge.subgraph": name})
        sub.graph.name = f"{model.graph.name or 'yolov8'}_{name}"
        info = GraphInfo.of(sub)
        subgraphs.append(
            Subgraph(
                name=name,
                model=sub,
                inputs=tuple(info.tensor(x) for x in piece.inputs),
                outputs=tuple(info.tensor(o) for o in piece.outputs),
                nodes=len(piece.node_names),
                params=info.param_count(),
                flops=info.total_flops(),
            )
        )
    return SplitModel(exported=exported, subgraphs=tuple(subgraphs))
