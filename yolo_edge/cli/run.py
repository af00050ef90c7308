"""``yolo-edge run BUNDLE --source IMG|DIR|VIDEO``: detect with a deployed bundle, frame by frame; NPU
failures are retried on the CPU so every frame gets its result. Prints a line (or a JSON line) per
frame; ``--save`` writes annotated images, or an annotated MJPG .avi for a video."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from pathlib import Path

import cv2
import numpy as np

from yolo_edge.bundle import load_bundle
from yolo_edge.cli.common import warn_placement
from yolo_edge.errors import YoloEdgeError
from yolo_edge.pipeline.postprocess import Detections
from yolo_edge.pipeline.stream import frames, is_video, video_fps
from yolo_edge.runtime import EventLog


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a bundle on images or a video", description=__doc__)
    p.add_argument("bundle", type=Path)
    p.add_argument("--source", type=Path, required=True, help="an image, a folder of images, or a video file")
    p.add_argument("--save", type=Path, default=None, help="write annotated images (or video) here")
    p.add_argument("--json", action="store_true", help="one JSON line per frame")
    p.add_argument("--events", type=Path, default=None, help="append runtime fallback events to this JSONL file")
    p.set_defaults(func=run)


def draw(image: np.ndarray, dets: Detections) -> np.ndarray:
    out = image.copy()
    for box, conf, name in zip(dets.xyxy, dets.confidence, dets.class_names):
        x1, y1, x2, y2 = (int(round(v)) for v in box)
        cv2.rectangle(out, (x1, y1), (x2, y2), (0, 255, 0), 1)
        cv2.putText(
            out, f"{name} {conf:.2f}", (x1, max(y1 - 3, 8)), cv2.FONT_HERSHEY_SIMPLEX, 0.35, (0, 255, 0), 1, cv2.LINE_AA
        )
    return out


def _check_save(save: Path) -> None:
    if save.exists() and not save.is_dir():
        raise YoloEdgeError(f"--save {save} is a file; name a folder for the annotated output")
    try:
        save.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=save):
            pass
    except OSError as exc:
        raise YoloEdgeError(f"--save {save}: cannot write there ({exc.strerror}); pick another folder") from None


def run(args: argparse.Namespace) -> int:
    if args.save:
        _check_save(args.save)
    problems: list[str] = []
    stream = frames(args.source, problems)
    first = next(stream)  # a bad source fails before the bundle is compiled
    events = EventLog(args.events)
    detector = load_bundle(args.bundle).detector(events=events)
    warn_placement(detector.executor.placement_problems, "run")
    writer = None
    if args.save:
        if is_video(args.source):
            h, w = first.image.shape[:2]
            writer = cv2.VideoWriter(
                str(args.save / f"{args.source.stem}.avi"),
                cv2.VideoWriter.fourcc(*"MJPG"),
                video_fps(args.source),
                (w, h),
            )
    count = 0
    for frame in itertools.chain([first], stream):
        dets, timing = detector.detect(frame.image)
        count += 1
        if args.json:
            print(
                json.dumps(
                    {
                        "frame": frame.index,
                        "source": frame.name,
                        "detections": dets.to_list(),
                        "ms": round(timing.end_to_end_ms, 2),
                        "devices": timing.unit_device,
                    }
                )
            )
        else:
            summary = ", ".join(f"{n} {c:.2f}" for n, c in zip(dets.class_names, dets.confidence)) or "nothing"
            print(f"{frame.name}: {len(dets)} detections in {timing.end_to_end_ms:.1f} ms: {summary}")
        if writer is not None:
            writer.write(draw(frame.image, dets))
        elif args.save:
            cv2.imwrite(str(args.save / frame.name), draw(frame.image, dets))
    if writer is not None:
        writer.release()
    if not args.json:
        ev = events.summary()
        print(f"{count} frames, {ev.total} fallback events" + (f": {ev.by_trigger}" if ev.total else ""))
    for line in problems:
        print(f"yolo-edge run: {line}", file=sys.stderr)
    if problems:
        print(f"yolo-edge run: {count} frames done, {len(problems)} problem(s) above: exit 1", file=sys.stderr)
    return 1 if problems else 0
