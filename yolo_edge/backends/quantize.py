"""INT8 post-training quantization with onnxruntime's ``quantize_static``: QDQ format, int8 per-channel
symmetric weights, MinMax calibration.

Where the Q/DQ pairs go depends on the runtime that will run the model (a *recipe*):

- ``onnxruntime``: every quantizable op, Conv outputs included, uint8 activations (U8S8, onnxruntime's
  fast path on x86; int8 activations run 4x slower there). onnxruntime fuses ``DQ -> Conv -> Q``
  into QLinearConv and the SiLU into QLinearSigmoid/QLinearMul; it needs the Q on the Conv output.
- ``openvino-u8``: the inputs of Conv, Add, Concat, Split, MaxPool and Resize only, none on a Conv's
  output (the placement NNCF uses), uint8 asymmetric activations. A Q between a Conv and its SiLU
  stops OpenVINO fusing the SiLU and the requantization into the convolution; with this placement
  every Conv runs INT8 with its SiLU fused (tests/test_runtime.py reads OpenVINO's runtime model).
- ``openvino-s8``: the same placement with int8 symmetric activations (zero point 0). SiLU outputs are
  lopsided (-0.28 .. +max), so symmetric codes are twice as coarse; whether OpenVINO's s8 kernels are
  faster than u8, and whether their results are right, depends on the CPU (README: split vs all-CPU,
  ``benchmarks/split_vs_cpu.py``). The planner therefore measures both and verifies the one it keeps.

OpenVINO's own quantizer, NNCF, is ``backends.nncf_int8``; these recipes are its ``qdq`` alternative.
Nodes in ``exclude`` (layer-level mixed precision) get no Q/DQ and stay FP32.

The calibration feeds are the subgraph's own inputs, produced by running calibration images through
the preceding subgraphs in FP32 (the neck is calibrated on real backbone outputs). Results are cached on
disk by a hash of the model, the calibration data, the options and the quantizer's release, so a subgraph +
calibration set is quantized once per release of onnxruntime.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

from yolo_edge.backends.base import CalibSet, hash_feeds
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import cache_root, package_versions, read_cached, write_cached

QUANT_VERSION = "qdq-perchannel-minmax-5"  # 5: keyed on the graph only, entries verified by digest


@dataclass(frozen=True)
class Recipe:
    ops: tuple[str, ...] | None  # op types whose inputs get Q/DQ (None: every op the quantizer knows)
    no_output_q: tuple[str, ...] = ()  # op types whose outputs get none
    signed_symmetric_activations: bool = False  # int8 activations, zero point 0 (else uint8, asymmetric)


_OV_OPS = ("Conv", "Add", "Concat", "Split", "MaxPool", "Resize")
RECIPES = {
    "onnxruntime": Recipe(None),
    "openvino-u8": Recipe(_OV_OPS, no_output_q=("Conv",)),
    "openvino-s8": Recipe(_OV_OPS, no_output_q=("Conv",), signed_symmetric_activations=True),
}


def cache_dir() -> Path:
    return cache_root() / "quant"


class CalibReader(CalibrationDataReader):
    def __init__(self, calib: CalibSet) -> None:
        self._it = iter(calib)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)


def calib_key(model: onnx.ModelProto, calib: CalibSet, options: str, quantizers: Sequence[str]) -> str:
    """A hash of the quantizer's ``options``, the installed versions of the ``quantizers`` packages that run it,
    the model and the calibration data: an upgraded quantizer quantizes anew."""
    h = hashlib.sha256(f"{QUANT_VERSION}/{package_versions(*quantizers)}/{options}".encode())
    content = onnx.ModelProto()
    content.CopyFrom(model)
    content.ClearField("metadata_props")  # ultralytics writes its export date there: the graph is the key
    content.ClearField("doc_string")
    h.update(content.SerializeToString(deterministic=True))
    hash_feeds(h, calib)
    return h.hexdigest()[:32]


def quantized(
    model: onnx.ModelProto,
    calib: CalibSet,
    options: str,
    quantize: Callable[[str, str], None],
    quantizers: Sequence[str] = ("onnxruntime",),
) -> onnx.ModelProto:
    """``quantize(src, dst)`` of ``model`` written to ``src``, cached by the graph, ``calib``, ``options`` and the
    ``quantizers``' releases."""
    if not calib:
        raise YoloEdgeError("INT8 needs calibration images; pass --calib DIR with at least one image")
    path = cache_dir() / f"{calib_key(model, calib, options, quantizers)}.onnx"
    cached = read_cached(path)
    if cached is not None:
        return onnx.load_from_string(cached)
    with tempfile.TemporaryDirectory(prefix="yolo-edge-quant-") as tmp:
        src, dst = Path(tmp, "fp32.onnx"), Path(tmp, "int8.onnx")
        onnx.save(model, str(src))
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)  # onnxruntime's quantizer logs a pre-processing hint on the root logger
        try:
            quantize(str(src), str(dst))
        finally:
            root.setLevel(level)
        quantized = onnx.load(str(dst))
        write_cached(path, quantized.SerializeToString())
    return quantized


def quantize_int8(
    model: onnx.ModelProto, calib: CalibSet, recipe: str = "onnxruntime", exclude: Sequence[str] = ()
) -> onnx.ModelProto:
    """The QDQ INT8 version of ``model`` for the ``recipe``'s runtime, calibrated on ``calib``, ``exclude`` nodes
    left in FP32 (cached); an already-QDQ model is returned as is."""
    if any(n.op_type == "QuantizeLinear" for n in model.graph.node):
        return model
    options = RECIPES[recipe]

    def run(src: str, dst: str) -> None:
        quantize_static(
            src,
            dst,
            CalibReader(calib),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QInt8 if options.signed_symmetric_activations else QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            per_channel=True,
            op_types_to_quantize=list(options.ops) if options.ops else None,
            nodes_to_exclude=list(exclude),
            extra_options={
                "ActivationSymmetric": options.signed_symmetric_activations,
                "WeightSymmetric": True,
                "OpTypesToExcludeOutputQuantization": list(options.no_output_q),
            },
        )

    return quantized(model, calib, f"{recipe}/{','.join(sorted(exclude))}", run)
