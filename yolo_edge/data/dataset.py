"""Labelled detection datasets read into one internal form.

Two inputs are accepted: an ultralytics ``data.yaml`` (``path``/``val``/``names``, YOLO txt labels in the
parallel ``labels/`` folder), or a COCO JSON with its image folder (``--data ann.json`` with the images
beside it or ``--images DIR``).

Example:
    >>> ds = load_dataset("datasets/shapes/data.yaml")  # doctest: +SKIP
    >>> len(ds), ds.names[:2], ds.records[0].boxes.shape  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from yolo_edge.core.config import read_yaml
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import json_loads, read_regular
from yolo_edge.pipeline.preprocess import IMAGE_SUFFIXES, read_image


@dataclass(frozen=True)
class ImageRecord:
    """One image and its ground truth: ``boxes`` (M, 4) xyxy pixels, ``classes`` (M,) contiguous ids."""

    path: Path
    width: int
    height: int
    boxes: np.ndarray
    classes: np.ndarray


@dataclass(frozen=True)
class Dataset:
    names: tuple[str, ...]
    records: tuple[ImageRecord, ...]

    def __len__(self) -> int:
        return len(self.records)

    def subset(self, n: int) -> Dataset:
        """The first ``n`` images (a fixed, reproducible subset)."""
        return Dataset(self.names, self.records[:n])

    def pick(self, indices: Sequence[int]) -> Dataset:
        """The images at ``indices``, in that order."""
        return Dataset(self.names, tuple(self.records[i] for i in indices))


def load_dataset(data: str | Path, split: str = "val", images: str | Path | None = None) -> Dataset:
    """Load ``data`` (ultralytics data.yaml or COCO JSON) into a :class:`Dataset`."""
    path = Path(data)
    if not path.is_file():
        raise YoloEdgeError(f"dataset not found: {path}; pass an ultralytics data.yaml or a COCO JSON")
    if path.suffix.lower() in (".yaml", ".yml"):
        ds = _from_yolo_yaml(path, split)
    elif path.suffix.lower() == ".json":
        ds = _from_coco(path, Path(images) if images else None)
    else:
        raise YoloEdgeError(f"unsupported dataset file {path}: pass an ultralytics data.yaml or a COCO JSON")
    if not ds.records:
        raise YoloEdgeError(f"dataset {path} has no images in its '{split}' split")
    return ds


def _names(raw: object, source: Path) -> tuple[str, ...]:
    if isinstance(raw, dict):
        return tuple(str(raw[k]) for k in sorted(raw))
    if isinstance(raw, list):
        return tuple(str(n) for n in raw)
    raise YoloEdgeError(f"{source} has no 'names' list or mapping")


def _from_yolo_yaml(path: Path, split: str) -> Dataset:
    cfg = read_yaml(path, "data.yaml")
    if not isinstance(cfg, dict) or split not in cfg:
        raise YoloEdgeError(
            f"{path} has no '{split}' entry; an ultralytics data.yaml names its splits (val: images/val)"
        )
    names = _names(cfg.get("names"), path)
    # a relative ``path:`` is read from the data.yaml's folder (wherever the command runs); none: that folder itself
    root = (path.parent / str(cfg.get("path") or ".")).resolve()
    img_dir = root / str(cfg[split])
    if not img_dir.is_dir():
        raise YoloEdgeError(f"{path}: the {split} image folder {img_dir} does not exist")
    records = []
    for img in sorted(p for p in img_dir.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES):
        label = _label_path(img)
        h, w = image_size(img)
        rows = _yolo_rows(label, len(names)) if label.is_file() else np.zeros((0, 5))
        cx, cy, bw, bh = rows[:, 1] * w, rows[:, 2] * h, rows[:, 3] * w, rows[:, 4] * h
        boxes = np.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], axis=1).astype(np.float32)
        records.append(ImageRecord(img, w, h, boxes, rows[:, 0].astype(np.int64)))
    return Dataset(names, tuple(records))


def _yolo_rows(label: Path, n_classes: int) -> np.ndarray:
    """``label``'s rows ``class cx cy w h`` (normalised), checked as ultralytics' dataset check does: a class
    outside the names, a coordinate that is not a finite number in [0, 1], an empty box or a segmentation
    polygon is a one-line error naming the file and line, never a silently mis-scored label."""
    rows = []
    text = read_regular(label, "label file", 1 << 24).decode("utf-8", errors="replace")
    for n, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        where = f"{label}:{n}"
        if len(fields) > 5:
            raise YoloEdgeError(
                f"{where}: {len(fields)} values, a segmentation polygon; detection labels are 'class cx cy w h'"
            )
        try:
            values = [float(v) for v in fields]
        except ValueError:
            raise YoloEdgeError(f"{where}: expected 'class cx cy w h' numbers, got {line[:60]!r}") from None
        if len(values) != 5:
            raise YoloEdgeError(f"{where}: expected 5 values 'class cx cy w h', got {len(values)}")
        cls = values[0]
        if not cls.is_integer() or not 0 <= cls < n_classes:
            raise YoloEdgeError(
                f"{where}: class {fields[0]} is not one of the {n_classes} classes (0..{n_classes - 1})"
            )
        if not all(math.isfinite(v) and 0 <= v <= 1 for v in values[1:]) or values[3] <= 0 or values[4] <= 0:
            raise YoloEdgeError(
                f"{where}: cx cy w h must be normalised to [0, 1] with w, h > 0, got {' '.join(fields[1:])}"
            )
        rows.append(values)
    return np.array(rows, np.float64).reshape(-1, 5)


def _from_coco(path: Path, images: Path | None) -> Dataset:
    try:
        coco = json_loads(read_regular(path, "COCO JSON", 1 << 31))
        cats = sorted(coco["categories"], key=lambda c: c["id"])
        imgs = coco["images"]
        anns = coco.get("annotations", [])
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise YoloEdgeError(f"{path} is not a COCO detection JSON ({exc.__class__.__name__}: {exc})") from None
    try:
        return _coco_records(path, cats, imgs, anns, images or path.parent)
    except (KeyError, TypeError, ValueError) as exc:
        raise YoloEdgeError(
            f"{path} is not a COCO detection JSON ({exc.__class__.__name__}: {exc} missing or malformed)"
        ) from None


def _coco_records(
    path: Path, cats: list[dict[str, Any]], imgs: list[dict[str, Any]], anns: list[dict[str, Any]], folder: Path
) -> Dataset:
    contiguous = {c["id"]: i for i, c in enumerate(cats)}
    by_image: dict[int, list[dict[str, Any]]] = {}
    for a in anns:
        by_image.setdefault(int(a["image_id"]), []).append(a)
    records = []
    for im in sorted(imgs, key=lambda i: i["id"]):
        file = folder / im["file_name"]
        if not file.is_file():
            raise YoloEdgeError(
                f"{path} lists {im['file_name']} but {file} does not exist; pass the image folder with --images"
            )
        rows = by_image.get(int(im["id"]), [])
        boxes = np.array([_coco_box(a, path) for a in rows], np.float32).reshape(-1, 4)
        classes = np.array([_coco_class(a, contiguous, path) for a in rows], np.int64)
        records.append(ImageRecord(file, int(im["width"]), int(im["height"]), boxes, classes))
    return Dataset(tuple(str(c["name"]) for c in cats), tuple(records))


def _coco_box(ann: dict[str, Any], path: Path) -> list[float]:
    """An annotation's ``bbox`` [x, y, w, h] as xyxy; a one-line error if it is missing or not a box."""
    box = ann.get("bbox")
    if (
        not isinstance(box, list)
        or len(box) != 4
        or not all(isinstance(v, int | float) and math.isfinite(v) for v in box)
    ):
        raise YoloEdgeError(f"{path}: annotation {ann.get('id', '?')} has no bbox [x, y, width, height] (got {box!r})")
    x, y, w, h = (float(v) for v in box)
    if w < 0 or h < 0:
        raise YoloEdgeError(f"{path}: annotation {ann.get('id', '?')} has a negative width or height (bbox {box})")
    return [x, y, x + w, y + h]


