"""Fit of the simulated boards' CPU models (the profiles' ``cpu:``), which price every CPU phase of a frame for
the board (``yolo_edge.devices.board``): modelled FP32 model-only latency against published figures for that CPU
running the whole model on ONNX Runtime.

    YOLO_OFFLINE=1 python benchmarks/board_cpu_fit.py          # table: modelled, published, ratio
    YOLO_OFFLINE=1 python benchmarks/board_cpu_fit.py --fit    # also solve the fitted parameters

Published figures (model only, imgsz 640, batch 1, FP32 unless said):

- rk3588 (4x Cortex-A76 at 2.4 GHz + 4x A55): Ultralytics' Raspberry Pi 5 benchmarks (4x Cortex-A76 at
  2.4 GHz, the same cores and clock; ``docs/en/guides/raspberry-pi.md``, "Raspberry Pi 5 YOLO11 Benchmarks"),
  ONNX: YOLO11n 168.082 ms, YOLO11s 324.17 ms. Two figures fix two parameters: the throughput (gflops) and the
  per-op overhead; DRAM bandwidth is assumed (10 GB/s achievable of LPDDR4X). The overhead comes out large
  (ONNX Runtime's per-node cost on those cores, and the element-wise traffic the roofline fuses away): a small
  model there is bound by it, which is why YOLO11s costs only 1.9x YOLO11n for 3.3x the FLOPs.
- qcs6490 (Kryo 670: 1x Cortex-A78 2.7 GHz + 3x A78 2.4 GHz + 4x A55): Qualcomm AI Hub
  (``quic/ai-hub-models``, ``qai_hub_models/models/yolov8_det/perf.yaml``, w8a16, Dragonwing RB3 Gen 2, onnx):
  YOLOv8n 334.433 ms with all 930 layers on the CPU. That graph carries 16-bit Q/DQ pairs around every layer,
  more work than FP32's, so the fitted CPU is if anything slower than the board's: the latency it prices errs
  towards missing the SLA. One figure fixes one parameter, the throughput; the overhead is rk3588's fitted one
  (ONNX Runtime on Cortex-A7x), DRAM assumed (12 GB/s of LPDDR4X/5).
- qcs8550: no published CPU-only figure (AI Hub's rows for it all run on the NPU); its CPU model stays assumed
  and the profile says so.

Needs the export extra (ultralytics builds the graphs from their yaml).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from dataclasses import replace

from yolo_edge.config import CpuModel, load_profile
from yolo_edge.devices.cost import cpu_time
from yolo_edge.export import export_model
from yolo_edge.graph import GraphInfo

PUBLISHED_MS = {
    ("rk3588", "yolo11n.yaml"): 168.082,
    ("rk3588", "yolo11s.yaml"): 324.17,
    ("qcs6490", "yolov8n.yaml"): 334.433,
}


def solve(f: Callable[[float], float], target: float, lo: float, hi: float) -> float:
    """The x in [lo, hi] where the decreasing ``f(x)`` is ``target`` (bisection)."""
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) > target else (lo, mid)
    return (lo + hi) / 2


def ms(info: GraphInfo, cpu: CpuModel) -> float:
    return cpu_time(info, cpu).total_ms


def fit_two(small: GraphInfo, large: GraphInfo, t_small: float, t_large: float, cpu: CpuModel) -> CpuModel:
    """gflops and op_overhead_us so that both figures are met (overhead outer, throughput inner)."""

    def at(overhead: float) -> CpuModel:
        c = replace(cpu, op_overhead_us=overhead)
        return replace(c, gflops=solve(lambda g: ms(small, replace(c, gflops=g)), t_small, 0.5, 5000.0))

    # more overhead leaves less time to compute the small model: the throughput rises, the large model gets faster;
    # at most the overhead that would spend the small model's whole time on launches
    most = 0.999 * t_small * 1e3 / cpu_time(small, cpu).launched_ops
    overhead = solve(lambda o: ms(large, at(o)), t_large, 0.0, most)
    return at(overhead)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fit", action="store_true")
    args = ap.parse_args()
    infos: dict[str, GraphInfo] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted({m for _, m in PUBLISHED_MS}):
            infos[name] = GraphInfo.of(export_model(name, imgsz=640, out_dir=tmp).load())
    cpus = {chip: load_profile(chip).cpu for chip in ("rk3588", "qcs6490", "qcs8550")}
    if args.fit:
        rk = cpus["rk3588"]
        assert rk is not None
        fitted = fit_two(infos["yolo11n.yaml"], infos["yolo11s.yaml"], 168.082, 324.17, rk)
        print(f"fit rk3588: gflops {fitted.gflops:.1f}, op_overhead_us {fitted.op_overhead_us:.0f}")
        qc = cpus["qcs6490"]
        assert qc is not None
        qc = replace(qc, op_overhead_us=round(fitted.op_overhead_us))
        g = solve(lambda x: ms(infos["yolov8n.yaml"], replace(qc, gflops=x)), 334.433, 0.5, 5000.0)
        print(f"fit qcs6490: gflops {g:.1f} (op_overhead_us {qc.op_overhead_us:.0f}, from rk3588)")
    print("| chip | model | modelled ms | published ms | modelled / published |")
    print("|---|---|---|---|---|")
    for (chip, model), published in PUBLISHED_MS.items():
        cpu = cpus[chip]
        assert cpu is not None
        t = ms(infos[model], cpu)
        print(f"| {chip} | {model.removesuffix('.yaml')} | {t:.1f} | {published:.1f} | {t / published:.3f} |")
    for chip in ("rk3588", "qcs6490", "qcs8550"):
        cpu = cpus[chip]
        assert cpu is not None
        print(f"{chip}: YOLOv8n 640 whole model on the board CPU, modelled: {ms(infos['yolov8n.yaml'], cpu):.1f} ms")


if __name__ == "__main__":
    main()
