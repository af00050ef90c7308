"""``yolo-edge devices``: the device profiles, and which of them can run on this machine (and why not)."""

from __future__ import annotations

import argparse
from typing import Any

from yolo_edge.backends import AUTO_ORDER, device_status, resolve_device
from yolo_edge.cli.common import print_json, table
from yolo_edge.core.config import load_profile, profile_names
from yolo_edge.core.errors import YoloEdgeError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("devices", help="list device profiles and whether they are usable here", description=__doc__)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def _precisions(listed: list[str], usable: list[str]) -> str:
    """``int8,fp16(no)``: the profile's precisions, marking those this host cannot compute."""
    return ",".join(p if p in usable else f"{p}(no)" for p in listed)


def run(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    for name in profile_names():
        profile = load_profile(name)
        ok, why, usable = device_status(profile)
        rows.append(
            {
                "name": name,
                "kind": profile.kind,
                "runtime": profile.runtime,
                "precisions": list(profile.precisions),
                "usable_precisions": list(usable),
                "latency": profile.latency,
                "usable": ok,
                "why": why,
                "description": profile.description,
            }
        )
    try:
        auto = resolve_device("auto").name
    except YoloEdgeError as exc:
        auto = f"none ({exc})"
    if args.json:
        print_json({"devices": rows, "auto": auto})
        return 0
    print(
        table(
            ("device", "kind", "runtime", "precisions here", "latency", "usable here"),
            [
                (
                    r["name"],
                    r["kind"],
                    r["runtime"],
                    _precisions(r["precisions"], r["usable_precisions"]),
                    r["latency"],
                    f"yes: {r['why']}" if r["usable"] else f"no: {r['why']}",
                )
                for r in rows
            ],
        )
    )
    print(f"\nauto -> {auto}   (first usable of {', '.join(AUTO_ORDER)})")
    return 0
