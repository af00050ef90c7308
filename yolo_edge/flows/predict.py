"""Predict in one line, as a user of ultralytics' ``YOLO(...)(source)`` expects: ``yolo_edge.load(bundle)`` is a
model that is called on an image path, a folder, a video, a numpy image (BGR, as OpenCV reads) or a list of them,
and returns one :class:`Results` per image or frame: ``.boxes`` (``xyxy``, ``conf``, ``cls``), ``.names``,
``.speed`` (preprocess / inference / postprocess ms), ``.plot()`` (the image with class-coloured boxes),
``.save()``, ``.save_txt()`` (YOLO-format labels) and ``.to_json()``. A camera index or a stream URL never ends:
call it with ``stream=True`` and iterate (it runs the pipelined stream engine, as ``yolo-edge run`` does).
``conf``, ``iou``, ``classes`` and ``max_det`` override the bundle's NMS settings for the call. Bad input is a
one-line :class:`~yolo_edge.core.errors.YoloEdgeError`.

Example:
    >>> model = load("out/bundle")  # doctest: +SKIP
    >>> r = model("photo.jpg")[0]  # doctest: +SKIP
    >>> r.boxes.xyxy.shape, r.names[int(r.boxes.cls[0])], sorted(r.speed)  # doctest: +SKIP
    ((3, 4), 'circle', ['inference', 'postprocess', 'preprocess'])
    >>> r.save("annotated.jpg")  # doctest: +SKIP
"""

from __future__ import annotations

import glob
import os
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from yolo_edge.bundle import Bundle, load_bundle
from yolo_edge.core.codec import dumps
from yolo_edge.core.config import NmsConfig
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import atomic_write, printable, refuse_special
from yolo_edge.pipeline.annotate import BoxAnnotator
from yolo_edge.pipeline.detector import Detector, FrameTiming
from yolo_edge.pipeline.engine import StreamOptions, StreamRunner
from yolo_edge.pipeline.media import frames
from yolo_edge.pipeline.postprocess import Detections
from yolo_edge.pipeline.preprocess import IMAGE_SUFFIXES
from yolo_edge.pipeline.sources import is_live, parse_source

Source = str | Path | int | np.ndarray  # or a PIL image (converted, RGB to BGR, without importing PIL here)


class Array(np.ndarray):
    """A numpy array that reads as ultralytics' torch tensors do in user code: ``.cpu()``, ``.numpy()``, ``.to(...)``
    and ``.clone()`` (``r.boxes.xyxy.cpu().numpy()``), and ``int()`` / ``float()`` of a one-element array (a box's
    ``cls`` and ``conf``, shape (1,) as there; NumPy 2 converts only 0-dimensional arrays)."""

    def cpu(self) -> Array:
        return self

    def numpy(self) -> np.ndarray:
        return np.asarray(self)

    def to(self, *_args: object, **_kwargs: object) -> Array:
        return self

    def clone(self) -> Array:
        return self.copy()

    def __int__(self) -> int:
        return int(self._one())

    def __float__(self) -> float:
        return float(self._one())

    def __index__(self) -> int:
        return int(self._one())

    def _one(self) -> np.generic:
        if self.size != 1:
            raise TypeError(f"only a one-element array converts to a number, this one has {self.size}")
        return np.asarray(self).reshape(-1)[0]


def _tensor(a: np.ndarray) -> Array:
    return a.view(Array)


