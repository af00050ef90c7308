"""Letterbox preprocessing, identical to ultralytics' ``LetterBox(auto=False, center=True)``.

Example:
    >>> lb = letterbox(cv2.imread("bus.jpg"), (640, 640))  # doctest: +SKIP
    >>> lb.tensor.shape, lb.gain, lb.pad  # doctest: +SKIP
    ((1, 3, 640, 640), 0.5926, (0, 80))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import cv2
import numpy as np

from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import printable
from yolo_edge.core.pixels import to_tensor

PAD_VALUE = 114
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


@dataclass(frozen=True)
class Letterboxed:
    """The network input and what is needed to map boxes back to the original image."""

    pixels: np.ndarray  # (1, H, W, 3) uint8 BGR: the image resized and padded (yolo_edge.core.pixels)
    orig_shape: tuple[int, int]  # (height, width) of the original image
    gain: tuple[float, float]  # (gain_y, gain_x) = resized / original
    pad: tuple[int, int]  # (pad_x, pad_y) added on the left and top

    @cached_property
    def tensor(self) -> np.ndarray:
        """(1, 3, H, W) float32 RGB in [0, 1], made when first asked for (a unit normalising in its own graph takes
        the pixels)."""
        return to_tensor(self.pixels)

    @property
    def inside(self) -> np.ndarray:
        """(h, w, 3) uint8 BGR: the resized image without its padding (a view of ``pixels``)."""
        h, w = round(self.orig_shape[0] * self.gain[0]), round(self.orig_shape[1] * self.gain[1])
        return self.pixels[0, self.pad[1] : self.pad[1] + h, self.pad[0] : self.pad[0] + w]


def letterbox(image: np.ndarray, imgsz: tuple[int, int]) -> Letterboxed:
    """Resize ``image`` (HxWx3 BGR uint8) keeping its aspect ratio and pad it to ``imgsz`` (height, width)."""
    if image.ndim != 3 or image.shape[2] != 3:
        raise YoloEdgeError(f"expected an HxWx3 BGR image, got an array of shape {image.shape}")
    h, w = image.shape[:2]
    r = min(imgsz[0] / h, imgsz[1] / w)
    new_w, new_h = max(round(w * r), 1), max(round(h * r), 1)
    dw, dh = (imgsz[1] - new_w) / 2, (imgsz[0] - new_h) / 2
    top, left = round(dh - 0.1), round(dw - 0.1)
    pixels = np.full((1, *imgsz, 3), PAD_VALUE, np.uint8)
    inside = pixels[0, top : top + new_h, left : left + new_w]  # resized straight into the padded frame
    if (w, h) != (new_w, new_h):
        cv2.resize(image, (new_w, new_h), dst=inside, interpolation=cv2.INTER_LINEAR)
    else:
        inside[...] = image
    return Letterboxed(pixels=pixels, orig_shape=(h, w), gain=(new_h / h, new_w / w), pad=(left, top))


MAX_IMAGE_BYTES = 256 * 2**20  # a larger file is refused before it is read (no camera frame is this large)


def read_image(path: str | Path, flags: int = cv2.IMREAD_COLOR) -> np.ndarray:
    """Read an image file as BGR uint8; a one-line error if it is missing, too large or not an image. The bytes
    are read by Python and decoded by OpenCV (``cv2.imread`` takes the name as UTF-8 and crashes the process on
    a name that is not: a file name is any bytes on Linux)."""
    path = Path(path)
    if not path.is_file():
        raise YoloEdgeError(f"image not found: {printable(path)}")
    size = path.stat().st_size
    if size > MAX_IMAGE_BYTES:
        raise YoloEdgeError(
            f"{printable(path)} is {size / 2**20:.0f} MiB, over the {MAX_IMAGE_BYTES >> 20} MiB an image may be"
        )
    try:
        image = cv2.imdecode(np.fromfile(path, np.uint8), flags) if size else None
    except cv2.error:  # over OpenCV's pixel limit (OPENCV_IO_MAX_IMAGE_PIXELS): an image bomb, or a huge scan
        raise YoloEdgeError(f"{printable(path)} is too large an image for OpenCV to decode") from None
    if image is None:
        raise YoloEdgeError(f"{printable(path)} is not a readable image (JPEG, PNG, BMP or WebP)")
    return image


def opencv_path(path: str | Path, what: str = "file") -> str:
    """``path`` as OpenCV's video functions take it; a one-line error for a name that is not UTF-8 (OpenCV
    crashes the process on one)."""
    text = str(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise YoloEdgeError(
            f"the {what} name {printable(path)} is not valid UTF-8, which OpenCV cannot open; rename it"
        ) from None
    return text


def list_images(folder: str | Path, what: str = "image folder") -> list[Path]:
    """Sorted image files in ``folder``; a one-line error if it is missing or holds none."""
    folder = Path(folder)
    if not folder.is_dir():
        raise YoloEdgeError(f"{what} not found: {folder}; pass a folder of images")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise YoloEdgeError(f"{what} {folder} has no images ({', '.join(IMAGE_SUFFIXES)})")
    return files


def load_images(files: Sequence[Path], imgsz: tuple[int, int]) -> list[np.ndarray]:
    """Letterboxed network inputs of ``files``."""
    return [letterbox(read_image(f), imgsz).tensor for f in files]


def load_calibration(folder: str | Path, imgsz: tuple[int, int], limit: int | None = None) -> list[np.ndarray]:
    """Letterboxed network inputs from a folder of images (the first ``limit`` in name order)."""
    return load_images(list_images(folder, "calibration folder")[:limit], imgsz)


def default_calib_dir() -> Path:
    """The 64 calibration images shipped with yolo-edge (``calib_data/``)."""
    from importlib import resources

    return Path(str(resources.files("yolo_edge") / "calib_data"))
