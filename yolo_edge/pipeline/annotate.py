"""Annotated output: boxes drawn on frames (:class:`BoxAnnotator`, as supervision's annotators), and each stream's
annotated images or video written where ``save_dirs`` says (:class:`AnnotatedOutput`).

Example:
    >>> dets, _ = detector.detect(image)  # doctest: +SKIP
    >>> cv2.imwrite("out.jpg", BoxAnnotator().annotate(image, dets))  # doctest: +SKIP
"""

from __future__ import annotations

import collections
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import atomic_write
from yolo_edge.pipeline.engine import StreamResult
from yolo_edge.pipeline.media import video_fps
from yolo_edge.pipeline.postprocess import Detections
from yolo_edge.pipeline.preprocess import opencv_path
from yolo_edge.pipeline.sources import Source

FOURCC = {"avi": "MJPG", "mp4": "mp4v"}
Color = tuple[int, int, int]  # BGR


# ultralytics' palette (ultralytics.utils.plotting.Colors), RGB: class k is drawn in colour k mod 20, as there
PALETTE_RGB = (
    "FF3838", "FF9D97", "FF701F", "FFB21D", "CFD231", "48F90A", "92CC17", "3DDB86", "1A9334", "00D4BB",
    "2C99A8", "00C2FF", "344593", "6473FF", "0018EC", "8438FF", "520085", "CB38FF", "FF95C8", "FF37C7",
)  # fmt: skip


def class_color(class_id: int) -> Color:
    """The BGR colour of class ``class_id``: ultralytics' palette, so a box has the colour it has there."""
    h = PALETTE_RGB[int(class_id) % len(PALETTE_RGB)]
    return int(h[4:6], 16), int(h[2:4], 16), int(h[0:2], 16)


@dataclass(frozen=True)
class BoxAnnotator:
    """Each detection's box and ``name confidence`` label on a filled tag, drawn on a copy of the image, in its
    class's colour (``color`` set: every class in that one)."""

    color: Color | None = None
    thickness: int = 2
    text_scale: float = 0.4

    def annotate(self, image: np.ndarray, dets: Detections) -> np.ndarray:
        out = image.copy()
        font = cv2.FONT_HERSHEY_SIMPLEX
        for box, conf, cls, name in zip(dets.xyxy, dets.confidence, dets.class_id, dets.class_names):
            x1, y1, x2, y2 = (int(round(v)) for v in box)
            color = self.color or class_color(int(cls))
            cv2.rectangle(out, (x1, y1), (x2, y2), color, self.thickness)
            label = f"{name} {conf:.2f}"
            (tw, th), base = cv2.getTextSize(label, font, self.text_scale, 1)
            top = y1 - th - base - 2 if y1 - th - base - 2 >= 0 else y1  # above the box, inside it at the top edge
            cv2.rectangle(out, (x1, top), (x1 + tw + 2, top + th + base + 2), color, -1)
            ink = (0, 0, 0) if sum(color) > 380 else (255, 255, 255)  # legible on a light or a dark tag
            cv2.putText(out, label, (x1 + 1, top + th + 1), font, self.text_scale, ink, 1, cv2.LINE_AA)
        return out


def _source_dir(src: Source) -> Path | None:
    """The folder whose files ``src`` reads (None for a live source)."""
    if src.live:
        return None
    path = Path(src.text).resolve()
    return path if src.kind == "folder" else path.parent


def _per_source(save: Path, sources: list[Source]) -> list[Path]:
    if len(sources) == 1:
        return [save]
    dirs, taken = [], set()
    for src in sources:
        label = Path(src.text).stem if src.kind in ("image", "video") else src.label
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_.") or "source"
        name, k = stem, 2
        while name in taken:
            name, k = f"{stem}-{k}", k + 1
        taken.add(name)
        dirs.append(save / name)
    return dirs


def save_dirs(save: Path, sources: list[Source]) -> list[Path]:
    """Where each source's annotated output goes: ``save`` itself for one source, ``save/<source name>`` (a
    file's stem, a folder's name; made unique) for several, so that two sources' ``img1.jpg`` or ``one.avi``
    never overwrite each other. Refused before any work: ``save`` that is a file or cannot be written, and an
    output folder that is a source's own folder (the annotated images would overwrite the originals). Nothing
    is created yet."""
    if save.exists() and not save.is_dir():
        raise YoloEdgeError(f"--save {save} is a file; name a folder for the annotated output")
    dirs = _per_source(save, sources)
    for src in sources:
        here = _source_dir(src)
        for out in dirs:
            if here is not None and out.resolve() == here:
                raise YoloEdgeError(
                    f"--save {save} would write the annotated frames into {here}, where the source {src.text} "
                    "reads its files, over the originals; pick another folder"
                )
    existing = next(p for p in (save.absolute(), *save.absolute().parents) if p.exists())
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        raise YoloEdgeError(
            f"--save {save}: cannot write in {existing} ({exc.strerror}); pick another folder"
        ) from None
    return dirs


@dataclass
class AnnotatedOutput:
    """Each result annotated into its source's folder (``save_dirs``): an image source's frames as images
    (atomically), a video's or a live stream's as one video (``video_format``) with a small FPS / latency
    overlay. A write that fails raises, never a silent success; ``close`` finalises the videos."""

    sources: list[Source]
    folders: list[Path]
    video_format: str = "avi"
    annotator: BoxAnnotator = field(default_factory=BoxAnnotator)
    writers: dict[int, cv2.VideoWriter] = field(default_factory=dict)
    recent: dict[int, collections.deque[float]] = field(default_factory=dict)

    def write(self, r: StreamResult) -> None:
        src, folder = self.sources[r.stream], self.folders[r.stream]
        self.recent.setdefault(r.stream, collections.deque(maxlen=30)).append(time.monotonic())
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OSError(f"cannot create {folder} ({exc.strerror})") from None
        image = self.annotator.annotate(r.image, r.detections)
        if src.kind in ("image", "folder"):
            path = folder / r.name
            ok, data = cv2.imencode(path.suffix or ".jpg", image)
            if not ok:
                raise OSError(f"cannot encode {r.name} as {path.suffix}")
            try:
                atomic_write(path, data.tobytes())  # a failed write leaves no half image
            except OSError as exc:
                raise OSError(f"cannot write {path} ({exc.strerror})") from None
            return
        if r.stream not in self.writers:
            self.writers[r.stream] = self._writer(src, folder, r.image.shape[1], r.image.shape[0])
        times = self.recent[r.stream]
        rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else 0.0
        text = f"{rate:.1f} fps  {r.ready_ms:.0f} ms"
        cv2.putText(image, text, (4, 12), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (0, 255, 255), 1)
        self.writers[r.stream].write(image)

    def _writer(self, src: Source, folder: Path, w: int, h: int) -> cv2.VideoWriter:
        stem = Path(src.text).stem if src.kind == "video" else re.sub(r"[^A-Za-z0-9_.-]+", "_", src.label).strip("_")
        fps = video_fps(Path(src.text)) if src.kind == "video" else 25.0
        path = folder / f"{stem}.{self.video_format}"
        fourcc = cv2.VideoWriter.fourcc(*FOURCC[self.video_format])
        writer = cv2.VideoWriter(opencv_path(path, "video"), fourcc, fps, (w, h))
        if not writer.isOpened():
            raise OSError(f"cannot write the video {path}")
        return writer

    def close(self) -> None:
        """Finalise the videos: playable after a normal end, Ctrl-C or SIGTERM alike."""
        for writer in self.writers.values():
            writer.release()
        self.writers.clear()
