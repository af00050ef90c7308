"""Sections 4-6 of ``benchmarks/run_all.py``: whether the accelerator pays (the deployed split on
``host-lowp`` vs all-CPU FP32), how far each plan is from this machine's peak, and how cost grows with
image size and model size (each configuration in its own process, for an honest memory peak).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from side_by_side import bus_image, cpu_detector, interleave

from yolo_edge.backends import cpu_backend
from yolo_edge.backends.base import Executable
from yolo_edge.backends.builder import Builder  # noqa: E402
from yolo_edge.backends.openvino.backend import OpenVinoBackend
from yolo_edge.bundle import Bundle, load_bundle
from yolo_edge.core.config import load_deploy_config, load_profile
from yolo_edge.demo.shapes import demo_val_data
from yolo_edge.flows.deploy import DeployRequest, deploy
from yolo_edge.model.export import export_model
from yolo_edge.model.graph import GraphInfo
from yolo_edge.model.split import SplitModel, split_model
from yolo_edge.pipeline.detector import Detector
from yolo_edge.pipeline.preprocess import default_calib_dir, letterbox, load_calibration, read_image
from yolo_edge.plan.placement import PlacementPlan, boundary_tensors
from yolo_edge.runtime.build import build_units
from yolo_edge.runtime.events import EventLog
from yolo_edge.runtime.executor import SplitExecutor

GEMM_N = 2048
GEMM_OPS = ("Conv", "MatMul", "Gemm")
ACCELERATOR = "host-lowp"


# ---------------------------------------------------------------- 5. the machine's limit


def _gemm_model(quantized: bool, conv: bool) -> tuple[onnx.ModelProto, np.ndarray, int]:
    """A GEMM against a constant weight, as a 2048-square MatMul or as a 1x1 convolution (1024 channels in
    and out over 64x64 pixels, the form a detector's GEMMs take); ``quantized``: as QDQ (u8 activations,
    s8 weights), the form yolo-edge's INT8 units take. Returns the model, an input and its FLOPs."""
    rng = np.random.default_rng(0)
    if conv:
        c, hw = GEMM_N // 2, 64
        w, x, op = rng.standard_normal((c, c, 1, 1)), rng.standard_normal((1, c, hw, hw)), "Conv"
        flops = 2 * c * c * hw * hw
    else:
        w, x, op = rng.standard_normal((GEMM_N, GEMM_N)), rng.standard_normal((GEMM_N, GEMM_N)), "MatMul"
        flops = 2 * GEMM_N**3
    w, x = w.astype(np.float32), x.astype(np.float32)
    shape = list(x.shape) if not conv else [1, GEMM_N // 2, 64, 64]
    inp = helper.make_tensor_value_info("a", TensorProto.FLOAT, list(x.shape))
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    if not quantized:
        nodes = [helper.make_node(op, ["a", "w"], ["y"])]
        inits = [numpy_helper.from_array(w, "w")]
    else:
        inits = [
            numpy_helper.from_array(np.clip(np.round(w / 0.03), -127, 127).astype(np.int8), "wq"),
            numpy_helper.from_array(np.array(0.03, np.float32), "ws"),
            numpy_helper.from_array(np.array(0, np.int8), "wz"),
            numpy_helper.from_array(np.array(0.02, np.float32), "as"),
            numpy_helper.from_array(np.array(128, np.uint8), "az"),
        ]
        nodes = [
            helper.make_node("QuantizeLinear", ["a", "as", "az"], ["aq"]),
            helper.make_node("DequantizeLinear", ["aq", "as", "az"], ["ad"]),
            helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"]),
            helper.make_node(op, ["ad", "wd"], ["y"]),
        ]
    graph = helper.make_graph(nodes, "gemm", [inp], [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), x, flops


def gemm_peaks(rounds: int) -> dict[str, dict[str, float]]:
    """GFLOP/s of a GEMM (as a MatMul and as a 1x1 convolution) through the runtimes and precisions
    yolo-edge uses; an engine's peak is the better of the two."""
    ov = OpenVinoBackend("CPU")
    engines = ["onnxruntime fp32", "openvino fp32", "onnxruntime int8"]
    engines += [f"openvino {p}" for p in ("bf16", "int8") if p in ov.precisions]
    peaks: dict[str, dict[str, float]] = {e: {} for e in engines}
    for form, conv in (("matmul", False), ("conv1x1", True)):
        paths: dict[str, Callable[[], object]] = {}
        flops = 0
        for engine in engines:
            runtime, precision = engine.split()
            model, x, flops = _gemm_model(precision == "int8", conv)
            backend = ov if runtime == "openvino" else cpu_backend()
            exe = backend.compile(model, precision)
            paths[engine] = lambda exe=exe, x=x: exe.run({"a": x})
        for engine, ms in interleave(paths, rounds, block=2).median_ms.items():
            peaks[engine][f"{form}_gflops"] = round(flops / ms / 1e6, 1)
    for got in peaks.values():
        got["gflops"] = max(got["matmul_gflops"], got["conv1x1_gflops"])
    return peaks


def gemm_flops(model: onnx.ModelProto) -> int:
    """FLOPs of the convolutions and matrix products: the part of a model a GEMM peak bounds."""
    info = GraphInfo.of(model)
    return info.total_flops([n for n in info.nodes if n.op_type in GEMM_OPS])


def _engine(exe: Executable, on_npu: bool) -> str:
    """The peak that bounds ``exe``: OpenVINO at its precision on the accelerator, onnxruntime FP32 on the CPU."""
    return f"openvino {exe.precision}" if on_npu else "onnxruntime fp32"


def distance_from_limit(
    split: SplitModel, detectors: dict[str, Detector], peaks: dict[str, dict[str, float]], rounds: int
) -> dict[str, object]:
    """Model-only time of each plan against its GEMM floor (its GEMM FLOPs at the peak of the engine and
    precision each unit runs in), as a percentage of that peak; the whole graph in each engine too."""
    x = letterbox(bus_image(), split.exported.meta.imgsz).tensor
    model = split.exported.load()
    ov = OpenVinoBackend("CPU")
    whole = {f"whole graph, openvino {p}": ov.compile(model, p) for p in ("fp32", "bf16") if p in ov.precisions}
    paths: dict[str, Callable[[], object]] = {
        k: (lambda d=d: d.executor.run({"images": x})) for k, d in detectors.items()
    }
    paths |= {k: (lambda e=e: e.run({"images": x})) for k, e in whole.items()}
    timed = interleave(paths, rounds)
    floors: dict[str, float] = {}
    for name, det in detectors.items():
        floors[name] = sum(
            gemm_flops(u.cpu.model) / (peaks[_engine(u.npu or u.cpu, u.npu is not None)]["gflops"] * 1e6)
            for u in det.executor.units
            if u.cpu.model is not None
        )
    for name, exe in whole.items():
        floors[name] = gemm_flops(model) / (peaks[_engine(exe, True)]["gflops"] * 1e6)
    return {
        "gemm_gflop": round(gemm_flops(model) / 1e9, 2),
        "rows": [
            {"plan": k, "ms": ms, "floor_ms": round(floors[k], 2), "of_peak": round(floors[k] / ms, 3)}
            for k, ms in timed.median_ms.items()
        ],
    }


# ---------------------------------------------------------------- 4. the accelerator pays


def deploy_demo(out: Path) -> tuple[Bundle, dict[str, object]]:
    """The demo deployed on ``host-lowp`` with ``plan.head_on_npu: auto`` (the head's convolutions may go to
    the accelerator when they pass the precision check; decode stays FP32 on the CPU)."""
    cfg = load_deploy_config()
    cfg = replace(cfg, plan=replace(cfg.plan, head_on_npu="auto"))
    result = deploy(DeployRequest(device=ACCELERATOR, config=cfg), out=out, quiet=True)
    split = next(p for p in result.report.plans if p.name == "split")
    bundle = load_bundle(result.bundle)
    info = {
        "placement": ", ".join(f"{s.name}={s.device}/{s.variant}" for s in bundle.plan.subgraphs),
        "chosen": bundle.meta.chosen_plan,
        "drift": None if split.drift is None else split.drift.to_dict(),
        "status": split.status,
        "passed": result.report.passed,
    }
    return bundle, info


def npu_placement(plan: PlacementPlan, head: bool) -> dict[str, str]:
    return {s.name: s.variant for s in plan.subgraphs if s.device == "npu" and (head or s.name != "head")}


def split_detector(split: SplitModel, npu: dict[str, str], images: int = 8) -> Detector:
    """A hand-written plan (``npu``: subgraph -> precision) on the accelerator profile, calibrated on the
    shipped images (their content matters for numerics only, not for speed)."""
    cfg = load_deploy_config()
    profile = load_profile(ACCELERATOR)
    calib = boundary_tensors(split, load_calibration(default_calib_dir(), split.exported.meta.imgsz, images))
    plan = PlacementPlan.manual(split, npu, profile.name)
    units = build_units(split, plan, Builder(profile), calib, EventLog())
    return Detector(SplitExecutor(units, cfg.runtime, profile), split.exported.meta, cfg.nms)


def _cycling(detector: Detector, images: list[np.ndarray]) -> Callable[[], object]:
    frames = itertools.count()
    return lambda: detector.detect(images[next(frames) % len(images)])


def demo_end_to_end(bundle: Bundle, rounds: int) -> dict[str, object]:
    """The deployed bundle vs its whole-cpu reference, end to end on the demo's validation images."""
    files = sorted((demo_val_data().parent / "images" / "val").glob("*.jpg"))[:20]
    images = [read_image(f) for f in files]
    with bundle.reference_detector() as cpu, bundle.detector() as ours:
        timed = interleave({"all-CPU FP32": _cycling(cpu, images), "deployed split": _cycling(ours, images)}, rounds)
    return timed.to_dict()


def model_end_to_end(
    model: str, imgsz: int, npu: dict[str, str], rounds: int, peaks: dict[str, dict[str, float]]
) -> tuple[dict[str, object], dict[str, object]]:
    """A model (yaml weights: speed only) with the demo's deployed placement, with and without the head on
    the accelerator, vs all-CPU FP32: end to end on bus.jpg, and each plan's distance from the limit."""
    image = bus_image()
    cfg = load_deploy_config()
    with tempfile.TemporaryDirectory() as tmp:
        split = split_model(export_model(model, imgsz=imgsz, out_dir=tmp))
        no_head = {k: v for k, v in npu.items() if k != "head"}
        with (
            cpu_detector(split, image, cfg) as cpu,
            split_detector(split, npu) as with_head,
            split_detector(split, no_head) as without_head,
        ):
            detectors = {
                "all-CPU FP32": cpu,
                "split, head on the CPU": without_head,
                "split, head on the NPU": with_head,
            }
            timed = interleave({k: (lambda d=d: d.detect(image)) for k, d in detectors.items()}, rounds)
            e2e: dict[str, object] = {"model": Path(model).stem, "imgsz": imgsz, **timed.to_dict()}
            return e2e, distance_from_limit(split, detectors, peaks, rounds)


# ---------------------------------------------------------------- 6. cost of growth


def _status_mb(field: str) -> float:
    """``VmRSS`` (resident now) or ``VmHWM`` (resident peak of this process image; ``ru_maxrss`` would carry
    the parent's peak across ``exec``) in MB."""
    with open("/proc/self/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith(f"{field}:"))
    return kb / 1024


def growth_child(onnx_path: str, npu: dict[str, str], budget_s: float = 2.0) -> dict[str, float]:
    """One configuration in a fresh process, the all-CPU plan (``npu`` empty) or a split: end-to-end median on
    bus.jpg, the process's memory peak while building (calibration, quantization, compilation) and while
    running frames (the peak reset in between), and the resident memory over the imports' while running."""
    from yolo_edge.model.meta import load_onnx

    base = _status_mb("VmRSS")
    split = split_model(load_onnx(onnx_path))
    image = bus_image()
    detector = split_detector(split, npu, images=4) if npu else cpu_detector(split, image, load_deploy_config())
    build_peak = _status_mb("VmHWM")
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM: the running peak from here
    with detector:
        times: list[float] = []
        for _ in range(2):
            detector.detect(image)
        start = time.perf_counter()
        while len(times) < 3 or (time.perf_counter() - start < budget_s and len(times) < 20):
            t0 = time.perf_counter()
            detector.detect(image)
            times.append((time.perf_counter() - t0) * 1e3)
    run_peak = _status_mb("VmHWM")
    return {
        "ms": round(float(np.median(times)), 2),
        "build_peak_mb": round(build_peak, 1),
        "run_peak_mb": round(run_peak, 1),
        "run_rise_mb": round(run_peak - base, 1),
    }


def growth(
    models: list[str], sizes: list[int], npu: dict[str, str], say: Callable[[str], None]
) -> list[dict[str, object]]:
    """Latency and memory peak of the all-CPU and split plans over model sizes and image sizes."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            for imgsz in sizes:
                path = export_model(model, imgsz=imgsz, out_dir=Path(tmp, f"{model}-{imgsz}")).path
                for plan, placement in (("all-CPU FP32", {}), ("split", npu)):
                    say(f"growth: {model} {imgsz} {plan}")
                    cmd = [sys.executable, __file__, str(path), json.dumps(placement)]
                    env = os.environ | {"PYTHONPATH": str(Path(__file__).parent)}
                    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
                    got = json.loads(done.stdout.strip().splitlines()[-1])
                    rows.append({"model": Path(model).stem, "imgsz": imgsz, "plan": plan, **got})
    return rows


if __name__ == "__main__":  # the child of growth()
    print(json.dumps(growth_child(sys.argv[1], json.loads(sys.argv[2]))))
