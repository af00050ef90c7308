"""Deterministic synthetic detection dataset: six shape classes on cluttered, textured backgrounds.

Each image is drawn from its own generator seeded by ``(seed, split, index)``, so a split regenerates
byte for byte on one machine and any image can be made alone (another CPU or OpenCV version moves a few
pixels: NumPy's SIMD sin/cos and OpenCV's anti-aliased drawing differ between them). Objects vary in size
(8 px to 150 px on the long side), aspect, colour, rotation and occlusion (each labelled object stays at
least 60 % visible); the background mixes gradients, multi-octave noise, stripes, distractor blobs, lines
and text.

Example:
    >>> from yolo_edge.demo.shapes import write_dataset
    >>> write_dataset("datasets/shapes", seed=0, sizes={"train": 2000, "val": 300})  # doctest: +SKIP
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from yolo_edge.demo import CLASS_NAMES

IMAGE_SIZES: tuple[tuple[int, int], ...] = ((320, 320), (320, 240), (240, 320))  # (width, height)
SPLIT_CODES: dict[str, int] = {"train": 1, "val": 2, "calib": 3, "test": 4}
JPEG_QUALITY = 92
MIN_VISIBLE = 0.6


@dataclass(frozen=True)
class SyntheticObject:
    """One labelled object: class index and its pixel box ``(x1, y1, x2, y2)``, right/bottom exclusive."""

    class_id: int
    box: tuple[int, int, int, int]


@dataclass(frozen=True)
class SyntheticImage:
    image: np.ndarray  # HxWx3 uint8, BGR
    objects: tuple[SyntheticObject, ...]


def _noise_layer(rng: np.random.Generator, h: int, w: int, cells: int) -> np.ndarray:
    small = rng.random((cells, cells, 3), dtype=np.float32)
    return cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)


def _background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    c0, c1 = rng.uniform(20, 235, size=(2, 3)).astype(np.float32)
    angle = rng.uniform(0, 2 * np.pi)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    t = (np.cos(angle) * xx + np.sin(angle) * yy) / max(h, w)
    t = (t - t.min()) / max(float(t.max() - t.min()), 1e-6)
    img = c0[None, None, :] * (1 - t[..., None]) + c1[None, None, :] * t[..., None]
    for cells, amp in ((4, 60.0), (16, 40.0), (64, 25.0)):
        img += (_noise_layer(rng, h, w, cells) - 0.5) * amp * rng.uniform(0.3, 1.2)
    if rng.random() < 0.35:
        period = rng.uniform(6, 30)
        phase = rng.uniform(0, 2 * np.pi)
        a = rng.uniform(0, np.pi)
        stripes = np.sin((np.cos(a) * xx + np.sin(a) * yy) * 2 * np.pi / period + phase)
        img += stripes[..., None] * rng.uniform(8, 25)
    return img


def _unit_polygon(rng: np.random.Generator, class_id: int) -> list[np.ndarray]:
    """Outline(s) in unit coordinates ([-1, 1]^2); a second outline is a hole."""
    name = CLASS_NAMES[class_id]
    if name in ("circle", "ring"):
        t = np.linspace(0, 2 * np.pi, 48, endpoint=False)
        outer = np.stack([np.cos(t), np.sin(t)], axis=1)
        if name == "circle":
            return [outer]
        return [outer, outer * rng.uniform(0.45, 0.65)]
    if name == "rectangle":
        return [np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], dtype=np.float64)]
    if name == "triangle":
        t = np.array([-np.pi / 2, np.pi / 6, 5 * np.pi / 6]) + rng.uniform(-0.15, 0.15, 3)
        return [np.stack([np.cos(t), np.sin(t)], axis=1)]
    if name == "star":
        t = np.linspace(-np.pi / 2, 3 * np.pi / 2, 10, endpoint=False)
        r = np.where(np.arange(10) % 2 == 0, 1.0, rng.uniform(0.38, 0.5))
        return [np.stack([r * np.cos(t), r * np.sin(t)], axis=1)]
    arm = rng.uniform(0.25, 0.4)  # cross
    return [
        np.array(
            [
                [-arm, -1],
                [arm, -1],
                [arm, -arm],
                [1, -arm],
                [1, arm],
                [arm, arm],
                [arm, 1],
                [-arm, 1],
                [-arm, arm],
                [-1, arm],
                [-1, -arm],
                [-arm, -arm],
            ],
            dtype=np.float64,
        )
    ]


def _object_size(rng: np.random.Generator) -> float:
    u = rng.random()
    if u < 0.25:
        return rng.uniform(8, 16)
    if u < 0.75:
        return rng.uniform(16, 64)
    return rng.uniform(64, 150)


def _object_mask(rng: np.random.Generator, class_id: int, h: int, w: int) -> np.ndarray | None:
    size = _object_size(rng)
    aspect = rng.uniform(0.6, 1.6) if CLASS_NAMES[class_id] != "star" else rng.uniform(0.85, 1.15)
    sx, sy = size / 2 * min(1.0, aspect), size / 2 * min(1.0, 1 / aspect)
    theta = rng.uniform(0, 2 * np.pi)
    rot = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    outlines = [(poly * [sx, sy]) @ rot.T for poly in _unit_polygon(rng, class_id)]
    ext = np.abs(np.concatenate(outlines)).max(axis=0)
    if ext[0] * 2 + 2 >= w or ext[1] * 2 + 2 >= h:
        return None
    cx = rng.uniform(ext[0] + 1, w - ext[0] - 1)
    cy = rng.uniform(ext[1] + 1, h - ext[1] - 1)
    mask = np.zeros((h, w), np.uint8)
    shift = 4  # sub-pixel precision for small objects
    for k, poly in enumerate(outlines):
        pts = np.round((poly + [cx, cy]) * (1 << shift)).astype(np.int32)
        cv2.fillPoly(mask, [pts], 0 if k else 255, lineType=cv2.LINE_8, shift=shift)
    return mask if mask.any() else None


def _paint(rng: np.random.Generator, img: np.ndarray, mask: np.ndarray) -> None:
    ys, xs = np.nonzero(mask)
    local = img[ys, xs].mean(axis=0)
    colour = rng.uniform(0, 255, 3)
    for _ in range(20):
        if np.linalg.norm(colour - local) > 110:
            break
        colour = rng.uniform(0, 255, 3)
    shade = 1.0 + (rng.random((len(ys), 1)) - 0.5) * 0.15
    img[ys, xs] = np.clip(colour[None, :] * shade, 0, 255)


def _distractors(rng: np.random.Generator, img: np.ndarray, count: int) -> None:
    h, w = img.shape[:2]
    for _ in range(count):
        colour = tuple(float(c) for c in rng.uniform(0, 255, 3))
        kind = rng.integers(3)
        if kind == 0:  # irregular blob
            n = int(rng.integers(6, 12))
            t = np.sort(rng.uniform(0, 2 * np.pi, n))
            r = rng.uniform(3, 30) * rng.uniform(0.5, 1.0, n)
            c = rng.uniform([0, 0], [w, h])
            pts = np.stack([c[0] + r * np.cos(t), c[1] + r * np.sin(t)], axis=1).astype(np.int32)
            cv2.fillPoly(img, [pts], colour)
        elif kind == 1:  # line
            p0 = tuple(int(v) for v in rng.uniform([0, 0], [w, h]))
            p1 = tuple(int(v) for v in rng.uniform([0, 0], [w, h]))
            cv2.line(img, p0, p1, colour, int(rng.integers(1, 4)), cv2.LINE_AA)
        else:  # text
            org = tuple(int(v) for v in rng.uniform([0, 10], [w - 20, h]))
            text = "".join(chr(int(c)) for c in rng.integers(65, 91, int(rng.integers(2, 6))))
            cv2.putText(img, text, org, cv2.FONT_HERSHEY_SIMPLEX, rng.uniform(0.3, 0.9), colour, 1, cv2.LINE_AA)


def make_image(seed: int, split: str, index: int) -> SyntheticImage:
    """Draw image ``index`` of ``split``; the same arguments always give the same pixels and labels."""
    rng = np.random.default_rng([seed, SPLIT_CODES[split], index])
    w, h = IMAGE_SIZES[int(rng.integers(len(IMAGE_SIZES)))]
    canvas = np.clip(_background(rng, h, w), 0, 255).astype(np.uint8)
    _distractors(rng, canvas, int(rng.integers(3, 9)))
    owner = np.full((h, w), -1, np.int16)
    areas: list[int] = []
    classes: list[int] = []
    masks: list[np.ndarray] = []
    for _ in range(int(rng.integers(3, 13))):
        class_id = int(rng.integers(len(CLASS_NAMES)))
        for _attempt in range(20):
            mask = _object_mask(rng, class_id, h, w)
            if mask is None:
                continue
            covered = mask > 0
            ok = all(np.count_nonzero((owner == i) & ~covered) >= MIN_VISIBLE * areas[i] for i in range(len(areas)))
            if ok:
                owner[covered] = len(areas)
                areas.append(int(covered.sum()))
                classes.append(class_id)
                masks.append(covered)
                _paint(rng, canvas, mask)
                break
    for _ in range(int(rng.integers(0, 4))):  # thin occluding lines over the objects
        p0 = tuple(int(v) for v in rng.uniform([0, 0], [w, h]))
        p1 = tuple(int(v) for v in rng.uniform([0, 0], [w, h]))
        colour = tuple(float(c) for c in rng.uniform(0, 255, 3))
        cv2.line(canvas, p0, p1, colour, 1, cv2.LINE_AA)
    noisy = canvas.astype(np.float32) + rng.normal(0, rng.uniform(3, 10), canvas.shape).astype(np.float32)
    image = np.clip(noisy, 0, 255).astype(np.uint8)
    if rng.random() < 0.3:
        image = cv2.GaussianBlur(image, (3, 3), 0)
    objects = []
    for class_id, covered in zip(classes, masks):
        ys, xs = np.nonzero(covered)
        objects.append(SyntheticObject(class_id, (int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1)))
    return SyntheticImage(image=image, objects=tuple(objects))


def encode_jpeg(image: np.ndarray) -> bytes:
    ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
    if not ok:
        raise RuntimeError("OpenCV failed to encode a JPEG")
    return buf.tobytes()


def _yolo_label_lines(sample: SyntheticImage, objects: Sequence[SyntheticObject]) -> str:
    h, w = sample.image.shape[:2]
    lines = []
    for obj in objects:
        x1, y1, x2, y2 = obj.box
        lines.append(
            f"{obj.class_id} {(x1 + x2) / 2 / w:.6f} {(y1 + y2) / 2 / h:.6f} {(x2 - x1) / w:.6f} {(y2 - y1) / h:.6f}"
        )
    return "\n".join(lines) + ("\n" if lines else "")


def write_images(out_dir: str | Path, seed: int, split: str, count: int) -> list[Path]:
    """Write ``count`` JPEGs of ``split`` (no labels) into ``out_dir``; used for calibration sets."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = out / f"{split}_{i:05d}.jpg"
        path.write_bytes(encode_jpeg(make_image(seed, split, i).image))
        paths.append(path)
    return paths


