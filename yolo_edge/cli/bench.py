"""``yolo-edge bench BUNDLE``: end-to-end and per-phase latency (p50/p95/p99) of a bundle."""

from __future__ import annotations

import argparse
from pathlib import Path

from yolo_edge.cli.common import add_bundle_data, add_runs, print_json, table, warn_placement
from yolo_edge.core.progress import progress_bar
from yolo_edge.flows.val import StreamsBench, bench_bundle, bench_streams, check_streams


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="latency of a bundle", description=__doc__)
    p.add_argument("bundle", type=Path)
    add_bundle_data(p, class_map=False)
    add_runs(p)
    p.add_argument(
        "--streams",
        type=int,
        default=None,
        help="also run the bundle's stream engine on N streams of the frames, against one: every frame delivered, the "
        "aggregate FPS measured here",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.streams is not None:
        check_streams(args.streams)
    result = bench_bundle(args.bundle, args.data, args.runs, progress_bar(not (args.json or args.quiet)))
    warn_placement(result.placement_problems, "bench")
    streams = None if args.streams is None else bench_streams(args.bundle, args.data, args.streams, args.runs)
    if args.json:
        print_json({**result.to_dict(), "streams": None if streams is None else streams.to_dict()})
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
    if streams is not None:
        print(streams_line(streams))
    return 0


def streams_line(s: StreamsBench) -> str:
    """``4 streams of 100 frames: 52.1 FPS in all, one stream 30.3 FPS (x1.72), measured here ...``."""
    return (
        f"{s.streams} streams of {s.frames} frames: {s.aggregate_fps:.1f} FPS in all, one stream "
        f"{s.one_stream_fps:.1f} FPS (x{s.ratio:.2f}), measured here through run's pipeline, every frame delivered"
    )
