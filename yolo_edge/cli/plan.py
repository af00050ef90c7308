"""``yolo-edge plan``: place each subgraph on the NPU or the CPU by the four checks, and explain why."""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from yolo_edge.backends import require_usable, resolve_device
from yolo_edge.cli.common import add_device, add_imgsz, add_model, positive_int, print_json, table
from yolo_edge.config import load_deploy_config
from yolo_edge.export import export_model
from yolo_edge.pipeline.preprocess import default_calib_dir, load_calibration
from yolo_edge.plan.placement import PlacementPlan, plan_model
from yolo_edge.split import split_model


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="place subgraphs on NPU/CPU and explain each decision", description=__doc__)
    add_model(p)
    add_device(p)
    add_imgsz(p)
    p.add_argument(
        "--calib", type=Path, default=None, help="folder of calibration images (default: the shipped calib_data)"
    )
    p.add_argument(
        "--calib-images", type=positive_int, default=None, help="calibration images to use (default: config)"
    )
    p.add_argument("--config", type=Path, default=None, help="deploy config YAML (default: configs/default.yaml)")
    p.add_argument("--strict", action="store_true", help="fail (exit 1) instead of falling back to the CPU")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = load_deploy_config(args.config)
    if args.calib_images:
        cfg = replace(cfg, calib_images=args.calib_images)
    profile = resolve_device(args.device)
    require_usable(profile)
    with tempfile.TemporaryDirectory(prefix="yolo-edge-plan-") as tmp:
        split = split_model(export_model(args.model, imgsz=args.imgsz, out_dir=tmp))
        n = cfg.calib_images + cfg.checks.precision.images
        images = load_calibration(args.calib or default_calib_dir(), split.exported.meta.imgsz, n)
        log = None if args.json else (lambda msg: print(f"  .. {msg}", file=sys.stderr))
        plan = plan_model(split, profile, cfg, images, strict=args.strict, log=log)
    if args.json:
        print_json(plan.to_dict())
    else:
        print(format_plan(plan))
    return 0


def format_plan(plan: PlacementPlan) -> str:
    w = plan.whole_graph_npu
    at = f"{w.precision}" + (f"/{w.int8_scheme}" if w.int8_scheme else "")
    verdict = "PASS" if w.passed else f"FAIL ({w.failed_check})"
    lines = [
        f"device {plan.device} ({plan.device_kind}, latency {plan.latency_kind}), imgsz "
        f"{plan.imgsz[0]}x{plan.imgsz[1]}",
        f"whole graph on the NPU at {at}: {verdict}: {w.reason}",
        "",
    ]
    mark = {True: "pass", False: "FAIL", None: "-"}
    rows = [
        (
            s.name,
            s.device,
            s.variant,
            s.granularity,
            *(mark[s.checks[c].passed] for c in ("op_support", "memory", "precision", "performance")),
            f"{s.latency_ms:.2f}",
            f"{(s.transfer_bytes_in + s.transfer_bytes_out) / 1e6:.2f}",
        )
        for s in plan.subgraphs
    ]
    lines.append(
        table(
            (
                "subgraph",
                "device",
                "precision",
                "granularity",
                "ops",
                "memory",
                "precision",
                "perf",
                f"ms ({plan.latency_kind})",
                "xfer MB",
            ),
            rows,
        )
    )
    lines.append(
        f"\nestimated model latency {plan.estimated_ms:.2f} ms ({plan.latency_kind}), of which transfers "
        f"{plan.transfer_ms:.2f} ms\n"
    )
    for s in plan.subgraphs:
        lines.append(f"{s.name} -> {s.device} {s.variant}: {s.reason}")
        for name, c in s.checks.items():
            lines.append(f"    {name:12} {mark[c.passed]:5} {c.reason}")
    return "\n".join(lines)