def write_dataset(root: str | Path, seed: int, sizes: dict[str, int], classes: Mapping[int, str] | None = None) -> Path:
    """Write an ultralytics-format dataset (images/, labels/, data.yaml) plus ``<split>_coco.json`` per split.

    ``classes`` relabels: shape class id -> new name; the new ids follow the mapping's order, and shapes
    of other classes stay in the images unlabelled (background). Default: the six shape classes.
    Returns the path of ``data.yaml``. ``data.yaml`` has no ``path`` key, so ultralytics resolves the
    splits relative to the yaml's folder and the tree can be moved.
    """
    root = Path(root)
    keep = dict(classes) if classes is not None else dict(enumerate(CLASS_NAMES))
    new_id = {src: i for i, src in enumerate(keep)}
    names = list(keep.values())
    for split, count in sizes.items():
        img_dir, lbl_dir = root / "images" / split, root / "labels" / split
        img_dir.mkdir(parents=True, exist_ok=True)
        lbl_dir.mkdir(parents=True, exist_ok=True)
        coco: dict[str, list[dict[str, object]]] = {
            "images": [],
            "annotations": [],
            "categories": [{"id": i + 1, "name": n} for i, n in enumerate(names)],
        }
        for i in range(count):
            sample = make_image(seed, split, i)
            objects = [SyntheticObject(new_id[o.class_id], o.box) for o in sample.objects if o.class_id in new_id]
            name = f"{i:05d}"
            (img_dir / f"{name}.jpg").write_bytes(encode_jpeg(sample.image))
            (lbl_dir / f"{name}.txt").write_text(_yolo_label_lines(sample, objects))
            h, w = sample.image.shape[:2]
            coco["images"].append({"id": i + 1, "file_name": f"{name}.jpg", "width": w, "height": h})
            for obj in objects:
                x1, y1, x2, y2 = obj.box
                coco["annotations"].append(
                    {
                        "id": len(coco["annotations"]) + 1,
                        "image_id": i + 1,
                        "category_id": obj.class_id + 1,
                        "bbox": [x1, y1, x2 - x1, y2 - y1],
                        "area": (x2 - x1) * (y2 - y1),
                        "iscrowd": 0,
                    }
                )
        (root / f"{split}_coco.json").write_text(json.dumps(coco, indent=1))
    lines = [f"{split}: images/{split}" for split in sizes]
    if "train" not in sizes:  # ultralytics refuses a data.yaml without train (yolo export ... int8=True data=...)
        lines.insert(0, f"train: images/{next(iter(sizes))}")
    lines.append("names:")
    lines += [f"  {i}: {n}" for i, n in enumerate(names)]
    (root / "data.yaml").write_text("\n".join(lines) + "\n")
    return root / "data.yaml"


