"""A stream's annotated output: each source's frames drawn (:class:`~yolo_edge.pipeline.annotate.BoxAnnotator`) and
written where ``save_dirs`` says, images atomically, a video or a live stream as one video
(:class:`AnnotatedOutput`).
"""

from __future__ import annotations

import collections
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import cv2

from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import atomic_write
from yolo_edge.pipeline.annotate import BoxAnnotator
from yolo_edge.pipeline.engine import StreamResult
from yolo_edge.pipeline.media import video_fps
from yolo_edge.pipeline.preprocess import opencv_path
from yolo_edge.pipeline.sources import Source

FOURCC = {"avi": "MJPG", "mp4": "mp4v"}


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
