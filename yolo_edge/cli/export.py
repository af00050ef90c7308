"""``yolo-edge export``: .pt / model .yaml / ultralytics ONNX -> static, simplified ONNX with metadata."""

from __future__ import annotations

import argparse
from pathlib import Path

from yolo_edge.cli.common import add_imgsz, add_model, positive_int, print_json
from yolo_edge.model.export import DEFAULT_OPSET, export_model


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="export a YOLOv8 detector to ONNX", description=__doc__)
    add_model(p)
    add_imgsz(p)
    p.add_argument("--opset", type=positive_int, default=DEFAULT_OPSET)
    p.add_argument("--out", type=Path, default=Path("."), help="output folder (default: current)")
    p.add_argument("--json", action="store_true", help="print the metadata as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    exported = export_model(args.model, imgsz=args.imgsz, opset=args.opset, out_dir=args.out)
    if args.json:
        print_json({"path": str(exported.path), **exported.meta.to_dict()})
    else:
        m = exported.meta
        print(
            f"{exported.path}: {m.nc} classes, imgsz {m.imgsz[0]}x{m.imgsz[1]}, strides {list(m.strides)}, reg_max "
            f"{m.reg_max}"
        )
    return 0
