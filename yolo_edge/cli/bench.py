"""``yolo-edge bench BUNDLE``: end-to-end and per-phase latency (p50/p95/p99) of a bundle."""

from __future__ import annotations

import argparse
from pathlib import Path

from yolo_edge.cli.common import add_bundle_data, add_runs, print_json, table, warn_placement
from yolo_edge.core.progress import progress_bar
from yolo_edge.flows.val import bench_bundle


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="latency of a bundle", description=__doc__)
    p.add_argument("bundle", type=Path)
    add_bundle_data(p, class_map=False)
    add_runs(p)
    p.add_argument("--json", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = bench_bundle(args.bundle, args.data, args.runs, progress_bar(not (args.json or args.quiet)))
    warn_placement(result.placement_problems, "bench")
    if args.json:
        print_json(result.to_dict())
        return 0
    lat, spread = result.latency, result.spread
    rows = [(name, p.p50, p.p95, p.p99) for name, p in lat.phases.items()]
    rows.append(("end to end", lat.end_to_end.p50, lat.end_to_end.p95, lat.end_to_end.p99))
    print(table(("phase", "p50 ms", "p95 ms", "p99 ms"), rows))
    print(
        f"{lat.runs} runs, latency {lat.kind}, {lat.npu_share:.0%} of phase runs on the NPU, peak RSS "
        f"{lat.peak_rss_bytes / 2**20:.0f} MiB"
    )
    if spread is not None:
        print(f"timed in turn with the FP32 reference: {spread.text()}")
    return 0
