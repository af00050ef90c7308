"""``yolo-edge val BUNDLE [--data D]``: mAP of the deployed plan vs the FP32 reference, and the drift."""

from __future__ import annotations

import argparse
from pathlib import Path

from yolo_edge.bundle import load_bundle
from yolo_edge.cli.common import add_bundle_data, add_shards, print_json, table
from yolo_edge.validate.bundle import val_bundle
from yolo_edge.validate.verdict import interval_text, kept_text


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("val", help="mAP and drift of a bundle", description=__doc__)
    p.add_argument("bundle", type=Path)
    add_bundle_data(p)
    add_shards(p)
    p.add_argument("--json", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    bundle = load_bundle(args.bundle)
    v = val_bundle(
        bundle, args.data, args.json or args.quiet, args.class_map, shards=args.shards, ray_address=args.ray_address
    )
    if args.json:
        print_json(v.to_dict())
        return 0
    rows = [
        (name, f"{m.map50:.4f}", f"{m.map50_95:.4f}")
        for name, m in (("reference (FP32 CPU)", v.reference), ("deployed", v.deployed))
    ]
    rows.append(("drift", f"{v.drift.map50:+.4f}", f"{v.drift.map50_95:+.4f}"))
    what = "mAP" if v.kind == "labels" else "agreement"
    print(table(("", f"{what}50", f"{what}50-95"), rows))
    print(
        f"{v.images} images, "
        + ("mAP vs labels" if v.kind == "labels" else "agreement with the FP32 reference (no labels)")
        + (f"; drift {interval_text(v.drift_interval)}" if v.drift_interval else "")
        + (f"; {kept_text(v.kept)}" if v.kept else "")
    )
    return 0
