"""The toy backend: onnxruntime on the CPU under a name of its own."""

from __future__ import annotations

from toy_npu.spec import ToyOptions
from yolo_edge.backends.base import Backend
from yolo_edge.backends.onnxruntime.backend import CPU_EP, OnnxRuntimeBackend
from yolo_edge.core.config import DeviceProfile


class ToyBackend(OnnxRuntimeBackend):
    name = "toy-npu"


def backend_for(profile: DeviceProfile) -> Backend:
    options = profile.runtime_options
    assert isinstance(options, ToyOptions)
    return ToyBackend((CPU_EP,), options.threads or None)
