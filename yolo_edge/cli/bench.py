"""``yolo-edge bench BUNDLE``: end-to-end and per-phase latency (p50/p95/p99) of a bundle."""

from __future__ import annotations

import argparse
from pathlib import Path

from yolo_edge.bundle import load_bundle
from yolo_edge.cli.common import add_bundle_data, add_runs, print_json, table, warn_placement
from yolo_edge.core.progress import progress_bar
from yolo_edge.flows.val import bench_spread, bundle_eval_data
from yolo_edge.runtime.executor import EventLog


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="latency of a bundle", description=__doc__)
    p.add_argument("bundle", type=Path)
    add_bundle_data(p, class_map=False)
    add_runs(p)
    p.add_argument("--json", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    events = EventLog()
    bundle = load_bundle(args.bundle)
    with bundle.detector(events) as detector:
        problems = detector.executor.placement_problems
        warn_placement(problems, "bench")
        ev = bundle_eval_data(bundle, args.data)
        lat, spread = bench_spread(
            bundle, ev, args.runs, detector, lambda _s: True, progress_bar(not (args.json or args.quiet))
        )
    if args.json:
        print_json(
            {
                **lat.to_dict(),
                "spread": None if spread is None else spread.to_dict(),
                "fallback_events": events.summary().to_dict(),
                "placement_problems": problems,
            }
        )
        return 0
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
