"""The measurements behind ``benchmarks/run_all.py``: yolo-edge against what users would pick instead
(ultralytics' ONNX predictor, a bare onnxruntime session), the split's overhead, post-processing, the
accelerator's gain, and the machine's own limit. Each comparison runs in one process, the paths
interleaved in short blocks in rotating order (``interleave``); ratios are medians of per-round ratios.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import onnxruntime as ort

from yolo_edge.backends import cpu_backend
from yolo_edge.backends.builder import Builder  # noqa: E402
from yolo_edge.core.config import DeployConfig, NmsConfig, load_deploy_config, load_profile
from yolo_edge.model.export import export_model
from yolo_edge.model.meta import ExportedModel
from yolo_edge.model.split import SplitModel, split_model
from yolo_edge.pipeline.detector import Detector
from yolo_edge.pipeline.postprocess import postprocess
from yolo_edge.pipeline.preprocess import Letterboxed, letterbox
from yolo_edge.plan.placement import PlacementPlan
from yolo_edge.runtime.build import build_units
from yolo_edge.runtime.events import EventLog
from yolo_edge.runtime.executor import SplitExecutor

BLOCK = 4  # timed calls in a row per path and round


@dataclass(frozen=True)
class Timed:
    """Medians (ms) of each path, and each path's median per-round ratio to the first (the baseline), with the
    quartiles of those per-round ratios (how far one round's ratio strays: the run's own noise)."""

    median_ms: dict[str, float]
    ratio: dict[str, float]
    rounds: int
    ratio_quartiles: dict[str, tuple[float, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {"median_ms": self.median_ms, "ratio": self.ratio, "rounds": self.rounds}


def interleave(paths: Mapping[str, Callable[[], object]], rounds: int, block: int = BLOCK) -> Timed:
    """Time ``paths`` round by round; the first key is the baseline. In a round each path runs one untimed
    call, then ``block`` timed calls in a row (a stream of frames through one path, in its steady state:
    switching runtimes costs the first call after the switch, whoever goes first); the order of the paths
    rotates from round to round, so a change in the machine's speed lands on all of them."""
    names = list(paths)
    times: dict[str, list[float]] = {n: [] for n in names}
    ratios: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        this_round: dict[str, float] = {}
        for name in names[k:] + names[:k]:
            paths[name]()
            got = []
            for _ in range(block):
                t0 = time.perf_counter()
                paths[name]()
                got.append((time.perf_counter() - t0) * 1e3)
            times[name] += got
            this_round[name] = statistics.median(got)
        for name in names:
            ratios[name].append(this_round[name] / this_round[names[0]])
    return Timed(
        {n: round(statistics.median(v), 3) for n, v in times.items()},
        {n: round(statistics.median(v), 4) for n, v in ratios.items()},
        rounds,
        {n: _quartiles(v) for n, v in ratios.items()},
    )


def _quartiles(values: list[float]) -> tuple[float, float]:
    """The first and third quartiles of ``values`` (both the value itself for a single round)."""
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4)
    return round(q[0], 4), round(q[2], 4)


def bus_image() -> np.ndarray:
    from ultralytics.utils import ASSETS

    image = cv2.imread(str(ASSETS / "bus.jpg"))
    assert image is not None
    return image


def cpu_detector(split: SplitModel, image: np.ndarray, cfg: DeployConfig, fuse: bool = True) -> Detector:
    """The whole-cpu plan as deploy builds it: every subgraph FP32 on onnxruntime, fused into one unit."""
    profile = load_profile("cpu")
    calib = [{"images": letterbox(image, split.exported.meta.imgsz).tensor}]
    units = build_units(split, PlacementPlan.manual(split, {}, "cpu"), Builder(profile), calib, EventLog(), fuse=fuse)
    return Detector(SplitExecutor(units, cfg.runtime, profile), split.exported.meta, cfg.nms)


def _ultralytics_predict(exported: ExportedModel, image: np.ndarray, phases: list[dict[str, float]]) -> Any:
    from ultralytics import YOLO

    yolo = YOLO(str(exported.path), task="detect")
    imgsz = list(exported.meta.imgsz)

    def run() -> int:
        result = yolo.predict(image, imgsz=imgsz, conf=0.25, iou=0.7, verbose=False)[0]
        phases.append(dict(result.speed))
        return len(result.boxes)

    return run


def _bare_onnxruntime(exported: ExportedModel, image: np.ndarray, phases: list[dict[str, float]]) -> Any:
    """A plain ``InferenceSession`` (onnxruntime's defaults) with yolo-edge's letterbox and NMS around it."""
    session = ort.InferenceSession(str(exported.path), providers=["CPUExecutionProvider"])
    meta = exported.meta

    def run() -> int:
        t0 = time.perf_counter()
        lb = letterbox(image, meta.imgsz)
        t1 = time.perf_counter()
        out = session.run(None, {"images": lb.tensor})[0]
        t2 = time.perf_counter()
        n = len(postprocess({"output0": out}, lb, meta.names, NmsConfig(0.25, 0.7, 300)))
        t3 = time.perf_counter()
        phases.append({"preprocess": (t1 - t0) * 1e3, "inference": (t2 - t1) * 1e3, "postprocess": (t3 - t2) * 1e3})
        return n

    return run


