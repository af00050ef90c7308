"""The decode subgraph before and after the DFL-softmax rewrite (``yolo_edge/model/rewrite.py``), onnxruntime on
the CPU, frames interleaved; prints the CPU, both medians, the ratio and the largest output difference.

    YOLO_OFFLINE=1 python benchmarks/dfl_rewrite.py [--imgsz 320 640] [--runs 200]
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from yolo_edge.backends import cpu_backend
from yolo_edge.core.host import cpu_name
from yolo_edge.model.export import export_model
from yolo_edge.model.meta import demo_model_path
from yolo_edge.model.split import split_model
from yolo_edge.pipeline.preprocess import default_calib_dir, load_calibration
from yolo_edge.plan.placement import boundary_tensors


def measure(imgsz: int, runs: int) -> None:
    from ultralytics import YOLO
    from ultralytics.utils import LOGGER

    LOGGER.setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        with contextlib.chdir(tmp):  # ultralytics writes beside the weights: export a copy
            copy = Path(tmp, "demo.pt")
            copy.write_bytes(demo_model_path().read_bytes())
            original = Path(YOLO(str(copy)).export(format="onnx", imgsz=imgsz, simplify=True, opset=17))
        before = split_model(export_model(original))  # as ultralytics wrote it
        after = split_model(export_model(original, out_dir=Path(tmp, "rewritten")))  # with the rewrite
        feeds = boundary_tensors(before, load_calibration(default_calib_dir(), (imgsz, imgsz), 8))
        cpu = cpu_backend()
        exes = {
            "ultralytics": cpu.compile(before["decode"].model, "fp32"),
            "rewritten": cpu.compile(after["decode"].model, "fp32"),
        }
        ms: dict[str, list[float]] = {k: [] for k in exes}
        diff = 0.0
        for i in range(runs):
            f = feeds[i % len(feeds)]
            outs = {}
            for name in list(exes) if i % 2 else list(exes)[::-1]:
                t0 = time.perf_counter()
                outs[name] = exes[name].run(f)["output0"]
                ms[name].append((time.perf_counter() - t0) * 1e3)
            diff = max(diff, float(np.abs(outs["ultralytics"] - outs["rewritten"]).max()))
        a, b = statistics.median(ms["ultralytics"]), statistics.median(ms["rewritten"])
        print(f"{imgsz:>5} {a:12.2f} {b:10.2f} {a / b:7.1f}x   max |diff| {diff:.2e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--imgsz", type=int, nargs="+", default=[320, 640])
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args()
    print(f"CPU: {cpu_name()}\ndemo decode subgraph, onnxruntime CPU, median ms over {args.runs} interleaved runs")
    print(f"{'imgsz':>5} {'ultralytics':>12} {'rewritten':>10} {'ratio':>8}")
    for imgsz in args.imgsz:
        measure(imgsz, args.runs)


if __name__ == "__main__":
    import results_page

    with results_page.page("dfl-rewrite", "The DFL rewrite: exact, and how much faster"):
        main()