def _coco_class(ann: dict[str, Any], contiguous: dict[int, int], path: Path) -> int:
    cat = ann.get("category_id")
    if not isinstance(cat, int) or cat not in contiguous:
        raise YoloEdgeError(
            f"{path}: annotation {ann.get('id', '?')} has category_id {cat!r}, which is not in 'categories' "
            f"(ids {sorted(contiguous)[:10]})"
        )
    return contiguous[cat]


def _label_path(image: Path) -> Path:
    """ultralytics' rule: the last ``images`` folder in the path becomes ``labels``, suffix ``.txt``."""
    parts = list(image.parent.parts)
    if "images" not in parts:
        raise YoloEdgeError(f"{image} is not under an 'images' folder, so its YOLO label file cannot be found")
    idx = len(parts) - 1 - parts[::-1].index("images")
    parts[idx] = "labels"
    return Path(*parts) / f"{image.stem}.txt"


def image_size(path: Path) -> tuple[int, int]:
    """Height and width as detection sees the image: decoded as ``read_image`` decodes it for the detector, with
    its EXIF orientation applied (a photo stored rotated has the labels of its upright view, as ultralytics
    reads them)."""
    image = read_image(path)
    return int(image.shape[0]), int(image.shape[1])


def image_folder(folder: str | Path, limit: int | None = None) -> Dataset:
    """An unlabelled folder of images, the first ``limit`` by name (for agreement with the reference model)."""
    from yolo_edge.pipeline.preprocess import list_images

    records = []
    for p in list_images(folder, "data folder")[:limit]:
        h, w = image_size(p)
        records.append(ImageRecord(p, w, h, np.zeros((0, 4), np.float32), np.zeros(0, np.int64)))
    return Dataset((), tuple(records))