@dataclass(frozen=True)
class Boxes:
    """One image's boxes, as ultralytics' ``Results.boxes`` reads them: original-image pixels, numpy arrays (where
    ultralytics has torch tensors: indexing, ``float()``, ``int()`` and ``tolist()`` read alike). Iterating gives
    one ``Boxes`` per box, as ultralytics' does; ``id`` is None (a bundle runs no tracker)."""

    xyxy: np.ndarray  # (N, 4) float32
    conf: np.ndarray  # (N,) float32
    cls: np.ndarray  # (N,) int64 class ids
    orig_shape: tuple[int, int]  # (height, width)

    id = None
    is_track = False

    def __len__(self) -> int:
        return len(self.conf)

    def __iter__(self) -> Iterator[Boxes]:
        return (self[i] for i in range(len(self)))

    def __post_init__(self) -> None:  # ultralytics' tensors' ways (Array), on the arrays they are
        for name in ("xyxy", "conf", "cls"):
            object.__setattr__(self, name, _tensor(np.asarray(getattr(self, name))))

    def __getitem__(self, index: int | slice | np.ndarray) -> Boxes:
        rows = [index] if isinstance(index, int | np.integer) else index  # one box stays a (1, 4) row, as there
        return Boxes(self.xyxy[rows], self.conf[rows], self.cls[rows], self.orig_shape)

    @property
    def data(self) -> Array:
        """(N, 6): x1, y1, x2, y2, confidence, class (ultralytics' layout without a tracker)."""
        return _tensor(np.column_stack([self.xyxy, self.conf, self.cls.astype(np.float32)]).astype(np.float32))

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def xywh(self) -> Array:
        """(N, 4): box centre, width and height in pixels."""
        b = np.asarray(self.xyxy, np.float32)
        centre = [(b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2, b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]]
        return _tensor(np.column_stack(centre))

    @property
    def xyxyn(self) -> Array:
        """(N, 4): corners over the image's width and height."""
        h, w = self.orig_shape
        return _tensor(np.asarray(self.xyxy, np.float32) / np.array([w, h, w, h], np.float32))

    @property
    def xywhn(self) -> Array:
        """(N, 4): centre, width and height over the image's width and height."""
        h, w = self.orig_shape
        return _tensor(np.asarray(self.xywh) / np.array([w, h, w, h], np.float32))


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
        return Boxes(d.xyxy, d.confidence, d.class_id, self.orig_shape)

    @property
    def orig_shape(self) -> tuple[int, int]:
        h, w = self.orig_img.shape[:2]
        return int(h), int(w)

    @property
    def names(self) -> dict[int, str]:
        return dict(enumerate(self.detections.names))

    def __len__(self) -> int:
        return len(self.detections)

    @property
    def xywhn(self) -> np.ndarray:
        """(N, 4): box centre, width and height over the image's width and height (as ``boxes.xywhn``)."""
        return self.boxes.xywhn.astype(np.float64)

    def summary(self, normalize: bool = False, decimals: int = 5) -> list[dict[str, Any]]:
        """One dict per box as ultralytics' ``Results.summary()``: name, class, confidence and box (``normalize``:
        over the image's size)."""
        xyxy = self.boxes.xyxyn if normalize else self.detections.xyxy
        return [
            {
                "name": self.names[int(c)],
                "class": int(c),
                "confidence": round(float(s), decimals),
                "box": {k: round(float(v), decimals) for k, v in zip(("x1", "y1", "x2", "y2"), b)},
            }
            for b, s, c in zip(xyxy, self.detections.confidence, self.detections.class_id)
        ]

    def verbose(self) -> str:
        """ultralytics' one-line count: ``"2 circles, 1 star, "``, or ``"(no detections), "``."""
        if not len(self):
            return "(no detections), "
        counts = Counter(int(c) for c in self.detections.class_id)
        return "".join(f"{n} {self.names[c]}{'s' * (n > 1)}, " for c, n in sorted(counts.items()))

    def plot(
        self,
        conf: bool = True,
        line_width: int | None = None,
        labels: bool = True,
        boxes: bool = True,
        img: np.ndarray | None = None,
        **_others: object,
    ) -> np.ndarray:
        """A copy of the image (``img``: that one instead) with each box and its ``name confidence`` tag in its
        class's colour; ultralytics' keywords: ``conf`` (the confidence in the tag), ``line_width``, ``labels``,
        ``boxes``; the others it takes (``font_size``, ``pil``, ``masks``...) change nothing a detector draws."""
        width = 2 if line_width is None else int(line_width)
        if width < 1:
            raise YoloEdgeError(f"line_width must be >= 1, got {line_width!r}")
        annotator = BoxAnnotator(thickness=width, labels=bool(labels), conf=bool(conf), boxes=bool(boxes))
        return annotator.annotate(self.orig_img if img is None else img, self.detections)

    def save(self, filename: str | Path | None = None) -> str:
        """Write :meth:`plot` to ``filename`` (default: ``results_<name>.jpg``; a folder: that name in it),
        atomically; returns the path."""
        default = f"results_{Path(self.path).stem}.jpg"
        path = _output(filename if filename is not None else default, default)
        if path.suffix.lower() not in IMAGE_SUFFIXES:
            raise YoloEdgeError(f"cannot save an image as '{printable(path.suffix)}': use {', '.join(IMAGE_SUFFIXES)}")
        ok, data = cv2.imencode(path.suffix, self.plot())
        if not ok:
            raise YoloEdgeError(f"cannot encode an image as '{printable(path.suffix)}': use .jpg or .png")
        atomic_write(path, data.tobytes())
        return str(path)

    def save_txt(self, filename: str | Path, save_conf: bool = False) -> str:
        """YOLO-format labels, one ``class cx cy w h`` line per box (normalised; ``save_conf``: and its score)."""
        lines = [
            " ".join([str(int(c)), *(f"{v:.6f}" for v in row), *([f"{s:.6f}"] if save_conf else [])])
            for c, row, s in zip(self.detections.class_id, self.xywhn, self.detections.confidence)
        ]
        path = _output(filename, f"{Path(self.path).stem}.txt")
        atomic_write(path, "".join(f"{line}\n" for line in lines).encode())
        return str(path)

    def to_json(self, normalize: bool = False, decimals: int = 5) -> str:
        """:meth:`summary` as JSON, as ultralytics' ``Results.to_json()`` writes it."""
        return dumps(self.summary(normalize, decimals))


