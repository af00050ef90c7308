"""OpenVINO models in memory: the one ``ov.Core``, an OpenVINO model read from an ONNX graph or from IR bytes, and
an OpenVINO model's IR bytes. What the OpenVINO backend (``backends.openvino``) and NNCF's quantizer
(``backends.nncf_int8``) share, so that neither imports the other for it. OpenVINO is imported only when used."""

from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.privacy import no_telemetry

no_telemetry()  # before openvino is imported: nothing leaves the machine (yolo_edge/core/privacy.py)


@cache
def core() -> Any:
    try:
        import openvino as ov
    except ImportError:
        raise YoloEdgeError(
            "this runs on OpenVINO, which this install leaves out: pip install openvino (or 'yolo-edge[deploy]')"
        ) from None
    return ov.Core()


def read_onnx(model: onnx.ModelProto, data: bytes | None = None) -> Any:
    """An OpenVINO model from an ONNX graph held in memory (no temporary file: nothing to fill a disk with);
    ``data``: the graph already serialized (as a bundle stores it)."""
    return core().read_model(data or model.SerializeToString())


def read_ir(xml: bytes, weights: bytes) -> Any:
    """An OpenVINO model from IR bytes held in memory (nothing is read from disk: a bundle's IR cannot name a file)."""
    import openvino as ov

    return core().read_model(xml.decode(), ov.Tensor(np.frombuffer(weights, np.uint8).copy()))


def ir_bytes(ov_model: Any) -> tuple[bytes, bytes]:
    """(xml, bin) of an OpenVINO model."""
    import openvino as ov

    with tempfile.TemporaryDirectory(prefix="yolo-edge-ov-") as tmp:
        xml = Path(tmp, "model.xml")
        ov.save_model(ov_model, str(xml), compress_to_fp16=False)
        return xml.read_bytes(), xml.with_suffix(".bin").read_bytes()
