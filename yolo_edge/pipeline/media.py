"""Sources of frames: an image, a folder of images, or a video file, read lazily in order."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.pipeline.preprocess import IMAGE_SUFFIXES, list_images, opencv_path, read_image

VIDEO_SUFFIXES = (".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v")


@dataclass(frozen=True)
class Frame:
    name: str  # file name, or "<video>#<index>"
    index: int
    image: np.ndarray


def quiet_ffmpeg() -> None:
    """FFmpeg's own log lines ("moov atom not found", "Stream ends prematurely") name no source; the errors,
    problems and events here do. OpenCV reads the level when a capture opens; a user's own setting wins."""
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")
    cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)


def open_camera(index: int) -> cv2.VideoCapture:
    """A camera by index, OpenCV's log silenced while it opens: a missing camera makes each of its backends (V4L2,
    FFmpeg, Orbbec) print a warning block naming no source, before the line that says which source could not be
    opened and what to do. A user's own ``OPENCV_LOG_LEVEL`` wins."""
    if "OPENCV_LOG_LEVEL" in os.environ:
        return cv2.VideoCapture(index)
    was = cv2.utils.logging.getLogLevel()
    cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)
    try:
        return cv2.VideoCapture(index)
    finally:
        cv2.utils.logging.setLogLevel(was)


def open_video(path: Path) -> cv2.VideoCapture:
    quiet_ffmpeg()
    return cv2.VideoCapture(opencv_path(path, "video"))


def is_video(path: Path) -> bool:
    return path.suffix.lower() in VIDEO_SUFFIXES


@dataclass(frozen=True)
class SourceProblem:
    """Something lost on the way through a source: ``text`` names the file; ``lost_frame``: one frame was read
    and could not be used (an unreadable image in a folder), else the source says something is missing (a video
    shorter than its header says)."""

    text: str
    lost_frame: bool


def frames(source: str | Path, problems: list[SourceProblem] | None = None) -> Iterator[Frame]:
    """Frames of ``source`` in order; a one-line error if it cannot be read at all.

    What is lost on the way is appended to ``problems`` (one each) rather than dropped silently: an unreadable
    image in a folder is skipped, a video that ends before the frame count in its header is reported."""
    src = Path(source)
    problems = problems if problems is not None else []
    if src.is_dir():
        files = list_images(src, "source folder")
        i = 0
        for p in files:
            try:
                image = read_image(p)
            except YoloEdgeError as exc:
                problems.append(SourceProblem(f"skipped {exc}", lost_frame=True))
                continue
            yield Frame(p.name, i, image)
            i += 1
        if i == 0:
            raise YoloEdgeError(f"source folder {src}: none of its {len(files)} images is readable")
        return
    if not src.is_file():
        raise YoloEdgeError(f"source not found: {src}; pass an image, a folder of images or a video")
    if src.suffix.lower() in IMAGE_SUFFIXES:
        yield Frame(src.name, 0, read_image(src))
        return
    if not is_video(src):
        raise YoloEdgeError(
            f"{src} is neither an image ({', '.join(IMAGE_SUFFIXES)}) nor a video ({', '.join(VIDEO_SUFFIXES)})"
        )
    cap = open_video(src)
    if not cap.isOpened():
        raise YoloEdgeError(f"{src} is not a readable video")
    header = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
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
    if header > i:
        problems.append(
            SourceProblem(
                f"{src}: read {i} frames but its header says {header}: the file is truncated or damaged", False
            )
        )


def video_fps(path: Path) -> float:
    cap = open_video(path)
    fps = cap.get(cv2.CAP_PROP_FPS) if cap.isOpened() else 0.0
    cap.release()
    return fps if fps and fps > 0 else 25.0
