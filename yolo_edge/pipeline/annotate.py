"""Boxes drawn on a frame (:class:`BoxAnnotator`, as supervision's annotators): a pure function of the image and
its detections, writing nothing (``pipeline/outputs.py`` writes a stream's annotated images and videos).

Example:
    >>> dets, _ = detector.detect(image)  # doctest: +SKIP
    >>> cv2.imwrite("out.jpg", BoxAnnotator().annotate(image, dets))  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from yolo_edge.pipeline.postprocess import Detections

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
    labels: bool = True  # the ``name confidence`` tag (ultralytics' ``plot(labels=...)``)
    conf: bool = True  # the confidence in the tag (``plot(conf=...)``)
    boxes: bool = True  # the box itself (``plot(boxes=...)``)

    def annotate(self, image: np.ndarray, dets: Detections) -> np.ndarray:
        out = image.copy()
        font = cv2.FONT_HERSHEY_SIMPLEX
        for box, conf, cls, name in zip(dets.xyxy, dets.confidence, dets.class_id, dets.class_names):
            x1, y1, x2, y2 = (int(round(v)) for v in box)
            color = self.color or class_color(int(cls))
            if self.boxes:
                cv2.rectangle(out, (x1, y1), (x2, y2), color, self.thickness)
            if not self.labels:
                continue
            label = f"{name} {conf:.2f}" if self.conf else str(name)
            (tw, th), base = cv2.getTextSize(label, font, self.text_scale, 1)
            top = y1 - th - base - 2 if y1 - th - base - 2 >= 0 else y1  # above the box, inside it at the top edge
            cv2.rectangle(out, (x1, top), (x1 + tw + 2, top + th + base + 2), color, -1)
            ink = (0, 0, 0) if sum(color) > 380 else (255, 255, 255)  # legible on a light or a dark tag
            cv2.putText(out, label, (x1 + 1, top + th + 1), font, self.text_scale, ink, 1, cv2.LINE_AA)
        return out
