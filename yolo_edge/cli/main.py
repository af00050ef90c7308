"""Entry point of the ``yolo-edge`` console script."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from yolo_edge import __version__
from yolo_edge.cli import bench, check, deploy, devices, export, plan, run, split, val
from yolo_edge.errors import YoloEdgeError

SUBCOMMANDS = (export, split, plan, deploy, run, val, bench, check, devices)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="yolo-edge", description="Split, place, run and prove YOLOv8 on edge NPU + CPU.")
    parser.add_argument("--version", action="version", version=f"yolo-edge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except YoloEdgeError as exc:
        print(f"yolo-edge {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