def demo_val_data(count: int = 300, seed: int = 0) -> Path:
    """The demo model's validation split (seed 0, the one it was validated on), generated once into the
    user cache; returns its ``data.yaml``."""
    import os
    import shutil
    import tempfile

    from yolo_edge.core.files import cache_root

    root = cache_root() / "datasets" / f"shapes-seed{seed}-val{count}"
    if _complete(root, count):
        return root / "data.yaml"
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".shapes-", dir=root.parent))
    try:
        write_dataset(tmp, seed, {"val": count})
        if root.exists() and not _complete(root, count):  # damaged (files deleted by hand, a full disk): replaced
            print(f"yolo-edge: WARNING: the demo dataset {root} is incomplete; rebuilding it", file=sys.stderr)
            shutil.rmtree(root, ignore_errors=True)
        try:
            os.replace(tmp, root)
        except OSError:  # another process made it first
            if not _complete(root, count):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root / "data.yaml"


def _complete(root: Path, count: int) -> bool:
    """The cached dataset at ``root`` has its data.yaml and every image and label."""
    images, labels = root / "images" / "val", root / "labels" / "val"
    return (
        (root / "data.yaml").is_file()
        and images.is_dir()
        and labels.is_dir()
        and len(list(images.glob("*.jpg"))) == count
        and len(list(labels.glob("*.txt"))) == count
    )