def end_to_end(model: str, imgsz: int, image: np.ndarray, rounds: int) -> dict[str, object]:
    """Image in, detections out, on one ONNX: ultralytics' predict vs a bare session vs the whole-cpu plan."""
    cfg = load_deploy_config()
    with tempfile.TemporaryDirectory() as tmp:
        exported = export_model(model, imgsz=imgsz, out_dir=tmp)
        phases: dict[str, list[dict[str, float]]] = {"ultralytics": [], "bare onnxruntime": [], "yolo-edge": []}
        with cpu_detector(split_model(exported), image, cfg) as detector:

            def ours() -> int:
                dets, t = detector.detect(image)
                inference = sum(t.unit_ms.values())
                phases["yolo-edge"].append(
                    {"preprocess": t.preprocess_ms, "inference": inference, "postprocess": t.postprocess_ms}
                )
                return len(dets)

            paths = {
                "ultralytics": _ultralytics_predict(exported, image, phases["ultralytics"]),
                "bare onnxruntime": _bare_onnxruntime(exported, image, phases["bare onnxruntime"]),
                "yolo-edge": ours,
            }
            detections = {k: int(run()) for k, run in paths.items()}
            timed = interleave(paths, rounds)
    per_phase = {
        k: {p: round(statistics.median(f[p] for f in v), 3) for p in ("preprocess", "inference", "postprocess")}
        for k, v in phases.items()
    }
    name = Path(model).stem
    return {"model": name, "imgsz": imgsz, **timed.to_dict(), "phases": per_phase, "detections": detections}


def split_overhead(model: str, imgsz: int, rounds: int) -> dict[str, object]:
    """Model only: the monolithic FP32 session vs the whole-cpu plan fused (one unit) and as four units."""
    cfg = load_deploy_config()
    x = np.random.default_rng(0).random((1, 3, imgsz, imgsz), dtype=np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        exported = export_model(model, imgsz=imgsz, out_dir=tmp)
        split = split_model(exported)
        mono = cpu_backend().compile(exported.load(), "fp32")
        image = np.zeros((imgsz, imgsz, 3), np.uint8)
        with cpu_detector(split, image, cfg) as fused, cpu_detector(split, image, cfg, fuse=False) as four:
            paths = {
                "monolithic session": lambda: mono.run({"images": x}),
                "fused CPU plan": lambda: fused.executor.run({"images": x}),
                "four-subgraph CPU plan": lambda: four.executor.run({"images": x}),
            }
            timed = interleave(paths, rounds)
    return {"model": Path(model).stem, "imgsz": imgsz, **timed.to_dict()}


# ---------------------------------------------------------------- post-processing


def synthetic_output(nc: int = 80, anchors: int = 8400, objects: int = 15, imgsz: int = 640) -> np.ndarray:
    """A (1, 4+nc, anchors) decode output shaped like a trained detector's on a busy image: background
    class scores sigmoid(N(-10.5, 1.5)) (about 0.1 % of them above 0.001, as a COCO model's tail), and
    ``objects`` objects, each seen by 20-60 anchors with jittered boxes, its class at up to 0.95 and a second
    class at up to 0.3. Seeded: the same tensor every run."""
    rng = np.random.default_rng(0)
    out = np.empty((1, 4 + nc, anchors), np.float32)
    out[0, 0:2] = rng.uniform(0, imgsz, (2, anchors))
    out[0, 2:4] = rng.uniform(8, imgsz / 3, (2, anchors))
    out[0, 4:] = 1 / (1 + np.exp(-rng.normal(-10.5, 1.5, (nc, anchors))))
    for _ in range(objects):
        cx, cy = rng.uniform(50, imgsz - 50, 2)
        w, h = rng.uniform(20, 200, 2)
        idx = rng.choice(anchors, int(rng.integers(20, 60)), replace=False)
        out[0, 0, idx] = cx + rng.normal(0, w * 0.05, len(idx))
        out[0, 1, idx] = cy + rng.normal(0, h * 0.05, len(idx))
        out[0, 2, idx] = w * rng.uniform(0.9, 1.1, len(idx))
        out[0, 3, idx] = h * rng.uniform(0.9, 1.1, len(idx))
        out[0, 4 + rng.integers(nc), idx] = rng.uniform(0.5, 0.95) * rng.uniform(0.2, 1.0, len(idx))
        out[0, 4 + rng.integers(nc), idx] = rng.uniform(0.01, 0.3, len(idx))
    return out


def postprocessing(label: str, output: np.ndarray, lb: Letterboxed, rounds: int) -> list[dict[str, object]]:
    """decode output -> NMS -> boxes in image pixels: yolo-edge's numpy path vs ultralytics' torch path
    (``non_max_suppression`` + ``scale_boxes``), at the predictor's and the validator's settings."""
    import torch
    from ultralytics.utils.nms import non_max_suppression
    from ultralytics.utils.ops import scale_boxes

    names = tuple(str(i) for i in range(output.shape[1] - 4))
    tensor = torch.from_numpy(output)
    net = lb.tensor.shape[2:]
    rows = []
    for conf, multi in ((0.25, False), (0.001, True)):

        def ultralytics_post(conf: float = conf, multi: bool = multi) -> int:
            det = non_max_suppression(tensor, conf, 0.7, multi_label=multi, max_det=300)[0]
            det[:, :4] = scale_boxes(net, det[:, :4], lb.orig_shape)
            return len(det)

        def ours(conf: float = conf, multi: bool = multi) -> int:
            return len(postprocess({"output0": output}, lb, names, NmsConfig(conf, 0.7, 300, multi)))

        timed = interleave({"ultralytics": ultralytics_post, "yolo-edge": ours}, rounds if conf > 0.01 else rounds // 4)
        detections = {"ultralytics": ultralytics_post(), "yolo-edge": ours()}
        candidates = int((output[0, 4:] > conf).sum()) if multi else int((output[0, 4:].max(0) > conf).sum())
        rows.append(
            {"tensor": label, "conf": conf, "multi_label": multi, "candidates": candidates, "detections": detections}
            | timed.to_dict()
        )
    return rows
