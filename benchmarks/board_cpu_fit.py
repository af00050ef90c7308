"""Fit of the simulated boards' CPU models (the profiles' ``cpu:``), which price every CPU phase of a frame for
the board (``yolo_edge.devices.board``): three costs per graph (``devices.cost.cpu_time``: arithmetic at
``gflops``, activation and weight traffic at ``dram_gbps``, one launch per op at ``op_overhead_us``), fitted by
non-negative least squares on relative error to published FP32 model-only latencies of whole models run by ONNX
Runtime on that CPU. Every figure's error is printed twice: against the fit of all of them, and against the fit
made without it (leave-one-out), the check that the model holds on figures it was not fitted to; figures from
other measurement sessions are checked only, never fitted.

    YOLO_OFFLINE=1 python benchmarks/board_cpu_fit.py

Published figures (imgsz 640, batch 1, FP32, ONNX, model only: "Inference time does not include pre/post-processing"):

- rk3588's 4x Cortex-A76 at 2.4 GHz: Ultralytics' Raspberry Pi 5 benchmarks (BCM2712, the same cores and clock;
  ``docs/en/guides/raspberry-pi.md``). Fitted: the YOLO26 vs YOLO11 table, Ultralytics 8.4.14, five sizes of each
  family (ten figures, three parameters). Checked only: YOLO26n/s from the same page's format table (Ultralytics
  8.4.108) and YOLO11n/s from its earlier YOLO11 format table (168.082 / 324.17 ms, the two figures the previous
  two-parameter fit used).
- qcs6490 (Kryo 670: A78 cores): Qualcomm AI Hub's ONNX Runtime runs with every layer on the CPU of the Dragonwing
  RB3 Gen 2 (``qai_hub_models/models/<model>/perf.yaml``), nine figures: YOLOv8n, YOLO11n and YOLOv10n at 640 and six
  torchvision classifiers at 224, all at w8a16 (the only precision AI Hub runs on that CPU for those models). Those
  graphs carry 16-bit quantize / dequantize pairs on every activation, more work than FP32's, so the fitted CPU is if
  anything slower than the board's for yolo-edge's FP32 graphs.
- qcs8550 (Cortex-X3 + A715/A710) and ethos-u65's 2x Cortex-A55 (i.MX 93-like): no published ONNX Runtime figure on
  those cores of a graph rebuilt here (AI Hub's few QCS8550 CPU rows are EyeGaze, MoveNet and BEVDet). The A76 fit
  scaled by the median ratio of ncnn's benchncnn times (25 networks, :data:`NCNN`) on a board with those cores
  (Snapdragon 8 Gen 2, QCS8550's phone twin; Renesas RZ/G2L, two A55 cores at 1.5 GHz) over the Raspberry Pi 5, each
  network checked against the scale fitted without it; the RK3588's own A55 cores give the A55's fast end.

Post-processing (letterbox, decode and NMS are priced by the work of yolo-edge's own kernels, not fitted): checked
against the two published board measurements found, :data:`POST` (C++) and :data:`POST_GO` (Go).

Needs the export extra (ultralytics builds the graphs from their yaml).
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from scipy.optimize import nnls

from yolo_edge.core.config import CpuModel, NmsConfig, load_profile
from yolo_edge.core.host import cpu_name
from yolo_edge.devices.board import BoardCpu
from yolo_edge.devices.cost import cpu_time
from yolo_edge.model.decode import HeadOutputs
from yolo_edge.model.graph import GraphInfo
from yolo_edge.pipeline.postprocess import postprocess
from yolo_edge.pipeline.preprocess import letterbox

FIT_TOLERANCE = 1.3  # every figure within this factor of the model fitted without it (issue #37's goal)


@dataclass(frozen=True)
class Figure:
    model: str  # an ultralytics model yaml
    ms: float
    source: str
    fitted: bool  # in the fit (one measurement session) or a check only


A76 = [
    *(
        Figure(f"yolo11{s}.yaml", ms, "Ultralytics 8.4.14, YOLO26 vs YOLO11", True)
        for s, ms in zip("nsmlx", (147.20, 366.83, 997.46, 1274.95, 2646.76))
    ),
    *(
        Figure(f"yolo26{s}.yaml", ms, "Ultralytics 8.4.14, YOLO26 vs YOLO11", True)
        for s, ms in zip("nsmlx", (128.42, 352.84, 993.78, 1259.46, 2636.26))
    ),
    Figure("yolo26n.yaml", 125.99, "Ultralytics 8.4.108, formats", False),
    Figure("yolo26s.yaml", 355.69, "Ultralytics 8.4.108, formats", False),
    Figure("yolo11n.yaml", 168.082, "Ultralytics, earlier YOLO11 formats", False),
    Figure("yolo11s.yaml", 324.17, "Ultralytics, earlier YOLO11 formats", False),
]
# qcs6490's Kryo 670: Qualcomm AI Hub's ONNX Runtime 1.23 runs with every layer on the CPU of the Dragonwing RB3 Gen 2
# Vision Kit (github.com/quic/ai-hub-models at 52c080d, qai_hub_models/models/<model>/perf.yaml, precision w8a16,
# runtime onnx, primary_compute_unit CPU): uint16 activations, which ONNX Runtime computes in float between a
# quantize and a dequantize on every activation, so a fit to them errs slow for yolo-edge's FP32 graphs. Every such
# figure whose graph is rebuilt here: three ultralytics detectors at 640 and six torchvision classifiers at 224.
QCS6490 = [
    *(
        Figure(model, ms, "Qualcomm AI Hub, RB3 Gen 2, w8a16 ONNX on the CPU", True)
        for model, ms in (
            ("yolov8n.yaml", 344.267),
            ("yolo11n.yaml", 335.967),
            ("yolov10n.yaml", 359.505),
            ("efficientnet_b0", 122.425),
            ("mobilenet_v3_large", 55.392),
            ("mnasnet0_5", 29.306),
            ("convnext_tiny", 397.835),
            ("convnext_base", 1158.253),
            ("efficientnet_v2_s", 311.643),
        )
    ),
]

# The one published post-processing figure on these cores found so far: YOLO11s at 640 (80 classes) on an RK3588,
# the decode and NMS of the NPU's raw head outputs in compiled C++ (a Release build), "Post Process: 0.99 ms"
# (github.com/yuunnn-w/rknn-cpp-yolo issue 2, 2025-07-26). Its kernel is not yolo-edge's: it reads the NPU's int8
# outputs in their NC1HWC2 layout and dequantises them, one scalar loop per anchor; the candidates of its frame
# are not published (the modelled figure barely moves between 5 and 100).
POST = Figure("yolo11s.yaml", 0.99, "rknn-cpp-yolo issue 2, Release build, YOLO11s decode+NMS on the A76", False)
# A second, from another kernel on the same chip: YOLOv8s at 640 (80 classes, COCO weights) on an RK3588 (Rock 5B),
# go-rknnlite's Go port of rknn_model_zoo's C post-processing (the NPU's int8 outputs, a per-anchor score-sum
# prefilter, each passing anchor's 80 classes read across the class planes, the DFL of the candidates, per-class NMS),
# bus.jpg, 100 runs after 5 warm-up: "postprocess: min=1.759005ms p50=6.541364ms" (github.com/swdee/go-rknnlite,
# example/yolov8/README.md). Its fastest run is the kernel's work with the least scheduling and collection noise.
POST_GO = Figure("yolov8s.yaml", 1.76, "go-rknnlite's YOLOv8s example, fastest of 100 runs (p50 6.54 ms)", False)
POST_CANDIDATES = (5, 30, 100)

# Two profiles' CPUs have no published ONNX Runtime figure of a graph rebuilt here: ethos-u65's 2x Cortex-A55 (i.MX
# 93-like, 1.7 GHz) and qcs8550's Cortex-X3 + A715/A710. Each is the A76 fit scaled by how much slower (or faster) one
# benchmark runs on a board with those cores than on the A76 fit's own board: ncnn's benchncnn (the same networks and
# harness; fastest of 4-10 runs, ms) in github.com/Tencent/ncnn benchmark/README.md:
# - "Raspberry Pi 5 Broadcom BCM2712, Cortex-A76 (ARMv8) (2.4GHz x 4)", 4 threads: its first CPU run scales, its
#   second (another build) is checked only;
# - "MYIR RemiPi,Renesas RZG2L(Cortex-A55 1.5GHz x 2)", the nearest published board to the i.MX 93 (two A55 cores on
#   a 16-bit DRAM bus), run with 4 threads on its 2 cores;
# - "Rockchip RK3588 (Cortex-A76 2.4GHz x 4 + Cortex-A55 1.8GHz x 4)": one chip's big cores (4 threads) and little
#   cores (1 and 4), whose two-core A55 (the geometric mean of the two runs) on a 64-bit bus is the fast end;
# - "Qualcomm SM8550-AB Snapdragon 8 Gen 2", QCS8550's phone twin (the same cores and clocks), 4 threads on its big
#   cores. (Its Snapdragon 888 run, the nearest to the qcs6490, puts 8 threads on 4 cores: blazeface 3.2x the Pi 5's
#   time, vgg16 0.45x; too scattered to check the qcs6490 fit with.)
# One factor for all three costs: the small networks (blazeface, yolo-fastest) scale like the large ones.
# vision_transformer (RZ/G2L 12464 ms, 21x the Pi 5) is left out: the profiles price convolutional detectors.
NCNN = """
# network            Pi 5 (1)  Pi 5 (2)  RZ/G2L  RK3588 A76x4  RK3588 A55x1  RK3588 A55x4  SM8550 4 big
squeezenet                6.74      7.61     85.38      7.57     83.46     25.54          2.60
mobilenet                 9.00      9.65    121.01     11.01    131.78     36.24          4.17
mobilenet_v2             10.46     12.25    101.35      8.73     92.92     27.49          3.13
mobilenet_v3              7.30      8.14     84.09      7.90     78.38     26.30          2.90
shufflenet                4.14      3.72     63.32      7.95     62.98     25.49          2.34
shufflenet_v2             3.37      2.99     60.33      6.09     56.85     21.59          2.06
mnasnet                   6.83      7.27     95.51      8.30     87.53     27.92          3.19
proxylessnasnet           7.85      8.39    124.46      9.67    113.25     34.18          3.53
efficientnet_b0          12.28     13.15    144.94     17.51    180.95     57.37          5.72
efficientnetv2_b0        13.54     14.79    182.87     28.10    285.34     83.50          8.61
regnety_400m             10.93      9.49    105.31     16.33    109.24     50.83          6.22
blazeface                 1.45      1.41     21.34      2.81     41.12     14.07          0.82
googlenet                25.13     28.60    313.01     33.33    358.94    100.60         10.62
resnet18                 19.84     21.47    248.02     18.83    209.97     58.60          6.61
alexnet                  21.21     22.75    204.00     29.07    318.95     86.06          8.18
resnet50                 45.94     49.36    583.13     53.70    602.90    163.45         18.90
squeezenet_ssd           30.10     37.31    266.63     34.88    280.60     96.32          8.26
mobilenet_ssd            24.16     27.40    267.16     31.32    319.11     92.12          9.29
mobilenet_yolo           58.06     60.25    571.08     58.89    607.07    174.95         21.64
mobilenetv2_yolov3       37.49     43.51    342.52     37.53    326.66    110.63         11.50
yolov4-tiny              44.45     51.63    499.74     52.95    449.56    163.37         14.91
nanodet_m                11.01     11.89    161.87     16.06    142.09     52.96          4.93
yolo-fastest-1.1          5.53      5.63     72.84      8.42     63.74     28.98          2.19
yolo-fastestv2            4.76      5.34     68.24      7.81     57.56     23.52          2.29
FastestDet                4.83      4.91     67.92         -         -         -          2.01
"""


def ncnn(column: int) -> dict[str, float]:
    """One column of :data:`NCNN`: network -> fastest ms (a network the run did not list is left out)."""
    rows = [line.split() for line in NCNN.strip().splitlines()[1:]]
    return {r[0]: float(r[1 + column]) for r in rows if r[1 + column] != "-"}


A55_GHZ = {"RZ/G2L": 1.5, "RK3588": 1.8, "i.MX 93": 1.7}


def graph(model: str, tmp: Path) -> GraphInfo:
    """ultralytics' own ONNX export of a ``model`` yaml at 640, else torchvision's classifier ``model`` at 224 (random
    weights: the graph is what is priced)."""
    if not model.endswith(".yaml"):
        import torch
        import torchvision

        path = tmp / f"{model}.onnx"
        net = torchvision.models.get_model(model).eval()
        torch.onnx.export(net, (torch.zeros(1, 3, 224, 224),), str(path), opset_version=17, dynamo=False)
        return GraphInfo.of(onnx.load(str(path)))
    from ultralytics import YOLO

    with contextlib.chdir(tmp):
        path = YOLO(model).export(format="onnx", imgsz=640, simplify=True, opset=17, verbose=False)
        return GraphInfo.of(onnx.load(str(path)))


def features(info: GraphInfo) -> np.ndarray:
    """Milliseconds per unit of each parameter's inverse: (GFLOP, GB of traffic, ops at 1 ms each)."""
    unit = cpu_time(info, CpuModel(gflops=1.0, dram_gbps=1.0, op_overhead_us=1000.0))
    return np.array([unit.compute_s, unit.memory_s, unit.overhead_s]) * 1e3


