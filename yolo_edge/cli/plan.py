"""``yolo-edge plan``: the four checks over every precision variant of each subgraph, the candidate placements
they leave (fastest estimate first), and, with images to judge them on (``--data``, or the demo's own), the
search that judges them with the verdict; every decision explained. Writes no bundle."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from yolo_edge.cli.common import add_device, add_imgsz, add_model, add_trial_shards, positive_int, print_json, table
from yolo_edge.cli.deploy import deploy_request, search_table
from yolo_edge.core.config import load_deploy_config, load_profile
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import printable
from yolo_edge.core.progress import progress_bar
from yolo_edge.flows.deploy import search_plan
from yolo_edge.flows.report import search_dict, search_plot
from yolo_edge.flows.search import SearchRecord
from yolo_edge.plan.placement import PlacementPlan, PlanSpace
from yolo_edge.validate.verdict import Limits


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="place subgraphs on NPU/CPU and explain each decision", description=__doc__)
    add_model(p)
    add_device(p)
    add_imgsz(p)
    p.add_argument(
        "--data",
        default=None,
        help="images to judge the candidates on (as deploy's --data); without it, and for a model that is not the "
        "demo, only the four checks and the estimates are shown",
    )
    p.add_argument("--class-map", default=None, help="map the data set's classes to the model's (as deploy's)")
    p.add_argument(
        "--calib", type=Path, default=None, help="folder of calibration images (default: as deploy chooses them)"
    )
    p.add_argument(
        "--calib-images", type=positive_int, default=None, help="calibration images to use (default: config)"
    )
    p.add_argument("--config", type=Path, default=None, help="deploy config YAML (default: configs/default.yaml)")
    add_trial_shards(p)
    p.add_argument("--strict", action="store_true", help="fail (exit 1) instead of falling back to the CPU")
    p.add_argument("--plot", type=Path, default=None, help="write the judged candidates' latency-vs-drift PNG here")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = load_deploy_config(args.config)
    if args.calib_images:
        cfg = replace(cfg, calib_images=args.calib_images)
    say = (lambda _m: None) if args.json else (lambda msg: print(f"  .. {msg}", file=sys.stderr))
    found = search_plan(deploy_request(args, cfg), say, progress_bar(not args.json))
    plan, space, search = found.plan, found.space, found.search
    if found.warning is not None:
        print(f"yolo-edge plan: WARNING: {found.warning}", file=sys.stderr)
    limits = Limits(cfg.validate.max_drift, cfg.validate.sla_ms)
    if args.plot is not None and search is not None:
        args.plot.write_bytes(search_plot(search, limits))
    if args.json:
        doc = plan.to_dict()
        doc["search"] = None if search is None else search_dict(search, limits)
        doc["warning"] = found.warning
        doc["candidates"] = [{"placement": c.label, "estimated_ms": c.estimated_ms} for c in space.candidates()]
        doc["rejected"] = {
            n: [{"variant": r.variant.label, "reason": r.reason} for r in rs] for n, rs in space.rejected.items()
        }
        print_json(doc)
    else:
        print(format_plan(plan, space, search, limits))
    return 0


def _heading(plan: PlacementPlan, space: PlanSpace) -> list[str]:
    """The device, the whole-graph verdict and, for a model with random weights, what its figures cannot show."""
    w = plan.whole_graph_npu
    at = "-" if w.variant is None else w.variant.label
    verdict = "PASS" if w.passed else f"FAIL ({w.failed_check})"
    try:
        stand_in = load_profile(plan.device).stand_in
    except YoloEdgeError:  # a profile read from a YAML file elsewhere: its name alone does not find it
        stand_in = None
    lines = [
        f"device {plan.device} ({plan.device_kind}, latency {plan.latency_kind}), imgsz "
        f"{plan.imgsz[0]}x{plan.imgsz[1]}" + (f"; {stand_in}" if stand_in else ""),
        f"whole graph on the NPU at {at}: {verdict}: {w.reason}",
        "",
    ]
    meta = space.split.exported.meta
    if meta.random_weights:
        lines += [
            f"note: {printable(meta.source)} has random weights (built from its yaml): its cosines and class scores "
            "prove nothing about precision (random scores agree with random scores); plan trained weights (.pt) "
            "to judge it",
            "",
        ]
    return lines


def format_plan(
    plan: PlacementPlan, space: PlanSpace, search: SearchRecord | None = None, limits: Limits | None = None
) -> str:
    lines = _heading(plan, space)
    if search is not None:
        lines += [
            f"search: {search.candidates} candidates passed the four checks, {search.tally} "
            f"({search.stopped}); * chosen",
            search_table(search, "plan --json"),
            "",
            *([f"against the design card: {search.card_line()}", ""] if search.card_line() else []),
            *([f"against {line}", ""] if limits and (line := search.recipe_line(limits)) else []),
            *(line for u in (search.undecided_lines(limits) if limits else []) for line in (u, "")),
        ]
    else:
        shown = [(str(k + 1), c.label, f"{c.estimated_ms:.2f}") for k, c in enumerate(space.candidates()[:12])]
        lines += ["candidates, fastest estimate first (not judged):", table(("#", "placement", "est. ms"), shown), ""]
    mark = {True: "pass", False: "FAIL", None: "-"}
    rows = [
        (
            s.name,
            s.device,
            s.variant.label,
            s.granularity,
            *(mark[s.checks[c].passed] for c in ("op_support", "memory", "precision", "performance")),
            f"{s.latency_ms:.2f}",
            f"{(s.transfer_bytes_in + s.transfer_bytes_out) / 1e6:.2f}",
        )
        for s in plan.subgraphs
    ]
    header = ("subgraph", "device", "precision", "granularity", "ops", "memory", "precision", "perf")
    lines.append(table((*header, f"ms ({plan.latency_kind})", "xfer MB"), rows))
    lines.append(
        f"\nestimated model latency {plan.estimated_ms:.2f} ms ({plan.latency_kind}), of which transfers "
        f"{plan.transfer_ms:.2f} ms\n"
    )
    for s in plan.subgraphs:
        lines.append(
            f"{s.name} -> {s.device} {s.variant.label}: {s.reason}" + (f"; {s.kept_why}" if s.kept_why else "")
        )
        for name, c in s.checks.items():
            lines.append(f"    {name:12} {mark[c.passed]:5} {c.reason}")
        for r in space.rejected.get(s.name, ()):
            lines.append(f"    ruled out   {r.reason}")
    return "\n".join(lines)
