"""The demo sweep on 1 and on 2 local Ray workers: wall time and its ratio, and what starting Ray costs.

    YOLO_OFFLINE=1 python benchmarks/sweep_workers.py [--imgsz 320 416] [--device sim-edge-npu rk3588-approx]

The grid is the demo model at each imgsz on each simulated board (their latency is modelled, so each
configuration takes one CPU and two run side by side; a measured profile would hold the whole node). Each run
starts its own local Ray (included in its wall time, and measured alone first), with no outcome cache, on the
small settings the tests use (12 calibration images, 12 timed frames) and the shipped calibration images 40-55 as
agreement data. Prints the host CPU: the ratio depends on its cores.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import yaml

from yolo_edge.core.cluster import ray_session
from yolo_edge.core.config import configs_dir
from yolo_edge.core.host import cpu_name
from yolo_edge.flows.sweep import SweepRequest, sweep
from yolo_edge.model.meta import demo_model_path
from yolo_edge.pipeline.preprocess import default_calib_dir


def small_settings(folder: Path) -> tuple[Path, Path]:
    cfg = yaml.safe_load((configs_dir() / "default.yaml").read_text())
    cfg["calib_images"] = 12
    cfg["checks"]["precision"]["images"] = 4
    cfg["checks"]["performance"].update(warmup=1, runs=3)
    cfg["validate"].update(latency_warmup=2, latency_runs=12)
    (folder / "small.yaml").write_text(yaml.safe_dump(cfg))
    images = folder / "images"
    images.mkdir()
    for p in sorted(default_calib_dir().glob("*.jpg"))[40:56]:
        shutil.copy(p, images)
    return folder / "small.yaml", images


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--imgsz", nargs="+", type=int, default=[320, 416])
    ap.add_argument("--device", nargs="+", default=["sim-edge-npu", "rk3588-approx"])
    args = ap.parse_args()
    print(f"host_cpu: {cpu_name()}")
    t = time.perf_counter()
    with ray_session(None, 2):
        started = time.perf_counter() - t
    print(f"local Ray start + shutdown: {started:.1f} s")
    with tempfile.TemporaryDirectory() as tmp:
        cfg, images = small_settings(Path(tmp))
        walls = {}
        for workers in (1, 2):
            t = time.perf_counter()
            grid = SweepRequest([str(demo_model_path())], args.imgsz, args.device, data=images, config=cfg, cache="")
            result = sweep(grid, workers=workers, log=lambda _m: None)
            walls[workers] = time.perf_counter() - t
            print(
                f"{workers} worker(s): {walls[workers]:.1f} s for {len(result.outcomes)} configurations, "
                f"best {result.best.point.label if result.best else None}"
            )
    print(f"| workers | wall s |\n|---|---|\n| 1 | {walls[1]:.1f} |\n| 2 | {walls[2]:.1f} |")
    print(f"speed-up 2 vs 1 workers: {walls[1] / walls[2]:.2f}x")


if __name__ == "__main__":
    import results_page

    with results_page.page("sweep-workers", "The sweep on 1 and 2 local Ray workers"):
        main()
