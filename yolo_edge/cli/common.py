"""Helpers shared by the subcommands: argument types and plain-text tables.

Argument types raise ``argparse.ArgumentTypeError``, never a library error, so a bad value ends as
argparse's one-line ``error: argument --x: ...`` with exit code 2 (see ``cli.main.Parser``).
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import textwrap
from collections.abc import Sequence

from yolo_edge.core.cluster import gcs_endpoint
from yolo_edge.core.codec import dumps
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import printable
from yolo_edge.model.meta import ImgSize, parse_imgsz
from yolo_edge.plan.placement import PlacementPlan


def imgsz_arg(value: str) -> ImgSize:
    """argparse type for --imgsz: ``640`` or ``384,640`` (height,width)."""
    try:
        return parse_imgsz(value)
    except YoloEdgeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _number(value: str, kind: type[int] | type[float]) -> float:
    try:
        number = kind(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not {'an integer' if kind is int else 'a number'}") from None
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"'{value}' is not a finite number")
    return number


def positive_int(value: str) -> int:
    """argparse type: an integer > 0 (frames, runs, images)."""
    number = int(_number(value, int))
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return number


def ray_address(value: str) -> str:
    """argparse type: a Ray cluster's ``host:port`` (or ``ray://host:port``, ``auto``)."""
    try:
        gcs_endpoint(value)
    except YoloEdgeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def positive_float(value: str) -> float:
    """argparse type: a number > 0 (an SLA in ms)."""
    number = _number(value, float)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {value}")
    return number


def fraction(value: str) -> float:
    """argparse type: a number >= 0 (a drift limit, a regression allowance)."""
    number = _number(value, float)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be zero or positive, got {value}")
    return number


# ---------------------------------------------------------------- options shared by several subcommands

MODEL_HELP = ".pt checkpoint, ultralytics model .yaml (random weights), or an ONNX exported by ultralytics"


def add_model(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument(
        "--model",
        required=required,
        default=None,
        help=MODEL_HELP + ("" if required else "; default: the shipped demo model (YOLOv8n, 6 shape classes)"),
    )


def add_imgsz(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--imgsz",
        type=imgsz_arg,
        default=None,
        help="640 or H,W: multiples of 32, at most 4096 (default 640, the demo 320; an ONNX keeps its own)",
    )


def add_device(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", help="device profile name or .yaml (yolo-edge devices); default auto")


def add_bundle_data(p: argparse.ArgumentParser, class_map: bool = True) -> None:
    """--data (and --class-map) of the subcommands that re-measure a bundle."""
    p.add_argument(
        "--data",
        default=None,
        help="data.yaml, COCO JSON or a folder of images (default: the data the bundle was deployed with)",
    )
    if class_map:
        p.add_argument("--class-map", default=None, help="with --data: DATA=MODEL,... (see yolo-edge deploy --help)")


def add_shards(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--shards",
        type=positive_int,
        default=None,
        help="score the images in N shards on a local Ray (at most one per CPU)",
    )
    what = "score them on this Ray cluster, host:port (one shard per CPU)"
    p.add_argument("--ray-address", type=ray_address, default=None, help=what)


def add_trial_shards(p: argparse.ArgumentParser) -> None:
    """deploy's and plan's: the search's judging images detected on Ray, as val's --shards score a bundle's."""
    p.add_argument(
        "--shards",
        type=positive_int,
        default=None,
        help="judge the search's trials on their images in N shards on a local Ray (at most one per CPU; each trial "
        "is still timed here, beside the reference)",
    )
    what = "judge the trials' images on this Ray cluster, host:port (one shard per CPU)"
    p.add_argument("--ray-address", type=ray_address, default=None, help=what)


def add_runs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", type=positive_int, default=None, help="timed frames (default: the bundle's deploy config)")


def table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], width: int | None = None, whole: Sequence[int] = ()
) -> str:
    """Left-aligned text table; numbers are right-aligned. A table wider than ``width`` (default: the terminal's,
    100 when it is not one) has its widest text columns (but those in ``whole``) wrapped, at word boundaries,
    until it fits (no column narrower than :data:`NARROWEST`): every cell whole, on as many lines as it needs."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [all(_is_number(r[i]) for r in cells[1:]) and len(cells) > 1 for i in range(len(headers))]
    limit = width or shutil.get_terminal_size((100, 24)).columns
    # a column wraps at word boundaries only, never inside a word ("2188/2227" is not "2188/222" then "7")
    floors = [max(NARROWEST, *(len(word) for r in cells for word in r[i].split())) for i in range(len(headers))]
    while sum(widths) + 2 * (len(widths) - 1) > limit:
        text = [i for i, w in enumerate(widths) if not numeric[i] and w > floors[i] and i not in whole]
        if not text:
            break
        widths[max(text, key=widths.__getitem__)] -= 1  # the widest first, a character at a time

    def fmt(row: list[str]) -> str:
        wrap = [textwrap.wrap(c, w, break_long_words=False, break_on_hyphens=False) for c, w in zip(row, widths)]
        parts = [lines or [""] if len(c) > w else [c] for c, w, lines in zip(row, widths, wrap)]
        lines = []
        for k in range(max(len(p) for p in parts)):
            line = [p[k] if k < len(p) else "" for p in parts]
            lines.append("  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(line, widths, numeric)))
        return "\n".join(line.rstrip() for line in lines)

    lines = [fmt(cells[0]), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in cells[1:]]
    return "\n".join(lines)


NARROWEST = 8  # a text column is wrapped no narrower than this


def _is_number(s: str) -> bool:
    try:
        float(s.replace(",", ""))
    except ValueError:
        return False
    return True


def placement_line(plan: PlacementPlan) -> str:
    """``backbone=npu/int8/u8/nncf, neck=npu/bf16, head=cpu/fp32, ...``."""
    return plan.label


def warn_placement(problems: Sequence[str], command: str) -> None:
    """Say loudly, on stderr, that a bundle is not running the placement deploy proved."""
    for line in problems:
        print(
            f"yolo-edge {command}: WARNING: {printable(line, 1000)}; the unit runs on the CPU instead: this is not "
            "the deployment "
            "that was proven (yolo-edge check fails on it)",
            file=sys.stderr,
        )


def mb(n_bytes: int) -> str:
    return f"{n_bytes / 1e6:.2f}"


def print_json(obj: object) -> None:
    print(dumps(obj))
