"""``benchmarks/README.md`` and ``growth.png`` from ``results.json`` (``run_all.py --render-only`` redoes
just this). Every figure in the README comes from the results; the prose says what limits an unmet goal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

GOAL_E2E = 0.90
GOAL_SPLIT = 1.03
GOAL_POST_MS = 1.0
GOAL_ACCEL = 2.5
MAX_DRIFT = 0.01


def _met(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def _table(header: list[str], rows: list[list[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def _end_to_end(r: dict[str, Any]) -> list[str]:
    rows, ok = [], True
    for e in r["end_to_end"]:
        ok &= e["ratio"]["yolo-edge"] <= GOAL_E2E
        for path, ms in e["median_ms"].items():
            ph = e["phases"][path]
            rows.append(
                [f"{e['model']} {e['imgsz']}", path, f"{ms:.2f}", f"{e['ratio'][path]:.3f}x", f"{ph['preprocess']:.2f}",
                 f"{ph['inference']:.2f}", f"{ph['postprocess']:.2f}", e["detections"][path]]
            )  # fmt: skip
    out = [
        "## 1. End to end per image",
        "",
        "`bus.jpg` in, detections out, the same ONNX (yaml weights) at 640, conf 0.25: ultralytics'",
        "`YOLO(onnx).predict`, a bare `onnxruntime.InferenceSession` (its default options) with yolo-edge's",
        "letterbox and NMS, and yolo-edge's whole-cpu plan (`Detector`, the executor with its fallback machinery).",
        f"Goal: yolo-edge <= {GOAL_E2E:.2f}x ultralytics' time for YOLOv8n and YOLOv8s (and the trained model):",
        f"{_met(ok)}.",
        "",
        *_table(
            ["model", "path", "median ms", "vs ultralytics", "pre ms", "inference ms", "post ms", "detections"], rows
        ),
        "",
        "Phases are each path's own (ultralytics' `Results.speed`); the trained row is a 2-class YOLOv8n",
        "(`tests/data/coins_sparks_yolov8n.pt`), as a user's own model. The bare session and yolo-edge run the",
        "same graph with the same pre- and post-processing. Where the issue's 17 % went: its interleaving timed",
        "each call right after another runtime's, paying for that one's spinning threads and for cold caches",
        "(the paths now run in short blocks); yolo-edge's sessions never let their threads spin between ops",
        "(now they do, and stop when a run returns, so a split's next runtime is not spun through: table 2);",
        "its letterbox made three float copies of the image (now one pass per channel, bitwise the same); its",
        "NMS looped in Python per kept box (now per-class pairs in numpy, table 3).",
        "",
    ]
    if not ok:
        cpu = next(x for x in r["limit"]["rows"] if x["plan"] == "all-CPU FP32")
        ov = next(x for x in r["limit"]["rows"] if x["plan"] == "whole graph, openvino fp32")
        out += [
            "",
            "What limits it: the three paths run the same onnxruntime FP32 session on the same graph, and the",
            "session is nearly all of the time (the inference column); yolo-edge's pre- and post-processing are",
            f"the smallest of the three. That session runs YOLOv8s at {100 * cpu['of_peak']:.0f} % of this CPU's FP32",
            f"GEMM peak (table 5), and OpenVINO's FP32 at {100 * ov['of_peak']:.0f} % of its own: no FP32 engine here",
            "has 10 % to give (OpenVINO's FP32 for the whole graph was tried: table 5). The lever is precision:",
            "the deployed split (table 4).",
        ]
    return out


def _split_overhead(r: dict[str, Any]) -> list[str]:
    rows, ok = [], True
    for e in r["split_overhead"]:
        for path, ms in e["median_ms"].items():
            ok &= e["ratio"][path] <= GOAL_SPLIT
            rows.append([f"{e['model']} {e['imgsz']}", path, f"{ms:.2f}", f"{e['ratio'][path]:.3f}x"])
    return [
        "## 2. Split overhead",
        "",
        "Model only, FP32 on the CPU: the monolithic session vs the whole-cpu plan run by the executor as one",
        "fused unit (as deployed) and as the four subgraphs (`runtime.fuse_units: false`).",
        f"Goal: <= {GOAL_SPLIT:.2f}x the monolithic session: {_met(ok)}.",
        "",
        *_table(["model", "path", "median ms", "vs monolithic"], rows),
    ]


def _postprocess(r: dict[str, Any]) -> list[str]:
    rows = []
    ok = True
    for e in r["postprocess"]:
        ours, theirs = e["median_ms"]["yolo-edge"], e["median_ms"]["ultralytics"]
        if "synthetic" in e["tensor"]:
            ok &= ours <= GOAL_POST_MS if e["conf"] >= 0.25 else ours <= theirs
        dets = e["detections"]
        rows.append(
            [e["tensor"], e["conf"], "multi-label" if e["multi_label"] else "best class", e["candidates"],
             f"{ours:.3f}", f"{theirs:.3f}", f"{e['ratio']['yolo-edge']:.2f}x",
             f"{dets['yolo-edge']} / {dets['ultralytics']}"]
        )  # fmt: skip
    return [
        "## 3. Post-processing",
        "",
        "Decode output -> NMS (IoU 0.7, 300 detections at most) -> boxes in image pixels. yolo-edge: numpy",
        "(`pipeline/postprocess.py`); ultralytics: `non_max_suppression` (torchvision's NMS) + `scale_boxes`.",
        "The synthetic tensor is `side_by_side.synthetic_output` (15 objects, a trained model's score tail);",
        "the demo row is the demo model's real output on a validation image.",
        f"Goal: <= {GOAL_POST_MS:.0f} ms at conf 0.25 and no slower than ultralytics at conf 0.001 (8400 x 80):",
        f"{_met(ok)}.",
        "",
        *_table(
            ["tensor", "conf", "labels", "candidates", "yolo-edge ms", "ultralytics ms", "ratio", "dets (ours/ul)"],
            rows,
        ),
    ]


def peak_ratio(r: dict[str, Any]) -> tuple[float, str]:
    """Best low-precision GEMM peak over the FP32 one (onnxruntime), and which."""
    fp32 = r["peaks"]["onnxruntime fp32"]["gflops"]  # the all-CPU plan's engine
    low = {k: v["gflops"] for k, v in r["peaks"].items() if "fp32" not in k}
    best = max(low, key=lambda k: low[k])
    return low[best] / fp32, best


def _accelerator(r: dict[str, Any]) -> list[str]:
    a = r["accelerator"]
    ratio, best = peak_ratio(r)
    goal = min(GOAL_ACCEL, ratio)
    s = a["yolov8s"]
    head = s["ratio"]["split, head on the NPU"]
    drift = a["demo_deploy"]["drift"] or {"map50": float("nan"), "map50_95": float("nan")}
    drift_ok = abs(drift["map50"]) <= MAX_DRIFT and abs(drift["map50_95"]) <= MAX_DRIFT
    ok = 1 / head >= goal and drift_ok
    rows = [[f"yolov8s {s['imgsz']}", k, f"{ms:.2f}", f"{1 / s['ratio'][k]:.2f}x"] for k, ms in s["median_ms"].items()]
    demo = a["demo"]
    rows += [["demo 320", k, f"{ms:.2f}", f"{1 / demo['ratio'][k]:.2f}x"] for k, ms in demo["median_ms"].items()]
    return [
        "## 4. The accelerator pays",
        "",
        "The demo deployed on `host-lowp` (OpenVINO's CPU plugin as the accelerator) with `plan.head_on_npu: auto`:",
        f"`{a['demo_deploy']['placement']}`, chosen {a['demo_deploy']['chosen']}, status {a['demo_deploy']['status']},",
        f"drift mAP50 {drift['map50']:+.4f}, mAP50-95 {drift['map50_95']:+.4f} against the FP32 reference (limit",
        f"{MAX_DRIFT}). YOLOv8s (yaml weights: speed only) runs that placement, and the same with the head on the",
        "CPU (the design card's layout, `head_on_npu: never`); end to end on `bus.jpg`; the demo end to end on its",
        "validation images.",
        f"Peak ratio on this CPU: {best} / onnxruntime fp32 = {ratio:.2f}x (table 5), so the goal is",
        f"{goal:.2f}x for YOLOv8s at 640 with the demo's drift <= {MAX_DRIFT}: {_met(ok)} ({1 / head:.2f}x).",
        "",
        *_table(["model", "plan", "median ms", "speed-up vs all-CPU"], rows),
        "",
        f"What keeps it under the peak ratio ({ratio:.2f}x): decode stays FP32 on the CPU (the mission), the",
        "image's letterbox and the NMS are CPU work the accelerator cannot take, every unit boundary hands a",
        "tensor from one runtime to the other, and the INT8 peak is reached only by large GEMMs: YOLOv8's early",
        "convolutions have few channels and are bandwidth-bound (table 5: how far each plan is from its floor).",
    ]


def _limit(r: dict[str, Any]) -> list[str]:
    peaks = [
        [k, f"{v['matmul_gflops']:.0f}", f"{v['conv1x1_gflops']:.0f}", f"**{v['gflops']:.0f}**"]
        for k, v in r["peaks"].items()
    ]
    lim = r["limit"]
    rows = [[x["plan"], f"{x['ms']:.2f}", f"{x['floor_ms']:.2f}", f"{100 * x['of_peak']:.0f} %"] for x in lim["rows"]]
    return [
        "## 5. Distance from the limit",
        "",
        "This machine's peak: a GEMM through the runtimes yolo-edge uses, as a 2048-square MatMul and as a 1x1",
        "convolution (1024 channels in and out, 64x64 pixels: a detector's form), INT8 as the QDQ graph its",
        "INT8 units are (u8 activations, s8 weights); an engine's peak is the better of the two.",
        "",
        *_table(["engine", "MatMul GFLOP/s", "1x1 conv GFLOP/s", "peak"], peaks),
        "",
        f"YOLOv8s at 640, model only ({lim['gemm_gflop']} GFLOP in convolutions): each plan's time against its",
        "floor (every unit's convolution FLOPs at the peak of the engine and precision it runs in).",
        "",
        *_table(["plan", "ms", "floor ms", "of peak"], rows),
    ]


def _growth(r: dict[str, Any], out: Path) -> list[str]:
    rows = [
        [g["model"], g["imgsz"], g["plan"], f"{g['ms']:.1f}", f"{g['run_peak_mb']:.0f}", f"{g['run_rise_mb']:.0f}",
         f"{g['build_peak_mb']:.0f}"]
        for g in r["growth"]
    ]  # fmt: skip
    _plot(r["growth"], out / "growth.png")
    return [
        "## 6. Cost of growth",
        "",
        "End to end on `bus.jpg` (median), in a fresh process per configuration: its memory peak while running",
        "frames, that peak over the process after its imports, and its peak while building (the split calibrates,",
        "quantizes and compiles: the INT8 calibrator keeps every activation of the calibration images). The",
        "split runs the placement of table 4; its process holds every accelerator unit twice (compiled at low",
        "precision, and its FP32 CPU twin for the fallback), so its memory grows faster with image size.",
        "",
        *_table(["model", "imgsz", "plan", "ms", "run peak MB", "run rise MB", "build peak MB"], rows),
        "",
        "![latency and memory vs image size](growth.png)",
    ]


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    models = sorted({g["model"] for g in rows})
    for key in sorted({(g["model"], g["plan"]) for g in rows}):
        pts = sorted((g["imgsz"], g["ms"], g["run_peak_mb"]) for g in rows if (g["model"], g["plan"]) == key)
        style = {"color": f"C{models.index(key[0])}", "ls": "-" if key[1] == "split" else "--", "marker": "o"}
        ax1.plot([p[0] for p in pts], [p[1] for p in pts], **style, label=f"{key[0]} {key[1]}")
        ax2.plot([p[0] for p in pts], [p[2] for p in pts], **style, label=f"{key[0]} {key[1]}")
    ax1.set(xlabel="imgsz", ylabel="end-to-end ms (median)", yscale="log", title="latency")
    ax2.set(xlabel="imgsz", ylabel="process memory peak while running, MB", title="memory")
    ax1.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(r: dict[str, Any], out: Path) -> None:
    v = r["versions"]
    lines = [
        "# Benchmarks",
        "",
        "Generated by `YOLO_OFFLINE=1 python benchmarks/run_all.py` (do not edit: rerun it) on",
        f"{r['date']}, in {r['wall_s'] / 60:.1f} min{' (--quick)' if r['quick'] else ''}.",
        f"**CPU: {r['cpu']}, {r['cores']} cores.** onnxruntime {v['onnxruntime']}, OpenVINO {v['openvino']},",
        f"ultralytics {v['ultralytics']}, numpy {v['numpy']}, Python {v['python']}. Results: `results.json`.",
        "",
        "Every comparison runs in one process, its paths interleaved: in each round every path runs one untimed",
        "call and 4 timed ones in a row (a stream through one path; the call after a switch of runtime pays for",
        "the other's threads and caches, whoever goes first), in an order that rotates from round to round. A",
        "ratio is the median of the per-round ratios. Shared machines are noisy: compare ratios, not",
        "milliseconds, and only on the CPU named here (other CPUs differ most in low precision).",
        "Other benchmarks (`split_vs_cpu.py`, `stream_throughput.py`, ...) print their own figures.",
        "",
    ]
    for section in (_end_to_end(r), _split_overhead(r), _postprocess(r), _accelerator(r), _limit(r), _growth(r, out)):
        lines += [*section, ""]
    (out / "README.md").write_text("\n".join(lines))
