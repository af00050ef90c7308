"""The memory check's estimate against the measured peak (issue 68): the demo (320) and YOLOv8n (640, from its yaml:
memory needs no trained numbers) exported by ultralytics at batch B in {1, 2, 4, 8, 16, 32}, each run once in a fresh
process on onnxruntime and on OpenVINO (CPU, FP32).

* measured: the process's peak resident memory (``VmHWM``, reset through ``/proc/self/clear_refs`` once the runtime
  is imported and the input made) less its resident memory then: the model read, the session compiled, one batch run;
* estimated: ``devices.limits.memory_use`` of the **batch-1** graph held at batch B (``Residency(B)``), FP32: the
  weights once (one session) plus B frames' liveness peak, what the planner counts.

Prints each ratio (measured / estimated) and whether every one is within +-15 % (the issue's goal), per runtime.

    YOLO_OFFLINE=1 python benchmarks/memory_estimate.py [--batches 1 2 4 8 16 32] [--runtime onnxruntime openvino]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx

from yolo_edge.core.host import cpu_name
from yolo_edge.devices.limits import Residency, memory_use
from yolo_edge.model.graph import GraphInfo
from yolo_edge.model.meta import demo_model_path

GOAL = 0.15
CHILD = r"""
import json, sys
import numpy as np

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024

runtime, path, batch, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if runtime == "onnxruntime":
    import onnxruntime as ort
else:
    import openvino as ov
x = np.random.default_rng(0).random((batch, 3, size, size), dtype=np.float32)
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak from here
if runtime == "onnxruntime":
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    session.run(None, {session.get_inputs()[0].name: x})
else:
    compiled = ov.Core().compile_model(path, "CPU")
    compiled.create_infer_request().infer([x])
print(json.dumps({"delta": status("VmHWM") - before}))
"""


def export(model: str, size: int, batch: int, folder: Path) -> Path:
    """``model`` exported by ultralytics to ONNX at ``size`` and ``batch`` (static), in a process of its own."""
    out = folder / f"{Path(model).stem}-{size}-b{batch}.onnx"
    code = (
        "import shutil, sys\nfrom ultralytics import YOLO\n"
        f"p = YOLO({model!r}).export(format='onnx', imgsz={size}, batch={batch}, simplify=True, dynamic=False)\n"
        f"shutil.move(p, {str(out)!r})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, cwd=folder)
    return out


def measured(runtime: str, path: Path, batch: int, size: int) -> int:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, runtime, str(path), str(batch), str(size)], check=True, capture_output=True
    )
    return int(json.loads(done.stdout.decode().strip().splitlines()[-1])["delta"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--runtime", nargs="+", default=["onnxruntime", "openvino"])
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores\n")
    models = [(str(demo_model_path()), 320), ("yolov8n.yaml", 640)]
    met: dict[str, list[bool]] = {r: [] for r in args.runtime}
    with tempfile.TemporaryDirectory() as tmp:
        print("| model | batch | estimated MiB | " + " | ".join(f"{r} MiB (ratio)" for r in args.runtime) + " |")
        print("|---|---|---|" + "---|" * len(args.runtime))
        for model, size in models:
            one = GraphInfo.of(onnx.load(export(model, size, 1, Path(tmp))))
            for b in args.batches:
                path = export(model, size, b, Path(tmp)) if b > 1 else Path(tmp) / f"{Path(model).stem}-{size}-b1.onnx"
                estimate = memory_use(one, "fp32", residency=Residency(b)).dram_bytes
                cells = []
                for runtime in args.runtime:
                    got = measured(runtime, path, b, size)
                    met[runtime].append(abs(got / estimate - 1) <= GOAL)
                    cells.append(f"{got / 2**20:.1f} ({got / estimate:.2f})")
                print(f"| {Path(model).name}@{size} | {b} | {estimate / 2**20:.1f} | " + " | ".join(cells) + " |")
    print()
    for runtime, within in met.items():
        verdict = "met" if all(within) else "not met"
        print(f"- {runtime}: {sum(within)} of {len(within)} within +-{GOAL:.0%} of the estimate: {verdict}")
    return 0


if __name__ == "__main__":
    import results_page

    with results_page.page("memory-estimate", "The memory check's estimate against the measured peak"):
        code = main()
    raise SystemExit(code)
