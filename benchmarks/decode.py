"""The CPU's decode + NMS of one frame, three ways, from the same head outputs (the demo model and the tests' second
model, YOLOv8n fine-tuned to 2 other classes, on demo val images): ultralytics' (its ``Detect`` decodes every anchor
in torch, then ``non_max_suppression``), yolo-edge's ONNX decode subgraph on onnxruntime then NMS (what ran before), and
yolo-edge's candidate-first decode (``pipeline.postprocess``: logits against logit(conf), the DFL for the
candidates only). Paths interleaved round by round (``side_by_side.interleave``), medians and per-round ratios to
ultralytics'; at the predictor's conf 0.25 and the validator's 0.001 (multi-label). Prints the CPU.

    YOLO_OFFLINE=1 python benchmarks/decode.py [--imgsz 320 640] [--rounds 30]
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from side_by_side import interleave

from yolo_edge.backends import cpu_backend
from yolo_edge.core.config import NmsConfig
from yolo_edge.core.host import cpu_name
from yolo_edge.demo.shapes import demo_val_data
from yolo_edge.model.decode import HeadOutputs
from yolo_edge.model.export import export_model
from yolo_edge.model.meta import demo_model_path
from yolo_edge.model.split import split_model
from yolo_edge.pipeline.postprocess import postprocess
from yolo_edge.pipeline.preprocess import letterbox, read_image

SECOND_MODEL = Path(__file__).resolve().parents[1] / "tests" / "data" / "coins_sparks_yolov8n.pt"


def _paths(model: str, imgsz: int, image: np.ndarray, tmp: Path) -> tuple[dict[str, Callable[..., int]], int]:
    import torch
    from ultralytics import YOLO
    from ultralytics.utils.nms import non_max_suppression
    from ultralytics.utils.ops import scale_boxes

    exported = export_model(model, imgsz=imgsz, out_dir=tmp)
    split = split_model(exported)
    cpu = cpu_backend()
    units = [cpu.compile(split[name].model, "fp32") for name in ("backbone", "neck", "head")]
    decode = cpu.compile(split["decode"].model, "fp32")
    lb = letterbox(image, exported.meta.imgsz)
    tensors = {"images": lb.tensor}
    for unit in units:
        tensors.update(unit.run({t.name: tensors[t.name] for t in unit.inputs}))
    raw = {t.name: tensors[t.name] for t in units[-1].outputs}
    head = HeadOutputs.find({k: v.shape for k, v in raw.items()}, imgsz)
    assert head is not None
    with contextlib.chdir(tmp):
        detect = YOLO(model).model.model[-1].eval()  # type: ignore[union-attr]
    detect.shape = None  # its anchors are made for the first frame's shapes
    preds = {  # what its forward_head hands _inference: every level's boxes and scores, anchors concatenated
        "boxes": torch.cat([torch.from_numpy(raw[b]).flatten(2) for b in head.boxes], -1),
        "scores": torch.cat([torch.from_numpy(raw[c]).flatten(2) for c in head.classes], -1),
        "feats": [torch.from_numpy(raw[b]) for b in head.boxes],
    }
    names = exported.meta.names

    def ultralytics_(conf: float, multi: bool) -> int:
        with torch.inference_mode():
            out = detect._inference(preds)
            det = non_max_suppression(out, conf, 0.7, multi_label=multi, max_det=300)[0]
            det[:, :4] = scale_boxes(lb.tensor.shape[2:], det[:, :4], lb.orig_shape)
        return len(det)

    def onnx_decode(conf: float, multi: bool) -> int:
        out = decode.run({t.name: raw[t.name] for t in decode.inputs})
        return len(postprocess(out, lb, names, NmsConfig(conf, 0.7, 300, multi)))

    def candidates_first(conf: float, multi: bool) -> int:
        return len(postprocess(raw, lb, names, NmsConfig(conf, 0.7, 300, multi), head))

    anchors = sum(raw[c][0, 0].size for c in head.classes)
    return {"ultralytics": ultralytics_, "onnx decode": onnx_decode, "candidates first": candidates_first}, anchors


def measure(model: str, imgsz: int, image: np.ndarray, label: str, rounds: int) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        paths, anchors = _paths(model, imgsz, image, Path(tmp))
        for conf, multi in ((0.25, False), (0.001, True)):
            bound = {k: (lambda f=f, c=conf, m=multi: f(c, m)) for k, f in paths.items()}
            counts = {k: f() for k, f in bound.items()}
            timed = interleave(bound, rounds if conf > 0.01 else max(rounds // 3, 3))
            row = {"model": Path(model).stem, "imgsz": imgsz, "image": label, "conf": conf, "anchors": anchors}
            rows.append({**row, "detections": counts, "ms": timed.median_ms, "ratio": timed.ratio})
            ms, ratio = timed.median_ms, timed.ratio
            print(
                f"{Path(model).stem:>22} {imgsz:>5} {label:>8} {conf:>6} "
                + " ".join(f"{ms[k]:>10.3f} ({ratio[k]:.2f}x)" for k in paths)
                + f"  detections {sorted(set(counts.values()))}"
            )
    return rows


def main() -> None:
    from ultralytics.utils import LOGGER

    LOGGER.setLevel(logging.WARNING)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--imgsz", type=int, nargs="+", default=[320, 640])
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    val = sorted((demo_val_data().parent / "images" / "val").glob("*.jpg"))
    print(f"CPU: {cpu_name()}\ndecode + NMS of one frame from the head's outputs, median ms (ratio to ultralytics')")
    paths = ("ultralytics", "onnx decode", "cand. first")
    print(f"{'model':>22} {'imgsz':>5} {'image':>8} {'conf':>6} " + " ".join(f"{p:>18}" for p in paths))
    for imgsz in args.imgsz:
        measure(str(demo_model_path()), imgsz, read_image(val[0]), val[0].stem, args.rounds)
        measure(str(SECOND_MODEL), imgsz, read_image(val[1]), val[1].stem, args.rounds)


if __name__ == "__main__":
    import results_page

    with results_page.page("decode", "Decode + NMS of one frame, three ways"):
        main()
