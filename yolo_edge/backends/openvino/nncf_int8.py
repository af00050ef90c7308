"""INT8 post-training quantization with NNCF, OpenVINO's own quantizer, as ultralytics' OpenVINO INT8 export
runs it: ``nncf.quantize`` on the OpenVINO model with the MIXED preset (symmetric weights, asymmetric ``u8``
activations) or PERFORMANCE (symmetric ``s8`` activations), fast bias correction, every calibration sample.

The overflow fix: without VNNI (AVX2-only x86), u8 x s8 products are summed in int16 and saturate, so NNCF
quantizes the first layer's weights to 7 bits (its default ``first_layer_only``); with VNNI or AMX nothing
saturates and the fix is off (``disable``), which is more accurate. Which one ran is in the cache key and in
:func:`overflow_fix`'s answer, so a plan can say it.

Layers kept at higher precision (layer-level mixed precision) go in NNCF's ignored scope: their
convolutions get no FakeQuantize and compute in FP32.

Results are cached on disk by a hash of the model, the calibration data, the options and the NNCF and OpenVINO
releases (an upgraded NNCF quantizes anew).
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Sequence
from typing import Any

import onnx

from yolo_edge.backends.base import CalibSet
from yolo_edge.backends.quantize import cache_dir, calib_key
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import read_cached, write_cached
from yolo_edge.core.host import int8_products_saturate
from yolo_edge.core.privacy import no_telemetry

no_telemetry()  # before openvino or nncf is imported: nothing leaves the machine (yolo_edge/core/privacy.py)

NNCF_VERSION = "nncf-ov-3"  # 3: entries verified by digest


def overflow_fix() -> str:
    """NNCF's overflow fix for this CPU: ``disable`` where int8 dot products do not saturate, else
    ``first_layer_only`` (NNCF's default)."""
    return "first_layer_only" if int8_products_saturate() else "disable"


def _ignored_names(ov_model: Any, kept: Sequence[str]) -> list[str]:
    """OpenVINO op names of the ONNX nodes in ``kept``: the node's own op and the ops OpenVINO decomposed it into
    (a Conv with a bias reads as ``<name>/WithoutBiases`` + ``<name>``)."""
    names = [op.get_friendly_name() for op in ov_model.get_ops()]
    found = [n for n in names if any(n == k or n.startswith(f"{k}/") for k in kept)]
    missing = [k for k in kept if not any(n == k or n.startswith(f"{k}/") for n in found)]
    if missing:
        raise YoloEdgeError(f"layers to keep at higher precision are not in the model: {', '.join(missing[:3])}")
    return found


def quantize_nncf(
    model: onnx.ModelProto, calib: CalibSet, scheme: str, kept: Sequence[str] = (), minmax: bool = False
) -> tuple[bytes, bytes]:
    """The INT8 OpenVINO IR (xml, bin) of ``model``, NNCF-quantized on ``calib`` with ``scheme`` activations
    (``u8``: MIXED preset, ``s8``: PERFORMANCE), ``kept`` nodes left in FP32; ``minmax``: each activation's range the
    minimum and maximum over ``calib`` (NNCF's default estimator clips rare values); cached."""
    if not calib:
        raise YoloEdgeError("INT8 needs calibration images; pass --calib DIR with at least one image")
    fix = overflow_fix()
    options = f"{NNCF_VERSION}/{scheme}/{fix}/{','.join(sorted(kept))}" + ("/minmax" if minmax else "")
    key = calib_key(model, calib, options, ("nncf", "openvino"))
    xml_path, bin_path = cache_dir() / f"{key}.xml", cache_dir() / f"{key}.bin"
    xml_cached, bin_cached = read_cached(xml_path), read_cached(bin_path)
    if xml_cached is not None and bin_cached is not None:
        return xml_cached, bin_cached
    import nncf
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, OverflowFix
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet
    from openvino._offline_transformations import apply_moc_transformations

    from yolo_edge.backends.openvino.model import ir_bytes, read_onnx

    nncf.set_log_level(logging.ERROR)
    ov_model = read_onnx(model)
    # OpenVINO's own front-end clean-up first (as its PyTorch import does): Sigmoid * x becomes Swish, so NNCF sees
    # Conv -> Swish as one pattern and quantizes its output, not the Sigmoid's: each SiLU fuses into its convolution
    apply_moc_transformations(ov_model, cf=False)
    inputs = [i.get_any_name() for i in ov_model.inputs]
    with contextlib.redirect_stdout(io.StringIO()):  # NNCF draws its progress bars on stdout (rich)
        quantized = nncf.quantize(
            ov_model,
            nncf.Dataset([{n: feeds[n] for n in inputs} for feeds in calib]),
            preset=nncf.QuantizationPreset.MIXED if scheme == "u8" else nncf.QuantizationPreset.PERFORMANCE,
            target_device=nncf.TargetDevice.CPU,
            subset_size=len(calib),
            fast_bias_correction=True,
            ignored_scope=nncf.IgnoredScope(names=_ignored_names(ov_model, kept)) if kept else None,
            advanced_parameters=AdvancedQuantizationParameters(
                overflow_fix=OverflowFix(fix),
                **({"activations_range_estimator_params": RangeEstimatorParametersSet.MINMAX} if minmax else {}),
            ),
        )
    xml, weights = ir_bytes(quantized)
    write_cached(bin_path, weights)
    write_cached(xml_path, xml)
    return xml, weights
