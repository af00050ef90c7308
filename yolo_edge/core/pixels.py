"""The model's image input in its two forms, and the one conversion between them.

- **pixels**: the letterboxed frame as a camera gives it, ``(1, H, W, 3)`` uint8 BGR (what the letterbox makes);
- **tensor**: what ultralytics' ONNX export takes, ``(1, 3, H, W)`` float32 RGB in [0, 1].

An executable whose runtime normalises in its own graph takes the pixels (``Executable.pixel_inputs``: OpenVINO on
the CPU, with its ``PrePostProcessor``), every other one the tensor; ``Executable.run`` converts a feed given in the
other form, so a frame's pixels reach a CPU twin as the tensor and a calibration tensor reaches a pixel input as
pixels. Both directions are exact for a letterboxed image (each float is a uint8 over 255).

Example:
    >>> import numpy as np
    >>> pixels = np.zeros((1, 4, 6, 3), np.uint8); pixels[..., 2] = 255  # red, in BGR
    >>> tensor = to_tensor(pixels)
    >>> tensor.shape, float(tensor[0, 0].max()), bool((to_pixels(tensor) == pixels).all())
    ((1, 3, 4, 6), 1.0, True)
"""

from __future__ import annotations

import cv2
import numpy as np

IMAGE = "images"  # the image input's name in ultralytics' ONNX export (its exporter's ``input_names``)


def is_pixels(a: np.ndarray, shape: tuple[int, ...]) -> bool:
    """``a`` is the pixel form of an image tensor of ``shape`` ``(1, 3, H, W)``."""
    return (
        a.dtype == np.uint8
        and len(shape) == 4
        and shape[1] == 3
        and tuple(a.shape) == (shape[0], shape[2], shape[3], 3)
    )


def to_tensor(pixels: np.ndarray) -> np.ndarray:
    """BGR HWC uint8 -> RGB CHW float32 / 255, one pass per channel, no temporaries."""
    n, h, w, _ = pixels.shape
    tensor = np.empty((n, 3, h, w), np.float32)
    for b in range(n):
        for c in range(3):
            np.divide(pixels[b, ..., 2 - c], np.float32(255), out=tensor[b, c], casting="unsafe")
    return tensor


def to_pixels(tensor: np.ndarray) -> np.ndarray:
    """RGB CHW float32 in [0, 1] -> BGR HWC uint8 (x 255, rounded): the inverse of :func:`to_tensor`."""
    return np.stack([cv2.merge([cv2.convertScaleAbs(t[c], alpha=255.0) for c in (2, 1, 0)]) for t in tensor])
