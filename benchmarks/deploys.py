"""The demo deployed to each profile as a user runs it: `yolo-edge deploy --device D` (the demo model, its 300
labelled val images, the shipped settings), then `yolo-edge val` of the bundle it wrote on the same images, one after
the other, each a fresh process. Prints, per profile, the three plans and the design card's layout (status, p95, how
the latency was obtained, drift), the split's phases, and the two wall times and their ratio (deploy's goal: at
most 2x one val, issue #58).

    YOLO_OFFLINE=1 python benchmarks/deploys.py [--device host-lowp rk3588 ...] [--model M] [--data D]

A simulated board's latency is the board's in every phase (the same on any host); a measured one is this host's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from yolo_edge.core.host import cpu_name


def _run(args: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    env = {**os.environ, "YOLO_OFFLINE": "1"}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "yolo_edge.cli.main", *args], capture_output=True, text=True, env=env)
    return time.perf_counter() - t0, done


def _drift(plan: dict[str, Any]) -> str:
    drift = plan.get("map_drift") or {}
    return f"{drift.get('map50', 0):+.4f} / {drift.get('map50_95', 0):+.4f}" if drift else "-"


def _p95(plan: dict[str, Any]) -> str:
    return f"{plan['latency_ms']['p95']:.2f}" if plan.get("latency_ms") else "-"


def report_rows(report: dict[str, Any]) -> list[str]:
    """The deploy's plans and the design card's layout as table rows, then the split's phases (p50 ms)."""
    rows = []
    for plan in report["plans"]:
        chosen = " (chosen)" if plan["name"] == report["chosen_plan"] else ""
        rows.append(
            f"| {plan['name']}{chosen} | {plan['status']} | {_p95(plan)} | {plan.get('latency_kind', '-')} "
            f"| {_drift(plan)} |"
        )
    search = report.get("search") or {}
    card = next((t for t in search.get("trials", []) if t["index"] == search.get("card_layout")), None)
    if card is not None:
        rows.append(
            f"| the design card's layout (head and decode FP32 on the CPU) | {card['status']} "
            f"| {card['p95_ms']:.2f} | {card['latency_kind']} | {_drift(card)} |"
        )
    split = next((p for p in report["plans"] if p["name"] == "split"), None)
    phases = (split or {}).get("latency", {}).get("phases", {})
    shown = ", ".join(f"{name} {p['p50']:.2f}" for name, p in phases.items())
    chosen = next((t for t in search.get("trials", []) if t["index"] == search.get("chosen")), {})
    subgraphs = (report.get("split_plan") or {}).get("subgraphs", [])
    planned = ", ".join(f"{s['name']}={s['device']}/{s['precision']}" for s in subgraphs)
    placement = chosen.get("placement") or (f"{planned} (the split plan: no candidate passed)" if planned else "")
    return [*rows, "", f"Split phases, p50 ms: {shown or '-'}.", f"Split placement: {placement or '-'}."]


def prefix_line(search: dict[str, Any]) -> str:
    """How much work a cache of unit outputs between trials could have shared (issue #58's third point): the judged
    candidates whose first unit (its graph and variant: report.json's ``units``) an earlier judged one ran, and
    whether the split and the design card's layout (each judged under every condition) begin with the same unit."""
    trials = search.get("trials", [])
    firsts = [t["units"][0] for t in trials if t.get("images") and t.get("units")]
    shared = sum(1 for k, first in enumerate(firsts) if first in firsts[:k])
    by_index = {t["index"]: t.get("units") or [""] for t in trials}
    chosen, card = by_index.get(search.get("chosen"), [""]), by_index.get(search.get("card_layout"), [""])
    pair = "the same" if chosen[0] and chosen[0] == card[0] else "different"
    return (
        f"Shared unit prefixes: {shared} of {len(firsts)} judged candidates begin with a unit an earlier judged one "
        f"ran; the split ({chosen[0] or '-'}) and the design card's layout ({card[0] or '-'}) begin with {pair} units."
    )


def work_line(report: dict[str, Any]) -> str:
    """The judging images deploy detects, by phase, against val's (the reference's and the bundle's on each image):
    what deploy must do beside its search, whatever its search does (latency frames not counted)."""
    n = report["data"]["images"]
    search = sum(t.get("images") or 0 for t in (report.get("search") or {}).get("trials", []))
    under = report.get("conditions") or {}
    conditions = sum(
        max(p["images"] for p in c.values()) + sum(p["images"] for p in c.values()) for c in under.values() if c
    )
    whole_npu = n if any(p["name"] == "whole-npu" and p.get("map_drift") for p in report["plans"]) else 0
    total = n + search + whole_npu + conditions
    return (
        f"Images detected: deploy {total} (the FP32 reference {n}, the search {search}, the whole-NPU plan "
        f"{whole_npu}, the {len(under)} conditions {conditions}: the reference and each plan judged under them), "
        f"val {2 * n} (the reference and the bundle): {total / (2 * n):.1f}x val's, the conditions alone "
        f"{conditions / (2 * n):.1f}x."
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", nargs="+", default=["host-lowp", "sim-edge-npu", "rk3588"])
    parser.add_argument("--model", help="default: the demo model")
    parser.add_argument("--data", help="default: the demo's labelled val images")
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores\n")
    summary, code = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for device in args.device:
            bundle = Path(tmp) / device
            extra = [*(["--model", args.model] if args.model else []), *(["--data", args.data] if args.data else [])]
            deploy_s, done = _run(["deploy", "--device", device, "--out", str(bundle), "--quiet", *extra])
            if not (bundle / "report.json").is_file():
                print(
                    f"### {device}\n\ndeploy wrote no bundle (exit {done.returncode}): {done.stderr.strip()[-300:]}\n"
                )
                code = 1
                continue
            val_s, checked = _run(["val", str(bundle), "--quiet", *(["--data", args.data] if args.data else [])])
            report = json.loads((bundle / "report.json").read_text())
            print(f"### {device} (deploy exit {done.returncode}, val exit {checked.returncode})\n")
            print("| plan | status | p95 ms | latency | drift mAP50 / mAP50-95 |")
            print("|---|---|---|---|---|")
            print("\n".join(report_rows(report)))
            search = report.get("search") or {}
            trials = search.get("trials", [])
            judged = [t for t in trials if t.get("images")]
            scored = sum(t["images"] for t in judged)
            n = report["data"]["images"]
            laps = ", ".join(f"{k} {v:.1f}" for k, v in (report.get("timings_s") or {}).items())
            print(f"Deploy phases, s: {laps or '-'} (then the bundle).")
            print(
                f"Search: {len(trials)} candidates timed, {len(judged)} judged on {scored} judging images in all "
                f"({len(judged)} x {n} = {len(judged) * n} judged on every image); {search.get('stopped', '')}.\n"
            )
            print(prefix_line(search))
            print(work_line(report) + "\n")
            ratio = deploy_s / val_s if val_s > 0 else float("inf")
            summary.append(
                f"| {device} | {deploy_s:.0f} | {val_s:.0f} | {ratio:.1f}x | {'met' if ratio <= 2 else 'not met'} |"
            )
    print("Wall times, one after the other (seconds; the goal of issue #58: deploy <= 2x one val):\n")
    print("| profile | deploy s | val s | deploy / val | goal |")
    print("|---|---|---|---|---|")
    print("\n".join(summary))
    return code


if __name__ == "__main__":
    import results_page

    with results_page.page("deploys", "The demo deployed to each profile"):
        code = main()
    raise SystemExit(code)
