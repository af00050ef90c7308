"""Deployment bundles: written atomically (temp dir, then rename), loaded without torch or ultralytics.

Layout::

    bundle/
      meta.json          model metadata, device, yolo-edge version, chosen plan, data used, unit fusion
      plan.json          the chosen PlacementPlan (devices, precisions, INT8 schemes, every check's numbers)
      deploy.yaml        the deploy settings it was proven with (thresholds, NMS, runtime): check/val/bench/run use them
      calib/*            the calibration sample deploy used (the images; agreement data when no labels were given)
      model.onnx         the monolithic FP32 model: the reference for val/check
      units.json         the deployed plan's units in order: subgraphs, device, variant, FP32 graph file
      subgraphs/<s>.onnx each subgraph in FP32; units/<unit>.onnx a fused or op-level unit's FP32 graph (the
                         CPU twin, and what an accelerator compiles when nothing compiled is stored)
      units/<unit>.ov.xml + .ov.bin an NPU unit NNCF quantized for OpenVINO (backbone+neck.ov.xml);
                         units/<unit>.int8.onnx one quantized by onnxruntime's quantizer (QDQ); units/<unit>.rknn
                         the unit as Rockchip's compiler built it, for RKNNLite on the board
      sample.npz         one calibration frame's tensors at every unit's inputs: the warm-up and CPU estimate
      profile.yaml       the device profile used
      events.jsonl       the runtime fallback events of the deployed plan's validation and benchmark runs
      report.json, report.md, plots/*.png

Every path inside is relative: a bundle copied to another directory or machine works as it is. Loading one
compiles nothing it stores: the units' graphs and compiled files are read as they are (no re-split, no
calibration run); only a unit whose backend cannot load its stored form (Rockchip's simulator) is compiled,
calibrated on the stored images through the units before it.

Example:
    >>> b = load_bundle("out/bundle")  # doctest: +SKIP
    >>> dets, timing = b.detector().detect(cv2.imread("img.jpg"))  # doctest: +SKIP

The package by concern: ``layout`` (what a bundle holds, and the bytes deploy writes for a proven plan), ``write``
(atomic replacement, only ever of a folder deploy wrote), ``read`` (a bundle someone else wrote, read as untrusted
input and checked) and ``opened`` (:class:`Bundle`: the stored units compiled into executors, detectors, streams).
"""

from yolo_edge.bundle.layout import FORMAT, BundleMeta, Contents, DataRecord, StoredUnit, bundle_files
from yolo_edge.bundle.opened import Bundle, load_bundle, stream
from yolo_edge.bundle.write import check_writable, is_bundle, write_bundle

__all__ = [
    "FORMAT",
    "Bundle",
    "BundleMeta",
    "Contents",
    "DataRecord",
    "StoredUnit",
    "bundle_files",
    "check_writable",
    "is_bundle",
    "load_bundle",
    "stream",
    "write_bundle",
]