def fit(rows: list[tuple[np.ndarray, float]]) -> CpuModel:
    """The non-negative least-squares fit on relative error (each figure weighted by its inverse)."""
    a = np.array([f / ms for f, ms in rows])
    x, _ = nnls(a, np.ones(len(rows)))
    inverse = [1 / v if v > 0 else float("inf") for v in x[:2]]
    return CpuModel(gflops=inverse[0], dram_gbps=inverse[1], op_overhead_us=x[2] * 1000.0)  # ms -> us per op


def predicted(feat: np.ndarray, cpu: CpuModel) -> float:
    return float(feat @ np.array([1 / cpu.gflops, 1 / cpu.dram_gbps, cpu.op_overhead_us / 1000.0]))


def board(cpu_name: str, figures: list[Figure], infos: dict[str, GraphInfo]) -> CpuModel:
    """The least-squares fit of ``figures`` (those marked fitted), each figure printed against it and against the
    fit made without it."""
    feats = {f.model: features(infos[f.model]) for f in figures}
    fitted = [f for f in figures if f.fitted]
    cpu = fit([(feats[f.model], f.ms) for f in fitted])
    print(
        f"{cpu_name}, fitted to {len(fitted)} figures: gflops {cpu.gflops:.1f}, dram_gbps "
        f"{cpu.dram_gbps:.2f}, op_overhead_us {cpu.op_overhead_us:.1f}"
    )
    print("| model | published ms | source | fitted? | all-figure fit | ratio | fit without it | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    worst = 1.0
    for k, f in enumerate(figures):
        rest = [(feats[g.model], g.ms) for j, g in enumerate(figures) if g.fitted and j != k]
        without = fit(rest)
        full, loo = predicted(feats[f.model], cpu), predicted(feats[f.model], without)
        worst = max(worst, loo / f.ms, f.ms / loo)
        print(
            f"| {f.model.removesuffix('.yaml')} | {f.ms:.1f} | {f.source} | {'yes' if f.fitted else 'check'} | "
            f"{full:.1f} | {full / f.ms:.3f} | {loo:.1f} | {loo / f.ms:.3f} |"
        )
    verdict = "met" if worst <= FIT_TOLERANCE else "NOT met"
    print(f"worst figure against the fit without it: {worst:.3f}x (goal <= {FIT_TOLERANCE}x: {verdict})\n")
    return cpu


def host_decode_ms(candidates: int, runs: int = 200) -> float:
    """Median ms of yolo-edge's own candidate-first decode + NMS (``pipeline.postprocess``) on this machine, for the
    frame :func:`post_check` prices: an 80-class head at 640 (reg_max 16) whose logits put ``candidates`` anchors
    over the confidence threshold and none else."""
    rng = np.random.default_rng(0)
    tensors = {}
    for level, stride in enumerate((8, 16, 32)):
        side = 640 // stride
        tensors[f"/model.22/cv2.{level}/Conv_output_0"] = rng.normal(0, 1, (1, 64, side, side)).astype(np.float32)
        tensors[f"/model.22/cv3.{level}/Conv_output_0"] = rng.normal(-8, 1, (1, 80, side, side)).astype(np.float32)
    logits = tensors["/model.22/cv3.0/Conv_output_0"]
    cells = rng.choice(80 * 80, candidates, replace=False)
    logits[0, rng.integers(0, 80, candidates), cells // 80, cells % 80] = 3.0
    head = HeadOutputs.find({k: v.shape for k, v in tensors.items()}, 640)
    lb = letterbox(np.zeros((480, 640, 3), np.uint8), (640, 640))
    names = tuple(str(c) for c in range(80))
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        postprocess(tensors, lb, names, NmsConfig(0.25, 0.7, 300, False), head)
        times.append(time.perf_counter() - start)
    return float(np.median(times[runs // 10 :])) * 1e3


def post_check(cpu: CpuModel | None) -> None:
    """The rk3588 profile's decode + NMS of a frame at 640 (80 classes, 8400 anchors, reg_max 16), priced by
    ``devices.board`` for the candidate-first decode yolo-edge runs, against each published figure (:data:`POST`,
    :data:`POST_GO`), and beside the same decode measured on this machine (one of its cores)."""
    assert cpu is not None
    board = BoardCpu(cpu)
    ms = [(board.decode_s(8400, 80, 16, c) + board.suppress_s(c)) * 1e3 for c in POST_CANDIDATES]
    for figure in (POST, POST_GO):
        ratio = max(ms) / figure.ms
        verdict = "met" if 1 / FIT_TOLERANCE <= ratio <= FIT_TOLERANCE else "NOT met"
        print(
            f"post-processing check ({figure.source}): published {figure.ms} ms; modelled {min(ms):.3f}-{max(ms):.3f} "
            f"ms for {POST_CANDIDATES[0]}-{POST_CANDIDATES[-1]} candidates: {ratio:.2f}x (within {FIT_TOLERANCE}x: "
            f"{verdict}; the published kernel also dequantises int8 outputs in scalar code, work the model does not "
            "price for yolo-edge's float outputs)"
        )
    host = [host_decode_ms(c) for c in POST_CANDIDATES]
    print(
        f"the same decode + NMS measured here ({cpu_name()}, numpy on one core): {host[0]:.3f} / {host[1]:.3f} / "
        f"{host[2]:.3f} ms for {' / '.join(map(str, POST_CANDIDATES))} candidates, modelled for the A76 "
        f"{' / '.join(f'{m:.3f}' for m in ms)}: the model prices a 2.4 GHz A76 core at about this machine's speed "
        f"and barely charges the candidates (their DFL and boxes, in small numpy calls: +{host[-1] - host[0]:.3f} ms "
        f"here from {POST_CANDIDATES[0]} to {POST_CANDIDATES[-1]}, +{ms[-1] - ms[0]:.3f} modelled), so it is "
        "optimistic for the board's post-processing\n"
    )


def scaled(cpu: CpuModel, slower: float, clock: float) -> CpuModel:
    """``cpu`` ``slower`` times slower in all three costs, then its arithmetic and launches ``clock`` times faster."""
    return CpuModel(
        gflops=cpu.gflops / slower * clock,
        dram_gbps=cpu.dram_gbps / slower,
        op_overhead_us=cpu.op_overhead_us * slower / clock,
    )


def left_out(times: dict[str, float]) -> tuple[float, dict[str, float]]:
    """The median over :data:`NCNN`'s networks of ``times`` over the Raspberry Pi 5's, and each network's published
    time over the one that median, fitted without it, predicts."""
    pi5 = ncnn(0)
    ratio = {n: times[n] / pi5[n] for n in times}
    return float(np.median(list(ratio.values()))), {
        n: float(np.median([ratio[m] for m in ratio if m != n])) / ratio[n] for n in ratio
    }


def worst(loo: dict[str, float]) -> float:
    """The largest factor by which a network's published time and the scale fitted without it disagree."""
    return max(max(v, 1 / v) for v in loo.values())


def verdict(loo: dict[str, float]) -> str:
    """How many of ``loo``'s networks the scale fitted without them predicts within the tolerance, and the worst."""
    within = sum(1 / FIT_TOLERANCE <= v <= FIT_TOLERANCE for v in loo.values())
    met = "met" if worst(loo) <= FIT_TOLERANCE else "NOT met"
    return (
        f"{within} of {len(loo)} networks within {FIT_TOLERANCE}x of the scale fitted without them, "
        f"worst {worst(loo):.3f}x ({met})"
    )


def transfer(name: str, column: int, a76_cpu: CpuModel, clock: float) -> CpuModel:
    """The A76 fit scaled by the median over :data:`NCNN`'s networks of board ``name``'s times (``column``) over the
    Raspberry Pi 5's, its arithmetic and launches ``clock`` times faster; each network checked against the scale
    fitted without it and against the Pi 5's second run."""
    pi5, again, times = ncnn(0), ncnn(1), ncnn(column)
    slower, loo = left_out(times)
    print(f"{name}: ncnn's times over the Raspberry Pi 5's, {len(loo)} networks")
    print(f"| network | Pi 5 ms | {name} ms | ratio | scale without it: modelled / published | Pi 5's second run |")
    print("|---|---|---|---|---|---|")
    for n in loo:
        print(
            f"| {n} | {pi5[n]:.2f} | {times[n]:.2f} | {times[n] / pi5[n]:.3f} | {loo[n]:.3f} | "
            f"{slower * again[n] / times[n]:.3f} |"
        )
    print(f"scale {slower:.3f}x the A76's times; {verdict(loo)}")
    return scaled(a76_cpu, slower, clock)


def control() -> None:
    """The transfer's method between two boards with the same cores at the same clock (the RK3588's four A76 cores
    and the Raspberry Pi 5's): how far apart these published figures are when no core differs, the finest a
    transfer from them can be checked to, beside the transfers' own worst (RZ/G2L, SM8550)."""
    same, loo = left_out(ncnn(3))
    transfers = max(worst(left_out(ncnn(column))[1]) for column in (2, 6))
    than = "more" if worst(loo) > transfers else "less"
    print(
        f"control, the same method from the Pi 5 to the RK3588's own 4x A76 at 2.4 GHz (the same cores and clock): "
        f"scale {same:.3f}x; {verdict(loo)}. The published figures scatter this much between two boards with the "
        f"same cores, {than} than the transfers above miss by (worst {transfers:.3f}x)\n"
    )


def a55(a76_cpu: CpuModel) -> CpuModel:
    """ethos-u65's Cortex-A55 model: the RZ/G2L's transfer at the i.MX 93's clock; the RK3588's own A55 cores give
    the fast end."""
    cpu = transfer("RZ/G2L (2x A55)", 2, a76_cpu, A55_GHZ["i.MX 93"] / A55_GHZ["RZ/G2L"])
    big, one, four = ncnn(3), ncnn(4), ncnn(5)
    fast = float(np.median([np.sqrt(one[n] * four[n]) / big[n] for n in big]))
    bound = scaled(a76_cpu, fast, A55_GHZ["i.MX 93"] / A55_GHZ["RK3588"])
    print(
        f"profile ethos-u65: cpu: {{gflops: {cpu.gflops:.2f}, dram_gbps: {cpu.dram_gbps:.2f}, op_overhead_us: "
        f"{cpu.op_overhead_us:.0f}}} (arithmetic and launch at 1.7 / 1.5 GHz)"
    )
    print(
        f"fast end, two of the RK3588's own A55 cores at 1.7 GHz ({fast:.2f}x its A76 cores' times): {{gflops: "
        f"{bound.gflops:.2f}, dram_gbps: {bound.dram_gbps:.2f}, op_overhead_us: {bound.op_overhead_us:.0f}}}, "
        f"{bound.gflops / cpu.gflops:.2f}x the profile's speed\n"
    )
    return cpu


def main() -> None:
    from ultralytics.utils import LOGGER

    LOGGER.setLevel(logging.WARNING)
    models = sorted({f.model for f in A76} | {f.model for f in QCS6490} | {"yolov8s.yaml"})
    with tempfile.TemporaryDirectory() as tmp:
        infos = {m: graph(m, Path(tmp)) for m in models}
    cpu = board("rk3588 CPU (Cortex-A76)", A76, infos)
    print(
        f"profile rk3588: cpu: {{gflops: {cpu.gflops:.1f}, dram_gbps: {cpu.dram_gbps:.2f}, "
        f"op_overhead_us: {cpu.op_overhead_us:.1f}}}\n"
    )
    kryo = board("qcs6490 CPU (Kryo 670)", QCS6490, infos)
    print(
        f"profile qcs6490: cpu: {{gflops: {kryo.gflops:.1f}, dram_gbps: {kryo.dram_gbps:.2f}, "
        f"op_overhead_us: {kryo.op_overhead_us:.1f}}}\n"
    )
    a55(cpu)
    fast = transfer("SM8550 (X3, A715, A710)", 6, cpu, 1.0)
    print(
        f"profile qcs8550: cpu: {{gflops: {fast.gflops:.1f}, dram_gbps: {fast.dram_gbps:.2f}, op_overhead_us: "
        f"{fast.op_overhead_us:.1f}}}\n"
    )
    control()
    post_check(load_profile("rk3588").cpu)
    for chip in ("rk3588", "qcs6490", "qcs8550", "ethos-u65"):
        model = load_profile(chip).cpu
        assert model is not None
        shown = ", ".join(
            f"{m.removesuffix('.yaml')} {cpu_time(infos[m], model).total_ms:.1f}"
            for m in ("yolov8n.yaml", "yolov8s.yaml")
        )
        print(f"{chip} as shipped: whole model at 640 on the board CPU, modelled ms: {shown}")


if __name__ == "__main__":
    import results_page

    with results_page.page("board-cpu", "Board CPU models: the fits and their checks"):
        main()
