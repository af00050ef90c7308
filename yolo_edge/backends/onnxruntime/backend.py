"""onnxruntime backend, any execution-provider list. After creating a session it checks that the
requested accelerator EP is really in ``get_providers()``: onnxruntime otherwise falls back to the
CPU silently, the complaint its users file most."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

from yolo_edge.backends.base import (
    FP32_SUFFIX,
    Artifact,
    Backend,
    CalibSet,
    Executable,
    NpuError,
    io_infos,
    qdq_artifact,
)
from yolo_edge.backends.onnxruntime.spec import OnnxRuntimeOptions
from yolo_edge.core.config import DeviceProfile, Variant
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.host import runtime_threads
from yolo_edge.devices.limits import RuntimeMemory
from yolo_edge.model.batch import at_batch

CPU_EP = "CPUExecutionProvider"
Graph = tuple[onnx.ModelProto, bytes | None]  # the graph a session is created from, and its bytes where stored
# what a session's run raises when the runtime or its execution provider fails (bad feeds are caught before)
RUN_FAILURES = (
    ort_state.Fail,
    ort_state.RuntimeException,
    ort_state.EPFail,
    ort_state.EngineError,
    ort_state.DeviceReset,
)


class OrtExecutable(Executable):
    def __init__(self, session: ort.InferenceSession, model: onnx.ModelProto, variant: Variant, device: str) -> None:
        inputs, outputs = io_infos(model)
        super().__init__(inputs, outputs, variant, device, model)
        self.session = session
        self._names = [t.name for t in outputs]

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            return dict(zip(self._names, self.session.run(self._names, feeds)))
        except RUN_FAILURES as exc:
            raise NpuError(f"onnxruntime {self.device}: {exc}") from exc


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    kept_precision = "fp32"
    # one compiled model (session) serves every request in flight; its own memory and activations' multiple fitted on
    # the demo by benchmarks/memory_estimate.py (checked there on YOLOv8n at 640)
    memory = RuntimeMemory(shares_weights=True, own_mb=26.7, activation_factor=1.31)
    max_batch = None  # a static batch of any size: the graph rewritten for it (model.batch.at_batch)

    def __init__(self, providers: Sequence[str] = (CPU_EP,), threads: int | None = None) -> None:
        available = ort.get_available_providers()
        missing = [p for p in providers if p not in available]
        if missing:
            raise YoloEdgeError(
                f"onnxruntime execution provider {missing[0]} is not available in this build "
                f"(available: {', '.join(available)}); install the matching onnxruntime package (e.g. "
                "onnxruntime-gpu) or pick another --device"
            )
        self.providers = tuple(providers) or (CPU_EP,)
        self.threads = threads  # intra-op threads (None: runtime_threads()); 1 runs on the caller's thread alone
        accel = self.providers[0]
        self.precisions = (
            ("fp16",) if accel == "TensorrtExecutionProvider" else ("fp32", "int8") if accel == CPU_EP else ("fp32",)
        )

    def describe(self) -> str:
        return "CPU" if self.providers == (CPU_EP,) else "/".join(self.providers)

    def is_reference(self, variant: Variant) -> bool:
        return self.providers == (CPU_EP,) and variant.precision == "fp32"

    def _load(self, model: onnx.ModelProto, v: Variant, artifact: Artifact) -> Graph | None:
        qdq = qdq_artifact(artifact)
        if qdq is not None:
            return qdq, None
        data = artifact.get(FP32_SUFFIX)
        return (model, data) if data and v.precision != "int8" else None

    def _lower(self, model: onnx.ModelProto, v: Variant, calib: CalibSet | None) -> Graph:
        if v.precision != "int8":
            return model, None
        from yolo_edge.backends.quantize import quantize_int8  # onnxruntime.quantization: when quantizing

        return quantize_int8(model, calib or [], exclude=v.kept), None  # INT8: u8 only, onnxruntime's fast x86 path

    def _rebatch(self, program: Graph, batch: int) -> Graph:
        """The graph (FP32, or INT8 as quantized at batch 1: its QDQ nodes act on each frame alone) at ``batch``."""
        return at_batch(program[0], batch), None  # program[1], where given, is program[0]'s bytes

    def _build(self, model: onnx.ModelProto, v: Variant, program: Graph) -> Executable:
        graph, data = program
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        # Intra-op threads spin between ops (onnxruntime's default) and stop when the Run returns: the next unit
        # may be another session or runtime, whose turn they would otherwise spin through (four sessions in
        # turn: benchmarks/run_all.py, table 2)
        opts.add_session_config_entry("session.force_spinning_stop", "1")
        opts.intra_op_num_threads = runtime_threads() if self.threads is None else self.threads  # 0: one per core
        providers: list[str | tuple[str, dict[str, object]]] = list(self.providers)
        if self.providers[0] == "TensorrtExecutionProvider":
            providers[0] = ("TensorrtExecutionProvider", {"trt_fp16_enable": v.precision == "fp16"})
        session = ort.InferenceSession(data or graph.SerializeToString(), sess_options=opts, providers=providers)
        got = session.get_providers()
        if self.providers[0] not in got:
            raise YoloEdgeError(
                f"onnxruntime created the session on {got} although {self.providers[0]} was requested: "
                "the provider failed to load (check its CUDA/TensorRT libraries); refusing to run silently on the CPU"
            )
        device = "cpu" if self.providers[0] == CPU_EP else self.providers[0].removesuffix("ExecutionProvider").lower()
        return OrtExecutable(session, graph, v, device)


def backend_for(profile: DeviceProfile) -> Backend:
    """The onnxruntime backend of ``profile``: its execution providers, in priority order (default: the CPU)."""
    options = profile.runtime_options
    assert isinstance(options, OnnxRuntimeOptions)  # config builds a profile's options as its runtime's
    return OnnxRuntimeBackend(options.providers or (CPU_EP,))
