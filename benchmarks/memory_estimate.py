"""The memory check's estimate against the measured peak (issue 68): the demo (320) and YOLOv8n (640, from its yaml:
memory needs no trained numbers) exported by ultralytics at batch B in {1, 2, 4, 8, 16, 32}, each run once in a fresh
process on onnxruntime and on OpenVINO (CPU, FP32).

* measured: the process's peak resident memory (``VmHWM``, reset through ``/proc/self/clear_refs`` once the runtime
  is imported and the input made) less its resident memory then: the model read, the session compiled, one batch run;
* estimated: ``devices.limits.memory_use`` of the **batch-1** graph held at batch B (``Residency(B)``) by the runtime's
  ``Backend.memory`` (its own memory and its activations' multiple, a ``RuntimeMemory``), FP32: what the planner counts.

The runtime's two figures are fitted here on the demo's rows (least squares of the measured less the weights on B
frames' liveness peak; a multiple below 1 is held at 1: a runtime holds at least the live tensors) and printed beside
the ones the backend ships; YOLOv8n@640's rows are the check on figures the fit never saw. Prints each ratio
(measured / estimated), the liveness count alone beside it, and whether every row is within +-15 % (the goal).

``--runtime rknn``: no board here to measure, so the estimate for ``rk3588`` (INT8 w8a8, one context, as
:class:`~yolo_edge.backends.rknn.backend.RknnBackend` counts it) is set against the memory report Rockchip
published for a model of its own examples: MobileNetV2 (shicai/MobileNet-Caffe, 224) on an RK3588,
``rknn.eval_memory()`` in ``rockchip-linux/rknn-toolkit2`` ``examples/functions/board_test/README.md`` (weights
3.53 MiB, internal tensors 1.67 MiB, 5.58 MiB in all). The graph here is torchvision's MobileNetV2 (the same
architecture: 3.50 M parameters against the Caffe model's 3.47 M; random weights, which memory does not read),
exported by ``torch.onnx``. Goal: each figure within 1.5x of the report's.

    YOLO_OFFLINE=1 python benchmarks/memory_estimate.py [--batches 1 2 4 8 16 32] [--runtime onnxruntime openvino]
    YOLO_OFFLINE=1 python benchmarks/memory_estimate.py --runtime rknn
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx

from yolo_edge.backends.onnxruntime.backend import OnnxRuntimeBackend
from yolo_edge.backends.openvino.backend import OpenVinoBackend
from yolo_edge.backends.rknn.backend import RknnBackend
from yolo_edge.core.host import cpu_name
from yolo_edge.devices.limits import MemoryUse, Residency, RuntimeMemory, memory_use
from yolo_edge.model.graph import GraphInfo
from yolo_edge.model.meta import demo_model_path

GOAL = 0.15
RKNN_GOAL = 1.5  # within 1.5x of a published RKNN memory report
# rockchip-linux/rknn-toolkit2, examples/functions/board_test/README.md: MobileNetV2 on an RK3588, eval_memory(), MiB
RKNN_REPORT = {"weights": 3.53, "internal tensors": 1.67, "total": 5.58}
RUNTIMES: dict[str, RuntimeMemory] = {"onnxruntime": OnnxRuntimeBackend.memory, "openvino": OpenVinoBackend.memory}
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


def fit(rows: list[tuple[int, MemoryUse, int]]) -> tuple[float, float]:
    """The runtime's own MiB and activations' multiple that best explain ``rows`` (batch, liveness count of the
    batch-1 graph, measured bytes): least squares, the multiple held at 1 where it would be below."""
    weights = np.array([u.weight_bytes for _, u, _ in rows], float)
    frames = np.array([b * u.peak_activation_bytes for b, u, _ in rows], float)
    y = np.array([got for _, _, got in rows], float) - weights
    (own, factor), *_ = np.linalg.lstsq(np.stack([np.ones_like(frames), frames], 1), y, rcond=None)
    if factor < 1.0:
        factor, own = 1.0, float(np.mean(y - frames))
    return float(own) / 2**20, float(factor)


def rknn_report() -> None:
    """The rk3588 estimate of MobileNetV2 at 224 against Rockchip's published ``eval_memory`` report: each figure
    within :data:`RKNN_GOAL`."""
    import io
    import warnings

    import torch
    import torchvision

    net = torchvision.models.mobilenet_v2(weights=None).eval()
    buf = io.BytesIO()
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # the TorchScript exporter: a plain static graph
    torch.onnx.export(net, torch.zeros(1, 3, 224, 224), buf, opset_version=13, dynamo=False, input_names=["data"])
    use = memory_use(
        GraphInfo.of(onnx.load_from_string(buf.getvalue())), "int8", "w8a8", Residency(1, 1, RknnBackend.memory)
    )
    ours = {
        "weights": use.weight_bytes / 2**20,
        "internal tensors": use.peak_activation_bytes / 2**20,
        "total": use.dram_bytes / 2**20,
    }
    print("### rknn (rk3588): against Rockchip's published memory report\n")
    print("MobileNetV2@224, INT8 w8a8, one context; the report: rockchip-linux/rknn-toolkit2's board_test example.\n")
    print("| figure | published MiB | estimated MiB | estimated / published |")
    print("|---|---|---|---|")
    ratios = []
    for key, published in RKNN_REPORT.items():
        ratios.append(ours[key] / published)
        print(f"| {key} | {published:.2f} | {ours[key]:.2f} | {ratios[-1]:.2f} |")
    within = all(1 / RKNN_GOAL <= r <= RKNN_GOAL for r in ratios)
    print(f"\n- every figure within {RKNN_GOAL}x of the report's: {'met' if within else 'not met'}\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--runtime", nargs="+", default=["onnxruntime", "openvino"], choices=[*RUNTIMES, "rknn"])
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores\n")
    if "rknn" in args.runtime:
        rknn_report()
        args.runtime = [r for r in args.runtime if r != "rknn"]
        if not args.runtime:
            return 0
    models = [(str(demo_model_path()), 320, "fitted"), ("yolov8n.yaml", 640, "held out")]
    rows: dict[str, list[tuple[str, int, MemoryUse, int]]] = {r: [] for r in args.runtime}
    with tempfile.TemporaryDirectory() as tmp:
        for model, size, role in models:
            one = GraphInfo.of(onnx.load(export(model, size, 1, Path(tmp))))
            for b in args.batches:
                path = export(model, size, b, Path(tmp)) if b > 1 else Path(tmp) / f"{Path(model).stem}-{size}-b1.onnx"
                use = memory_use(one, "fp32", residency=Residency(b))
                for runtime in args.runtime:
                    rows[runtime].append(
                        (f"{Path(model).name}@{size} ({role})", b, use, measured(runtime, path, b, size))
                    )
    for runtime, got in rows.items():
        shipped = RUNTIMES[runtime]
        own, factor = fit([(b, u, m) for name, b, u, m in got if "(fitted)" in name])
        print(f"### {runtime}\n")
        print(
            f"Fitted on the demo's rows: own {own:.1f} MiB, activations x{factor:.2f}; the backend ships own "
            f"{shipped.own_mb} MiB, x{shipped.activation_factor} (shares weights: {shipped.shares_weights}).\n"
        )
        print("| model | batch | liveness count MiB | estimated MiB | measured MiB | measured / estimated |")
        print("|---|---|---|---|---|---|")
        within = []
        for name, b, use, m in got:
            estimate = replace(use, residency=Residency(b, 1, shipped)).dram_bytes
            within.append(abs(m / estimate - 1) <= GOAL)
            print(
                f"| {name} | {b} | {use.dram_bytes / 2**20:.1f} | {estimate / 2**20:.1f} | {m / 2**20:.1f} "
                f"| {m / estimate:.2f} |"
            )
        held = [w for w, (name, *_rest) in zip(within, got) if "held out" in name]
        verdict = "met" if all(within) else "not met"
        print(
            f"\n- {sum(within)} of {len(within)} within +-{GOAL:.0%} ({sum(held)} of {len(held)} held out): {verdict}\n"
        )
    return 0


if __name__ == "__main__":
    import results_page

    with results_page.page("memory-estimate", "The memory check's estimate against the measured peak"):
        code = main()
    raise SystemExit(code)