def _output(filename: str | Path, default: str) -> Path:
    """Where a result is written: ``filename``, or ``default`` inside it when it names a folder (``"out/"``, or one
    that exists); a folder that does not exist is a one-line error (never the hidden temporary file's name)."""
    text = str(filename)
    path = Path(text) / default if text.endswith(("/", os.sep)) or Path(text).is_dir() else Path(text)
    if not text:
        raise YoloEdgeError("the output file name is empty; name a file")
    refuse_special(path)
    if not path.absolute().parent.is_dir():
        raise YoloEdgeError(
            f"cannot write {printable(path)}: the folder {printable(path.absolute().parent)} does not exist"
        )
    return path


def _number(what: str, v: object, kind: type) -> None:
    """A predict option of the wrong type is a one-line error, as a value out of range is (``conf="0.5"``,
    ``max_det=2.5``: not a TypeError from inside NMS)."""
    ok = isinstance(v, int | np.integer) if kind is int else isinstance(v, int | float | np.integer | np.floating)
    if isinstance(v, bool) or not ok:
        raise YoloEdgeError(f"{what} must be {'an integer' if kind is int else 'a number'}, got {printable(repr(v))}")


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
        if v is not None:
            _number(what, v, float)
        if v is not None and not 0 < v <= 1:
            raise YoloEdgeError(f"{what} must be in (0, 1], got {v}")
    if max_det is not None:
        _number("max_det", max_det, int)
    if max_det is not None and max_det < 1:
        raise YoloEdgeError(f"max_det must be >= 1, got {max_det}")
    if isinstance(classes, int | str | np.integer):  # ultralytics takes one class alone: classes=0, "person"
        classes = [classes]
    if classes is not None and not isinstance(classes, Sequence | np.ndarray):
        raise YoloEdgeError(f"classes must be a class id, a name or a list of them, got {printable(repr(classes))}")
    wanted = None if classes is None else tuple(_class_id(c, names) for c in classes)
    return replace(
        base,
        conf=base.conf if conf is None else conf,
        iou=base.iou if iou is None else iou,
        max_det=base.max_det if max_det is None else max_det,
        classes=wanted if wanted is not None else base.classes,
    )


