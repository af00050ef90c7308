"""yolo-edge: split, place, run and prove YOLOv8 detectors on edge NPU + CPU."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("yolo-edge")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+source"
