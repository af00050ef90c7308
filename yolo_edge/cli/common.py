"""Helpers shared by the subcommands: argument types and plain-text tables."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from yolo_edge.export import ImgSize, parse_imgsz


def imgsz_arg(value: str) -> ImgSize:
    """argparse type for --imgsz: ``640`` or ``384,640`` (height,width)."""
    return parse_imgsz(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned text table; numbers are right-aligned."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [all(_is_number(r[i]) for r in cells[1:]) and len(cells) > 1 for i in range(len(headers))]

    def fmt(row: list[str]) -> str:
        return "  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(row, widths, numeric)).rstrip()

    lines = [fmt(cells[0]), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in cells[1:]]
    return "\n".join(lines)


def _is_number(s: str) -> bool:
    try:
        float(s.replace(",", ""))
    except ValueError:
        return False
    return True


def placement_line(plan: dict[str, Any]) -> str:
    """``backbone=npu/int8/u8, neck=npu/bf16, head=cpu/fp32, ...`` from a plan's JSON."""
    return ", ".join(f"{s['name']}={s['device']}/{s['precision']}" + (f"/{s['int8_scheme']}" if s.get("int8_scheme") else "")
                     for s in plan["subgraphs"])


def mb(n_bytes: int) -> str:
    return f"{n_bytes / 1e6:.2f}"


def print_json(obj: object) -> None:
    print(json.dumps(obj, indent=2))
