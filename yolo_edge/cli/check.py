"""``yolo-edge check BUNDLE``: the regression gate for CI. Re-measures drift and latency; exit 1 with one
line per broken limit (drift over the limit, p95 over the SLA, p95 over the baseline by more than 10 %);
exit 4 when nothing failed but a verdict was within the noise (a drift interval across the limit, or a
measured p95 across the SLA or over it on a busy machine, after timing it twice): undecided, neither passed
nor failed. CI can retry on 4 or treat it as a failure."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from yolo_edge.cli.common import add_bundle_data, add_runs, add_shards, fraction, positive_float, print_json
from yolo_edge.core.files import check_can_write
from yolo_edge.flows.gate import GateRequest, check_bundle, write_baseline
from yolo_edge.validate.verdict import UNDECIDED_EXIT, interval_text, kept_text


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="regression gate: drift, SLA and baseline", description=__doc__)
    p.add_argument("bundle", type=Path)
    p.add_argument("--baseline", type=Path, default=None, help="a baseline JSON written by --write-baseline")
    p.add_argument("--write-baseline", type=Path, default=None, help="record the measured p95 and drift here")
    p.add_argument("--max-drift", type=fraction, default=None, help="default: the bundle's deploy config (0.01)")
    p.add_argument("--sla-ms", type=positive_float, default=None, help="default: the bundle's SLA")
    p.add_argument("--max-regression", type=fraction, default=None, help="default: the bundle's deploy config (0.10)")
    add_bundle_data(p)
    add_shards(p)
    add_runs(p)
    p.add_argument("--json", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.write_baseline:
        check_can_write(args.write_baseline, "--write-baseline")
    request = GateRequest(
        baseline=args.baseline,
        max_drift=args.max_drift,
        sla_ms=args.sla_ms,
        max_regression=args.max_regression,
        data=args.data,
        class_map=args.class_map,
        runs=args.runs,
        shards=args.shards,
        ray_address=args.ray_address,
    )
    result = check_bundle(args.bundle, request, quiet=args.quiet or args.json)
    if args.write_baseline:
        write_baseline(result, args.write_baseline)
        if result.spread is not None and not result.spread.quiet:
            print(
                f"yolo-edge check: the baseline's latency was timed on a busy machine ({result.spread.text()}): "
                "record it again where nothing else runs",
                file=sys.stderr,
            )
    if args.json:
        print_json(result.to_dict())
    else:
        v = result.val
        what = "mAP" if v.kind == "labels" else "agreement"
        print(
            f"p95 {result.p95_ms:.2f} ms ({result.latency.kind}), "
            f"drift {what}50 {v.drift.map50:+.4f}, {what}50-95 {v.drift.map50_95:+.4f} "
            f"({interval_text(v.drift_interval) if v.drift_interval else f'{v.images} images'})"
            + (f"; {kept_text(v.kept)}" if v.kept else "")
            + f": status {result.status}: "
            + ("PASS" if result.passed else "UNDECIDED" if result.undecided else "FAIL")
        )
        if result.spread is not None:
            print(f"latency measured: {result.spread.text()}")
    for line in result.failures:
        print(f"yolo-edge check: {line}", file=sys.stderr)
    return 0 if result.passed else UNDECIDED_EXIT if result.undecided else 1
