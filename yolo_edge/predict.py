"""Predict in one line, as a user of ultralytics' ``YOLO(...)(source)`` expects: ``yolo_edge.load(bundle)`` is a
model that is called on an image path, a folder, a video, a numpy image (BGR, as OpenCV reads) or a list of them,
and returns one :class:`Results` per image or frame: ``.boxes`` (``xyxy``, ``conf``, ``cls``), ``.names``,
``.speed`` (preprocess / inference / postprocess ms), ``.plot()`` (the image with class-coloured boxes),
``.save()``, ``.save_txt()`` (YOLO-format labels) and ``.to_json()``. A camera index or a stream URL never ends:
call it with ``stream=True`` and iterate (it runs the pipelined stream engine, as ``yolo-edge run`` does).
``conf``, ``iou``, ``classes`` and ``max_det`` override the bundle's NMS settings for the call. Bad input is a
one-line :class:`~yolo_edge.errors.YoloEdgeError`.

Example:
    >>> model = load("out/bundle")  # doctest: +SKIP
    >>> r = model("photo.jpg")[0]  # doctest: +SKIP
    >>> r.boxes.xyxy.shape, r.names[int(r.boxes.cls[0])], sorted(r.speed)  # doctest: +SKIP
    ((3, 4), 'circle', ['inference', 'postprocess', 'preprocess'])
    >>> r.save("annotated.jpg")  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import cv2
import numpy as np

from yolo_edge.bundle import Bundle, load_bundle
from yolo_edge.codec import dumps
from yolo_edge.config import NmsConfig
from yolo_edge.errors import YoloEdgeError
from yolo_edge.files import atomic_write, printable
from yolo_edge.pipeline.annotate import BoxAnnotator
from yolo_edge.pipeline.detector import Detector, FrameTiming
from yolo_edge.pipeline.engine import StreamOptions, StreamRunner
from yolo_edge.pipeline.media import frames
from yolo_edge.pipeline.postprocess import Detections
from yolo_edge.pipeline.sources import is_live, parse_source

Source = str | Path | int | np.ndarray


@dataclass(frozen=True)
class Boxes:
    """One image's boxes, as ultralytics' ``Results.boxes`` reads: original-image pixels."""

    xyxy: np.ndarray  # (N, 4) float32
    conf: np.ndarray  # (N,) float32
    cls: np.ndarray  # (N,) int64 class ids

    def __len__(self) -> int:
        return len(self.conf)


@dataclass(frozen=True)
class Results:
    """One image's or frame's detections (see the module docstring)."""

    path: str  # the file (or "image0", "frame12" for an array or a stream frame)
    orig_img: np.ndarray  # BGR
    detections: Detections
    speed: dict[str, float]  # preprocess, inference, postprocess: ms

    @property
    def boxes(self) -> Boxes:
        d = self.detections
        return Boxes(d.xyxy, d.confidence, d.class_id)

    @property
    def names(self) -> dict[int, str]:
        return dict(enumerate(self.detections.names))

    def __len__(self) -> int:
        return len(self.detections)

    @property
    def xywhn(self) -> np.ndarray:
        """(N, 4): box centre, width and height over the image's width and height."""
        h, w = self.orig_img.shape[:2]
        b = self.detections.xyxy.astype(np.float64)
        xywh = np.column_stack([(b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2, b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]])
        return xywh / np.array([w, h, w, h])

    def plot(self) -> np.ndarray:
        """A copy of the image with each box and its ``name confidence`` tag in its class's colour."""
        return BoxAnnotator().annotate(self.orig_img, self.detections)

    def save(self, filename: str | Path | None = None) -> str:
        """Write :meth:`plot` to ``filename`` (default: ``results_<name>.jpg``), atomically; returns the path."""
        path = Path(filename) if filename is not None else Path(f"results_{Path(self.path).stem}.jpg")
        ok, data = cv2.imencode(path.suffix or ".jpg", self.plot())
        if not ok:
            raise YoloEdgeError(f"cannot encode an image as '{path.suffix}': use .jpg or .png")
        atomic_write(path, data.tobytes())
        return str(path)

    def save_txt(self, filename: str | Path, save_conf: bool = False) -> str:
        """YOLO-format labels, one ``class cx cy w h`` line per box (normalised; ``save_conf``: and its score)."""
        lines = [
            " ".join([str(int(c)), *(f"{v:.6f}" for v in row), *([f"{s:.6f}"] if save_conf else [])])
            for c, row, s in zip(self.detections.class_id, self.xywhn, self.detections.confidence)
        ]
        atomic_write(Path(filename), "".join(f"{line}\n" for line in lines).encode())
        return str(filename)

    def to_json(self) -> str:
        """The detections as ultralytics' ``Results.to_json()`` writes them: name, class, confidence, box."""
        rows = [
            {
                "name": name,
                "class": int(c),
                "confidence": s,
                "box": dict(zip(("x1", "y1", "x2", "y2"), b)),
            }
            for name, c, s, b in zip(
                self.detections.class_names, self.detections.class_id, self.detections.confidence, self.detections.xyxy
            )
        ]
        return dumps(rows)


