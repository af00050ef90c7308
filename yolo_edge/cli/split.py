"""``yolo-edge split``: cut the model into backbone, neck, head and decode and describe each part."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from yolo_edge.cli.common import add_imgsz, add_model, mb, print_json, table
from yolo_edge.model.export import export_model
from yolo_edge.model.split import SplitModel, split_model


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("split", help="split a YOLOv8 detector into four subgraphs", description=__doc__)
    add_model(p)
    add_imgsz(p)
    p.add_argument("--out", type=Path, default=None, help="write <subgraph>.onnx and split.json here")
    p.add_argument("--json", action="store_true", help="print the split as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.out is not None:
        exported = export_model(args.model, imgsz=args.imgsz, out_dir=args.out)
        result = split_model(exported).save(args.out)
    else:
        with tempfile.TemporaryDirectory(prefix="yolo-edge-split-") as tmp:
            result = split_model(export_model(args.model, imgsz=args.imgsz, out_dir=tmp))
    if args.json:
        print_json(result.to_dict())
    else:
        print(format_split(result))
    return 0


def format_split(result: SplitModel) -> str:
    m = result.exported.meta
    lines = [f"{result.exported.path.name}: {m.nc} classes, imgsz {m.imgsz[0]}x{m.imgsz[1]}, strides {list(m.strides)}"]
    rows = [
        (
            s.name,
            s.nodes,
            f"{s.params:,}",
            f"{s.flops / 1e9:.3f}",
            mb(sum(t.bytes for t in s.inputs)),
            mb(sum(t.bytes for t in s.outputs)),
        )
        for s in result.subgraphs
    ]
    lines.append(table(("subgraph", "nodes", "params", "GFLOPs", "in MB", "out MB"), rows))
    for s in result.subgraphs:
        lines.append(f"\n{s.name}" + (f"  ({s.path})" if s.path else ""))
        io_rows = [("in", t.name, "x".join(map(str, t.shape)), mb(t.bytes)) for t in s.inputs]
        io_rows += [("out", t.name, "x".join(map(str, t.shape)), mb(t.bytes)) for t in s.outputs]
        lines.append(table(("", "tensor", "shape", "MB"), io_rows))
    return "\n".join(lines)
