"""OpenVINO backend (CPU/GPU/NPU). Precision is OpenVINO's inference-precision hint (``f32``, ``bf16``,
``f16``); INT8 compiles the QDQ model from onnxruntime's quantizer (the ``openvino`` recipes: Q/DQ where
NNCF would put them, uint8 or int8 activations), which OpenVINO's low-precision transformations run with
the CPU's INT8 kernels (VNNI, AMX where present), the SiLU and the requantization fused into each
convolution. OpenVINO is imported only when used."""

from __future__ import annotations

import tempfile
import threading
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from yolo_edge.backends.base import Artifact, Backend, CalibSet, Executable, io_infos, qdq_artifact
from yolo_edge.backends.quantize import quantize_int8
from yolo_edge.config import INT8_SCHEMES
from yolo_edge.errors import YoloEdgeError

_HINT = {"fp32": "f32", "bf16": "bf16", "fp16": "f16", "int8": "f32"}
_CAPABILITY = {"bf16": "BF16", "fp16": "FP16", "int8": "INT8", "fp32": "FP32"}


@cache
def core() -> Any:
    import openvino as ov

    return ov.Core()


def read_onnx(model: onnx.ModelProto) -> Any:
    with tempfile.TemporaryDirectory(prefix="yolo-edge-ov-") as tmp:
        path = Path(tmp, "model.onnx")
        onnx.save(model, str(path))
        return core().read_model(str(path))


class OpenVinoExecutable(Executable):
    def __init__(self, compiled: Any, model: onnx.ModelProto, precision: str, device: str) -> None:
        inputs, outputs = io_infos(model)
        super().__init__(inputs, outputs, precision, device, model)
        self.compiled = compiled
        self._tls = threading.local()
        self._ports = [compiled.output(t.name) for t in outputs]

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        request = getattr(self._tls, "request", None)
        if request is None:  # one infer request per thread: requests are not thread-safe
            request = self._tls.request = self.compiled.create_infer_request()
        request.infer(feeds)
        return {
            t.name: np.array(request.get_tensor(port).data, copy=True) for t, port in zip(self.outputs, self._ports)
        }


class OpenVinoBackend(Backend):
    name = "openvino"

    def __init__(self, device: str = "CPU", int8_schemes: tuple[str, ...] = INT8_SCHEMES) -> None:
        devices = core().available_devices
        if not any(d == device or d.startswith(f"{device}.") for d in devices):
            raise YoloEdgeError(
                f"OpenVINO device {device} is not present (available: {', '.join(devices)}); pick another --device"
            )
        self.device = device
        self.int8_schemes = int8_schemes
        caps = set(core().get_property(device, "OPTIMIZATION_CAPABILITIES"))
        self.precisions = tuple(p for p in ("fp32", "bf16", "fp16", "int8") if _CAPABILITY[p] in caps)

    def query(self, model: onnx.ModelProto) -> tuple[int, list[str]]:
        """(number of ops, names of the ops the device does not support), from OpenVINO ``query_model``."""
        ov_model = read_onnx(model)
        supported = set(core().query_model(ov_model, self.device))
        ops = [
            op.get_friendly_name()
            for op in ov_model.get_ops()
            if op.get_type_name() not in ("Parameter", "Result", "Constant")
        ]
        return len(ops), [o for o in ops if o not in supported]

    def compile(
        self,
        model: onnx.ModelProto,
        precision: str,
        calib: CalibSet | None = None,
        scheme: str | None = None,
        artifact: Artifact | None = None,
    ) -> Executable:
        scheme = self._check_precision(precision, scheme)
        recipe = "openvino-s8" if scheme == "s8" else "openvino"
        graph = qdq_artifact(artifact) or (
            quantize_int8(model, calib or [], recipe=recipe) if precision == "int8" else model
        )
        config = {"INFERENCE_PRECISION_HINT": _HINT[precision], "PERFORMANCE_HINT": "LATENCY"}
        compiled = core().compile_model(read_onnx(graph), self.device, config)
        return OpenVinoExecutable(compiled, graph, precision, self.device.lower())
