"""``yolo-edge events LOG [LOG ...]``: the fallback log of one run or many (``run --events``) read back: each
trigger's rate per 1,000 frames, the causes by unit, each unit's time on the CPU, its time before and after each
move, the precision audits, and what that says to recompile; ``--json``, ``--plot PNG``."""

from __future__ import annotations

import argparse
from pathlib import Path

from yolo_edge.cli.common import print_json
from yolo_edge.core.files import atomic_write, check_can_write
from yolo_edge.flows.events import analyse, figure, lines, read_logs
from yolo_edge.flows.plots import png


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("events", help="read fallback event logs back", description=__doc__)
    p.add_argument("logs", type=Path, nargs="+", metavar="LOG", help="JSONL files that `run --events` wrote")
    p.add_argument("--json", action="store_true")
    p.add_argument("--plot", type=Path, default=None, help="events per 1,000 frames by trigger and unit, as a PNG")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.plot is not None:
        check_can_write(args.plot, "--plot")
    report = analyse(read_logs(args.logs))
    if args.plot is not None:
        atomic_write(args.plot, png(figure(report)))
    if args.json:
        print_json(report.to_dict())
    else:
        print("\n".join(lines(report)))
    return 0
