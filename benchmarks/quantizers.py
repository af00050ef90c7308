"""OpenVINO's INT8 quantizers compared on the CPU this runs on: NNCF (yolo-edge's default, as ultralytics'
OpenVINO INT8 export runs it) against onnxruntime's ``quantize_static`` with the Q/DQ placed where NNCF places
them (yolo-edge's recipe before NNCF), each with asymmetric ``u8`` and symmetric ``s8`` activations.

Backbone and neck at INT8 on OpenVINO, head and decode FP32 on onnxruntime (the default split), on the demo
model (its labelled val split: drift against labels) and on the second model (``tests/data``, 2 classes: its
own synthetic photos, drift in agreement with the FP32 reference on the labelled scale). Per recipe: the
detector output's class-score and box cosine against FP32 (the minimum over the images), the drift, and the
model's latency against the FP32 split, interleaved frame by frame (median of per-frame ratios). It prints
the CPU and the overflow fix NNCF used (``first_layer_only`` where int8 products saturate: no VNNI/AMX).

    YOLO_OFFLINE=1 python benchmarks/quantizers.py [--imgsz 320] [--frames 100] [--images 300]
    ONEDNN_MAX_CPU_ISA=AVX2 YOLO_OFFLINE=1 python benchmarks/quantizers.py   # oneDNN's kernels capped at AVX2

The second line caps the INT8 kernels OpenVINO's CPU plugin picks at AVX2 (oneDNN's dispatcher control): on a
machine with VNNI it shows the saturating u8 x s8 products of an AVX2-only CPU (not that CPU's speed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.second_model import SECOND_CLASSES, SECOND_MODEL  # noqa: E402
from yolo_edge.backends.base import cosine  # noqa: E402
from yolo_edge.backends.builder import Builder  # noqa: E402
from yolo_edge.backends.openvino.nncf_int8 import overflow_fix  # noqa: E402
from yolo_edge.core.config import load_deploy_config, load_profile  # noqa: E402
from yolo_edge.core.host import cpu_name  # noqa: E402
from yolo_edge.core.progress import progress_bar  # noqa: E402
from yolo_edge.data.resolve import EvalData, resolve_data, resolve_eval_data  # noqa: E402
from yolo_edge.demo import CLASS_NAMES, write_dataset  # noqa: E402
from yolo_edge.model.export import export_model
from yolo_edge.model.meta import demo_model_path  # noqa: E402
from yolo_edge.model.split import SplitModel, split_model  # noqa: E402
from yolo_edge.pipeline.detector import Detector  # noqa: E402
from yolo_edge.pipeline.preprocess import load_images  # noqa: E402
from yolo_edge.plan.placement import PlacementPlan, boundary_tensors  # noqa: E402
from yolo_edge.runtime.build import build_units  # noqa: E402
from yolo_edge.runtime.events import EventLog  # noqa: E402
from yolo_edge.runtime.executor import SplitExecutor  # noqa: E402
from yolo_edge.validate.accuracy import Scorer, detect_all  # noqa: E402

RECIPES = ("int8/u8/nncf", "int8/s8/nncf", "int8/u8/qdq", "int8/s8/qdq")


def _detector(split: SplitModel, npu: dict[str, str], calib: list[dict[str, np.ndarray]]) -> Detector:
    cfg, profile = load_deploy_config(), load_profile("host-lowp")
    profile = replace(profile, runtime_options=replace(profile.runtime_options, int8_quantizer="auto"))  # both
    units = build_units(split, PlacementPlan.manual(split, npu, profile.name), Builder(profile), calib, EventLog())
    return Detector(SplitExecutor(units, cfg.runtime, profile), split.exported.meta, cfg.nms)


def _fidelity(split: SplitModel, detector: Detector, tensors: list[dict[str, np.ndarray]]) -> tuple[float, float]:
    """(min class-score cosine, min box cosine) of the detector output against FP32 on held-out images."""
    scores, boxes = 1.0, 1.0
    for t in tensors:
        out = detector.executor.run({split.input.name: t[split.input.name]}).outputs[split.output.name]
        ref = t[split.output.name]
        scores, boxes = min(scores, cosine(out[:, 4:], ref[:, 4:])), min(boxes, cosine(out[:, :4], ref[:, :4]))
    return scores, boxes


def _ratio(reference: Detector, detector: Detector, images: list[np.ndarray], frames: int) -> float:
    """Median per-frame ratio of ``detector``'s model time to ``reference``'s, interleaved in alternating order."""
    ratios = []
    for i in range(frames):
        feeds = {"images": images[i % len(images)]}
        took = {}
        for name, d in (("ref", reference), ("int8", detector)) if i % 2 else (("int8", detector), ("ref", reference)):
            t0 = time.perf_counter()
            d.executor.run(feeds)
            took[name] = time.perf_counter() - t0
        if i >= 5:  # warm-up frames
            ratios.append(took["int8"] / took["ref"])
    return statistics.median(ratios)


def compare(name: str, model: str | Path, imgsz: int, data: EvalData, calib_files: list[Path], frames: int) -> None:
    cfg = load_deploy_config()
    with tempfile.TemporaryDirectory() as tmp:
        split = split_model(export_model(model, imgsz=imgsz, out_dir=tmp))
        size = split.exported.meta.imgsz
        calib = boundary_tensors(split, load_images(calib_files, size))
        held_out = boundary_tensors(split, load_images([r.path for r in data.dataset.records[:16]], size))
        bar = progress_bar(False)
        with _detector(split, {}, calib) as reference:
            ref = detect_all(reference, data.dataset, cfg.val_nms, bar, "")
            scorer = Scorer(data, ref, cfg.validate, cfg.nms)
            base = scorer.score(ref)
            frames_in = [t[split.input.name] for t in held_out]
            print(
                f"\n{name} at {imgsz}: calibrated on {len(calib_files)} images, judged on {len(data.dataset)} others "
                f"(drift by {base.criterion})"
            )
            print("| recipe | class-score cosine | box cosine | drift 50 | drift 50-95 | latency vs FP32 split |")
            print("|---|---|---|---|---|---|")
            for recipe in RECIPES:
                with _detector(split, {"backbone": recipe, "neck": recipe}, calib) as d:
                    scores, boxes = _fidelity(split, d, held_out)
                    drift = scorer.score(detect_all(d, data.dataset, cfg.val_nms, bar, "")).minus(base).map
                    ratio = _ratio(reference, d, frames_in, frames)
                print(
                    f"| {recipe} | {scores:.4f} | {boxes:.4f} | {drift.map50:+.4f} | {drift.map50_95:+.4f} | "
                    f"{ratio:.2f}x |",
                    flush=True,
                )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--imgsz", type=int, default=320)
    p.add_argument("--frames", type=int, default=100)
    p.add_argument("--images", type=int, default=300, help="evaluation images per model")
    args = p.parse_args()
    cfg = load_deploy_config()
    print(f"CPU: {cpu_name()}; ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', '(unset)')}")
    print(f"NNCF overflow fix on this CPU: {overflow_fix()}")
    demo, shipped = resolve_data(None, None, CLASS_NAMES, cfg.calib_images)
    demo = replace(demo, dataset=demo.dataset.subset(args.images))
    compare("demo (YOLOv8n, 6 shapes)", demo_model_path(), args.imgsz, demo, list(shipped.files), args.frames)
    with tempfile.TemporaryDirectory() as tmp:  # the second model's own photos: the first calibrate, the rest judge
        write_dataset(Path(tmp), seed=9, sizes={"val": args.images + cfg.calib_images}, classes=SECOND_CLASSES)
        photos = resolve_eval_data(Path(tmp) / "images" / "val", ("coin", "spark"))
        files = [r.path for r in photos.dataset.records]
        judged = replace(photos, dataset=replace(photos.dataset, records=photos.dataset.records[cfg.calib_images :]))
        compare(
            "second model (YOLOv8n, coin/spark)",
            SECOND_MODEL,
            args.imgsz,
            judged,
            files[: cfg.calib_images],
            args.frames,
        )


if __name__ == "__main__":
    import results_page

    with results_page.page("quantizers", "OpenVINO INT8 recipes compared"):
        main()
