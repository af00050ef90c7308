"""``yolo-edge val BUNDLE [--data D] [--conditions dark,night,...|all]``: mAP of the deployed plan vs the FP32
reference, and the drift; with ``--conditions``, the same under each condition (the judging images darkened,
noised, blurred, re-compressed...: both models see the changed images), each drift with its interval."""

from __future__ import annotations

import argparse
from pathlib import Path

from yolo_edge.bundle import load_bundle
from yolo_edge.cli.common import add_bundle_data, add_shards, print_json, table
from yolo_edge.flows.val import ValRequest, val_bundle
from yolo_edge.validate.accuracy import Interval, Kept, MapResult
from yolo_edge.validate.conditions import CONDITIONS, parse_conditions
from yolo_edge.validate.verdict import interval_text, kept_text


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("val", help="mAP and drift of a bundle", description=__doc__)
    p.add_argument("bundle", type=Path)
    add_bundle_data(p)
    add_shards(p)
    p.add_argument(
        "--conditions",
        default="",
        help=f"judge under these conditions too: comma-separated of {', '.join(CONDITIONS)}, or all",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    conditions = parse_conditions(args.conditions) if args.conditions else []  # before minutes of compiling
    bundle = load_bundle(args.bundle)
    request = ValRequest(args.data, args.class_map, conditions, args.shards, args.ray_address)
    v = val_bundle(bundle, request, quiet=args.json or args.quiet)
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
    if v.conditions:
        judged = [
            _row("as given", v.reference, v.deployed, v.drift_interval, v.kept),
            *(_row(n, c.reference, c.deployed, c.drift_interval, c.kept) for n, c in v.conditions.items()),
        ]
        print(f"\nunder conditions the calibration never saw ({what}50; boxes kept of the FP32 reference's there):")
        level = f" ({v.drift_interval.level:.0%} interval)" if v.drift_interval else ""
        print(table(("condition", "reference", "deployed", f"drift{level}", "boxes kept"), judged, whole=(3,)))
    if v.unjudged:
        print(f"not judged under {', '.join(v.unjudged)}: the FP32 reference detects nothing there (no labels)")
    return 0


def _row(
    name: str, reference: MapResult, deployed: MapResult, interval: Interval | None, kept: Kept | None
) -> tuple[str, ...]:
    drift = deployed.minus(reference).map50
    bounds = "" if interval is None else f" [{interval.lo.map50:+.4f}, {interval.hi.map50:+.4f}]"
    boxes = "" if kept is None else f"{kept} ({kept.kept / max(1, kept.of):.1%})"
    return name, f"{reference.map50:.4f}", f"{deployed.map50:.4f}", f"{drift:+.4f}{bounds}", boxes