def nms_settings(
    base: NmsConfig,
    names: Sequence[str],
    conf: float | None = None,
    iou: float | None = None,
    classes: Sequence[int | str] | None = None,
    max_det: int | None = None,
) -> NmsConfig:
    """``base`` with the given predict options instead (ultralytics' ``conf``, ``iou``, ``classes``, ``max_det``;
    a class by id or by name); a value out of range or a class the model does not have is a one-line error."""
    for what, v in (("conf", conf), ("iou", iou)):
        if v is not None and not 0 < v <= 1:
            raise YoloEdgeError(f"{what} must be in (0, 1], got {v}")
    if max_det is not None and max_det < 1:
        raise YoloEdgeError(f"max_det must be >= 1, got {max_det}")
    wanted = None if classes is None else tuple(_class_id(c, names) for c in classes)
    return replace(
        base,
        conf=base.conf if conf is None else conf,
        iou=base.iou if iou is None else iou,
        max_det=base.max_det if max_det is None else max_det,
        classes=wanted if wanted is not None else base.classes,
    )


def _class_id(c: int | str, names: Sequence[str]) -> int:
    if isinstance(c, str) and not c.isdigit():
        if c not in names:
            raise YoloEdgeError(f"class '{printable(c)}' is not the model's; its classes: {', '.join(names)}")
        return names.index(c)
    k = int(c)
    if not 0 <= k < len(names):
        raise YoloEdgeError(f"class {k} is not the model's: its class ids are 0-{len(names) - 1} ({', '.join(names)})")
    return k


def speed_of(t: FrameTiming) -> dict[str, float]:
    """ultralytics' three phases of one frame: letterbox; the units and the hand-overs between them; decode + NMS."""
    inference = sum(t.unit_ms.values()) + t.transfer_ms
    return {"preprocess": t.preprocess_ms, "inference": inference, "postprocess": t.postprocess_ms}


class Model:
    """A deployed bundle, compiled once, callable on images (see the module docstring). ``with load(b) as m:``
    (or ``close()``) releases its runtimes."""

    def __init__(self, bundle: str | Path | Bundle) -> None:
        self.bundle = bundle if isinstance(bundle, Bundle) else load_bundle(bundle)
        self.detector: Detector = self.bundle.detector()
        self.names = dict(enumerate(self.bundle.meta.model.names))

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.detector.close()

    def nms(
        self,
        conf: float | None = None,
        iou: float | None = None,
        classes: Sequence[int | str] | None = None,
        max_det: int | None = None,
    ) -> NmsConfig:
        """The bundle's NMS settings with the given ones instead (see :func:`nms_settings`)."""
        return nms_settings(self.bundle.config.nms, tuple(self.names.values()), conf, iou, classes, max_det)

    def __call__(
        self,
        source: Source | Sequence[Source],
        conf: float | None = None,
        iou: float | None = None,
        classes: Sequence[int | str] | None = None,
        max_det: int | None = None,
        stream: bool = False,
    ) -> list[Results] | Iterator[Results]:
        """Detect on ``source``: a list of results, one per image or frame (``stream``: an iterator, which a
        camera index or a stream URL needs)."""
        nms = self.nms(conf, iou, classes, max_det)
        items: list[Source] = list(source) if isinstance(source, list | tuple) else [source]  # type: ignore[list-item]
        if not stream and any(_live(s) for s in items):
            raise YoloEdgeError("a camera or a stream URL never ends: call the model with stream=True and iterate")
        found = (r for s in items for r in self._results(s, nms))
        return found if stream else list(found)

    predict = __call__

    def _results(self, source: Source, nms: NmsConfig) -> Iterator[Results]:
        if isinstance(source, np.ndarray):
            if source.ndim != 3 or source.shape[2] != 3 or source.dtype != np.uint8:
                raise YoloEdgeError(
                    f"an image array must be H x W x 3 uint8 (BGR, as cv2.imread gives), got {source.shape} "
                    f"{source.dtype}"
                )
            yield self._one("image0", source, nms)
            return
        if _live(source):
            yield from self._live(str(source), nms)
            return
        path = Path(source)  # type: ignore[arg-type]
        if not path.exists():
            raise YoloEdgeError(f"source not found: {printable(path)}; pass an image, a folder, a video or an array")
        for f in frames(path):
            yield self._one(f.name, f.image, nms)

    def _one(self, name: str, image: np.ndarray, nms: NmsConfig) -> Results:
        dets, timing = self.detector.detect(image, nms)
        return Results(name, image, dets, speed_of(timing))

    def _live(self, text: str, nms: NmsConfig) -> Iterator[Results]:
        detector = Detector(self.bundle.executor(), self.bundle.meta.model, nms)
        with StreamRunner(detector, [parse_source(text)], StreamOptions(), close_detector=True) as runner:
            for r in runner:
                inference = sum(r.unit_ms.values())
                yield Results(f"frame{r.index}", r.image, r.detections, {"inference": inference, "ready": r.ready_ms})


def _live(source: object) -> bool:
    if isinstance(source, int) and not isinstance(source, bool):
        return True
    return isinstance(source, str) and is_live(source)


def load(bundle: str | Path | Bundle) -> Model:
    """The bundle at ``bundle``, compiled, as a model to call on images: ``load("out/bundle")("photo.jpg")``."""
    return Model(bundle)
