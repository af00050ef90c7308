"""Sources of frames: an image, a folder of images, or a video file, read lazily in order."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from yolo_edge.errors import YoloEdgeError
from yolo_edge.pipeline.preprocess import IMAGE_SUFFIXES, list_images, read_image

VIDEO_SUFFIXES = (".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v")


@dataclass(frozen=True)
class Frame:
    name: str  # file name, or "<video>#<index>"
    index: int
    image: np.ndarray


def is_video(path: Path) -> bool:
    return path.suffix.lower() in VIDEO_SUFFIXES


def frames(source: str | Path) -> Iterator[Frame]:
    """Frames of ``source`` in order; a one-line error if it cannot be read."""
    src = Path(source)
    if src.is_dir():
        for i, p in enumerate(list_images(src, "source folder")):
            yield Frame(p.name, i, read_image(p))
        return
    if not src.is_file():
        raise YoloEdgeError(f"source not found: {src}; pass an image, a folder of images or a video")
    if src.suffix.lower() in IMAGE_SUFFIXES:
        yield Frame(src.name, 0, read_image(src))
        return
    if not is_video(src):
        raise YoloEdgeError(f"{src} is neither an image ({', '.join(IMAGE_SUFFIXES)}) nor a video ({', '.join(VIDEO_SUFFIXES)})")
    cap = cv2.VideoCapture(str(src))
    if not cap.isOpened():
        raise YoloEdgeError(f"{src} is not a readable video")
    try:
        i = 0
        while True:
            ok, image = cap.read()
            if not ok:
                break
            yield Frame(f"{src.name}#{i}", i, image)
            i += 1
    finally:
        cap.release()
    if i == 0:
        raise YoloEdgeError(f"{src} has no readable frames")


def video_fps(path: Path) -> float:
    cap = cv2.VideoCapture(str(path))
    fps = cap.get(cv2.CAP_PROP_FPS) if cap.isOpened() else 0.0
    cap.release()
    return fps if fps and fps > 0 else 25.0