def _class_id(c: int | str, names: Sequence[str]) -> int:
    if isinstance(c, bool) or not isinstance(c, int | str | np.integer):
        raise YoloEdgeError(f"a class is an id or a name, got {printable(repr(c))}")
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
        verbose: bool = False,
        imgsz: int | Sequence[int] | None = None,
        device: str | int | None = None,
        half: bool = False,
        save: bool = False,
    ) -> list[Results] | Iterator[Results]:
        """Detect on ``source``: a list of results, one per image or frame (``stream``: an iterator, which a
        camera index or a stream URL needs). ultralytics' ``verbose`` prints nothing here (yolo-edge's predict never
        prints); ``imgsz`` may only be the bundle's, ``device`` only None and ``half`` only False: the bundle fixes
        the size, where each unit runs and at which precision (deploy chose and proved them). ``save``: each
        result's plot written as ultralytics writes it, into a new ``runs/detect/predict<N>`` folder."""
        self._fixed(imgsz, device, half)
        nms = self.nms(conf, iou, classes, max_det)
        items: list[Any] = list(source) if isinstance(source, list | tuple) else [source]
        items = [s for item in items for s in _expand(item)]
        for item in items:
            _check_source(item)
        if not stream and any(_live(s) for s in items):
            raise YoloEdgeError("a camera or a stream URL never ends: call the model with stream=True and iterate")
        found = (r for s in items for r in self._results(s, nms))
        if save:
            folder = _save_dir()
            found = (r for r in found if r.save(folder / f"{Path(r.path).stem}.jpg"))
        return found if stream else list(found)

    predict = __call__

    def _fixed(self, imgsz: int | Sequence[int] | None, device: str | int | None, half: bool) -> None:
        """One line for an ultralytics keyword asking for what the bundle fixed."""
        have = self.bundle.meta.model.imgsz
        if imgsz is not None:
            sizes = [imgsz, imgsz] if not isinstance(imgsz, Sequence) else list(imgsz)
            if not sizes or any(isinstance(v, bool) or not isinstance(v, int | float | np.number) for v in sizes):
                raise YoloEdgeError(f"imgsz must be a size or (height, width), got {printable(repr(imgsz))}")
            want = tuple(float(v) for v in sizes) * (2 if len(sizes) == 1 else 1)
            if want != tuple(float(v) for v in have):
                raise YoloEdgeError(
                    f"imgsz={imgsz!r}: this bundle was deployed and proven at {have[0]}x{have[1]}; deploy again with "
                    "--imgsz for another size"
                )
        if device is not None:
            raise YoloEdgeError(
                f"device={device!r}: the bundle fixes where each unit runs (its profile '{self.bundle.meta.device}'); "
                "deploy to another --device to change it"
            )
        if half:
            raise YoloEdgeError("half=True: the bundle fixes each unit's precision; deploy again to change it")

    def _results(self, source: Source, nms: NmsConfig) -> Iterator[Results]:
        if isinstance(source, np.ndarray):
            if source.ndim != 3 or source.shape[2] != 3 or source.dtype != np.uint8 or 0 in source.shape:
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
            yielded = 0
            for r in runner:
                yield Results(f"frame{r.index}", r.image, r.detections, {**speed_of(r.timing), "ready": r.ready_ms})
                yielded += 1
            if not yielded and runner.stats[0].problems:  # it never opened: said, not an empty iterator
                raise YoloEdgeError(printable(runner.stats[0].problems[-1], 400))


def _expand(source: object) -> list[Any]:
    """A source as ``_results`` takes it: a PIL image as a BGR array (ultralytics takes them; no PIL import here), a
    glob (``"photos/*.jpg"``, where no file has that very name) as its files in order."""
    if type(source).__module__.startswith("PIL.") and hasattr(source, "convert"):
        rgb = np.asarray(source.convert("RGB"))
        return [np.ascontiguousarray(rgb[:, :, ::-1])]
    if isinstance(source, str | Path) and any(c in str(source) for c in "*?[") and not Path(source).exists():
        found = sorted(glob.glob(str(source), recursive=True))
        if not found:
            raise YoloEdgeError(f"no file matches {printable(source)}; pass an image, a folder, a video or a glob")
        return list(found)
    return [source]


def _save_dir() -> Path:
    """ultralytics' ``save=True`` folder: ``runs/detect/predict``, else the first ``predict<N>`` not there yet."""
    root = Path("runs/detect")
    for n in range(1, 10_000):
        folder = root / ("predict" if n == 1 else f"predict{n}")
        if not folder.exists():
            folder.mkdir(parents=True)
            return folder
    raise YoloEdgeError(f"{root} holds 9,999 predict folders; remove some")


def _check_source(source: object) -> None:
    """A source of a kind ``Model`` does not take is a one-line error before any work (a generator, None, bytes:
    not a TypeError from inside; ``""``: not the current folder)."""
    if isinstance(source, bool) or not isinstance(source, str | Path | int | np.ndarray):
        raise YoloEdgeError(
            f"a source must be a file or folder path, a stream URL, a camera index or an image array (or a list of "
            f"them), got {type(source).__name__}"
        )
    if isinstance(source, str) and not source.strip():
        raise YoloEdgeError("the source is an empty string; pass an image, a folder, a video, a URL or an array")


def _live(source: object) -> bool:
    if isinstance(source, int) and not isinstance(source, bool):
        return True
    return isinstance(source, str) and is_live(source)


def load(bundle: str | Path | Bundle) -> Model:
    """The bundle at ``bundle``, compiled, as a model to call on images: ``load("out/bundle")("photo.jpg")``."""
    return Model(bundle)
