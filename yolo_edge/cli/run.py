"""``yolo-edge run BUNDLE --source IMG|DIR``: detect with a deployed bundle; print, or save annotated images."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import cv2
import numpy as np

from yolo_edge.bundle import load_bundle
from yolo_edge.errors import YoloEdgeError
from yolo_edge.pipeline.postprocess import Detections
from yolo_edge.pipeline.preprocess import list_images, read_image


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("run", help="run a bundle on images", description=__doc__)
    p.add_argument("bundle", type=Path)
    p.add_argument("--source", type=Path, required=True, help="an image or a folder of images")
    p.add_argument("--save", type=Path, default=None, help="write annotated images here")
    p.add_argument("--json", action="store_true", help="one JSON line per image")
    p.set_defaults(func=run)


def draw(image: np.ndarray, dets: Detections) -> np.ndarray:
    out = image.copy()
    for box, conf, name in zip(dets.xyxy, dets.confidence, dets.class_names):
        x1, y1, x2, y2 = (int(round(v)) for v in box)
        cv2.rectangle(out, (x1, y1), (x2, y2), (0, 255, 0), 1)
        cv2.putText(out, f"{name} {conf:.2f}", (x1, max(y1 - 3, 8)), cv2.FONT_HERSHEY_SIMPLEX, 0.35, (0, 255, 0), 1, cv2.LINE_AA)
    return out


def run(args: argparse.Namespace) -> int:
    if args.source.is_dir():
        files = list_images(args.source, "source folder")
    elif args.source.is_file():
        files = [args.source]
    else:
        raise YoloEdgeError(f"source not found: {args.source}; pass an image or a folder of images")
    detector = load_bundle(args.bundle).detector()
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
    for f in files:
        image = read_image(f)
        dets, timing = detector.detect(image)
        if args.json:
            print(json.dumps({"image": str(f), "detections": dets.to_list(), "ms": round(timing.end_to_end_ms, 2)}))
        else:
            summary = ", ".join(f"{n} {c:.2f}" for n, c in zip(dets.class_names, dets.confidence)) or "nothing"
            print(f"{f}: {len(dets)} detections in {timing.end_to_end_ms:.1f} ms: {summary}")
        if args.save:
            cv2.imwrite(str(args.save / f.name), draw(image, dets))
    return 0
