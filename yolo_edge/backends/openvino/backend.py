"""OpenVINO backend (CPU/GPU/NPU). Precision is OpenVINO's inference-precision hint (``f32``, ``bf16``,
``f16``). INT8 has three quantizers:

- ``nncf`` (the default): OpenVINO's own, ``nncf.quantize`` on the OpenVINO model (``backends.nncf_int8``), as
  ultralytics' OpenVINO INT8 export uses it; the unit is stored as OpenVINO IR (``.ov.xml``/``.ov.bin``);
- ``nncf-minmax``: the same with each activation's range its calibration minimum and maximum (NNCF's default
  estimator clips rare values, which class scores can be), stored the same way;
- ``qdq``: onnxruntime's ``quantize_static`` with the Q/DQ placed where NNCF places them
  (``backends.quantize``), stored as a QDQ ONNX (``.int8.onnx``).

Both run on the CPU's INT8 kernels (VNNI, AMX where present) with the SiLU and the requantization fused into
each convolution; ``u8`` is asymmetric uint8 activations, ``s8`` symmetric int8. Layers named in
``Variant.kept`` stay out of quantization (FP32), and :meth:`OpenVinoBackend.layer_errors` ranks the layers
by the error they add at INT8. OpenVINO is imported only when used."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from yolo_edge.backends.base import (
    FP32_SUFFIX,
    Artifact,
    Backend,
    CalibSet,
    Executable,
    LayerError,
    NpuCompileError,
    NpuError,
    NpuTimeout,
    OpQuery,
    cosine,
    io_infos,
    qdq_artifact,
)
from yolo_edge.backends.openvino.model import core, read_ir, read_onnx
from yolo_edge.backends.openvino.spec import OV_BIN_SUFFIX, OV_XML_SUFFIX, OpenVinoOptions
from yolo_edge.core.config import DeviceProfile, Quantizer, Scheme, Variant
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.host import capped_kernels, runtime_threads
from yolo_edge.core.pixels import IMAGE
from yolo_edge.core.registry import QDQ_SUFFIX
from yolo_edge.devices.limits import RuntimeMemory
from yolo_edge.model.decode import head_maps

_HINT = {"fp32": "f32", "bf16": "bf16", "fp16": "f16", "int8": "f32"}
_CAPABILITY = {"bf16": "BF16", "fp16": "FP16", "int8": "INT8", "fp32": "FP32"}
Graph = tuple[Any, dict[str, bytes]]  # the OpenVINO model to compile, and what a bundle stores of it


def _threads() -> dict[str, int]:
    """OpenVINO's thread count for a compiled model, where ``YOLO_EDGE_THREADS`` sets one (else its default)."""
    n = runtime_threads()
    return {"INFERENCE_NUM_THREADS": n} if n else {}


@dataclass(frozen=True)
class Compile:
    """What an executable was compiled from, to compile it again in another performance mode: the OpenVINO model,
    the plugin's device name and its configuration."""

    ov_model: Any
    device: str
    config: dict[str, Any]

    def compiled(self, hint: str) -> Any:
        return core().compile_model(self.ov_model, self.device, {**self.config, "PERFORMANCE_HINT": hint})


class OpenVinoExecutable(Executable):
    def __init__(
        self,
        compiled: Any,
        model: onnx.ModelProto,
        variant: Variant,
        artifact: dict[str, bytes],
        source: Compile,
        nhwc: frozenset[str] = frozenset(),
    ) -> None:
        inputs, outputs = io_infos(model)
        super().__init__(inputs, outputs, variant, source.device.lower(), model)
        self._source = source
        self._modes = {source.config["PERFORMANCE_HINT"]: compiled}  # each performance mode compiled, once
        self.compiled = compiled
        self._artifact = artifact
        self._tls = threading.local()
        self._ports = [compiled.output(t.name) for t in outputs]
        # each output's array as the graph writes it, from the unit's declared outputs ((1, H, W, C) for an nhwc
        # one): a call writes into fresh ones (a stored IR that writes other shapes fails the call, not the load)
        self._written = [
            (
                (t.shape[0], *t.shape[2:], t.shape[1]) if t.name in nhwc else t.shape,
                onnx.helper.tensor_dtype_to_np_dtype(t.elem_type),
            )
            for t in outputs
        ]
        self._nhwc = nhwc  # outputs the graph gives as (1, H, W, C): handed out as (1, C, H, W) views of them

    def _outputs(self, arrays: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        return {t.name: a.transpose(0, 3, 1, 2) if t.name in self._nhwc else a for t, a in zip(self.outputs, arrays)}

    @property
    def bounded(self) -> bool:
        return True

    def serve(self, streams: int) -> None:
        """OpenVINO's throughput mode for several streams: the model compiled with the THROUGHPUT hint (the plugin
        splits the cores into its own streams, each running a request), :attr:`concurrency` its optimal number of
        requests in flight, at most ``streams``; one stream: the LATENCY compile (all cores on one request). Each
        mode is compiled once; not while a stream runs."""
        hint = "THROUGHPUT" if streams > 1 else "LATENCY"
        if self.compiled is self._modes.get(hint) and hint == "LATENCY":
            return  # as compiled: nothing to change
        if hint not in self._modes:  # the graph compiled once already: only the plugin's streams differ
            self._modes[hint] = self._source.compiled(hint)
        self.compiled = self._modes[hint]
        self._ports = [self.compiled.output(t.name) for t in self.outputs]
        requests = int(self.compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        self.concurrency = max(1, min(streams, requests)) if streams > 1 else 1

    def _request(self) -> Any:
        request = getattr(self._tls, "request", None)
        if request is None or getattr(self._tls, "compiled", None) is not self.compiled:
            # one infer request per thread (requests are not thread-safe), of the mode compiled now
            request = self._tls.request = self.compiled.create_infer_request()
            self._tls.compiled = self.compiled
        return request

    def _into_fresh(self, request: Any) -> list[np.ndarray]:
        """New arrays, owned by the caller, that this call's outputs are written into: the request's own buffers
        are reused by its next call, and copying out of them is one more pass over every output."""
        from openvino import Tensor

        arrays = [np.empty(shape, dtype) for shape, dtype in self._written]
        for port, a in zip(self._ports, arrays):
            request.set_tensor(port, Tensor(a, shared_memory=True))
        return arrays

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        request = self._request()
        try:
            arrays = self._into_fresh(request)
            # the feeds are read in place (the call returns before the caller touches them again)
            request.infer(feeds, share_inputs=True, share_outputs=True)
        except RuntimeError as exc:  # the plugin's failure (a device lost, a kernel error): the frame goes to the CPU
            raise NpuError(f"OpenVINO {self.device}: {exc}") from exc
        return self._outputs(arrays)

    def _run_within(self, feeds: dict[str, np.ndarray], timeout_s: float) -> dict[str, np.ndarray]:
        """The call started asynchronously and waited for by OpenVINO itself up to ``timeout_s`` (no Python thread
        is handed the call and woken for its result); past it the request is cancelled and dropped (this thread's
        next call makes a new one)."""
        request = self._request()
        try:
            arrays = self._into_fresh(request)
            request.start_async(feeds, share_inputs=True)
            done = request.wait_for(max(int(timeout_s * 1e3), 0))
        except RuntimeError as exc:
            raise NpuError(f"OpenVINO {self.device}: {exc}") from exc
        if not done:  # the request may still write into its arrays: neither is used again
            self._tls.request = None
            request.cancel()
            raise NpuTimeout(f"OpenVINO {self.device}: no answer in {timeout_s:.3g} s; the request was cancelled")
        return self._outputs(arrays)

    def artifact_files(self) -> dict[str, bytes]:
        return dict(self._artifact)


class OpenVinoBackend(Backend):
    name = "openvino"
    kept_precision = "fp32"
    # one compiled model (session) serves every request in flight; its own memory and activations' multiple fitted on
    # the demo by benchmarks/memory_estimate.py (checked there on YOLOv8n at 640)
    memory = RuntimeMemory(shares_weights=True, own_mb=68.6, activation_factor=1.0)
    max_batch = None  # any static batch: OpenVINO reshapes the model for it
    recipe = "Ultralytics' OpenVINO INT8 export (NNCF's default preset over the network, the decode left out)"

    def __init__(
        self,
        device: str = "CPU",
        int8_schemes: tuple[Scheme, ...] = OpenVinoOptions.SCHEMES,
        quantizers: tuple[Quantizer, ...] = OpenVinoOptions.QUANTIZERS,
        frame_io: bool = False,
    ) -> None:
        if device != "CPU":  # listing the devices loads every plugin (GPU, NPU): the CPU's, always there, is not listed
            devices = core().available_devices
            if not any(d == device or d.startswith(f"{device}.") for d in devices):
                raise YoloEdgeError(
                    f"OpenVINO device {device} is not present (available: {', '.join(devices)}); pick another --device"
                )
        self.device = device
        self.frame_io = frame_io  # the image as the letterbox's pixels, the head's maps as written (_frame_io)
        self.int8_schemes = int8_schemes
        self.quantizers = quantizers
        self.fallback_quantizers = tuple(q for q in OpenVinoOptions.QUANTIZERS if q not in quantizers)
        caps = set(core().get_property(device, "OPTIMIZATION_CAPABILITIES"))
        if device == "CPU":
            caps -= capped_kernels()
        self.precisions = tuple(p for p in ("fp32", "bf16", "fp16", "int8") if _CAPABILITY[p] in caps)

    def describe(self) -> str:
        return self.device

    def query(self, model: onnx.ModelProto) -> OpQuery:
        """The ops OpenVINO ``query_model`` says the device does not support, by name."""
        ov_model = read_onnx(model)
        supported = set(core().query_model(ov_model, self.device))
        ops = [
            op.get_friendly_name()
            for op in ov_model.get_ops()
            if op.get_type_name() not in ("Parameter", "Result", "Constant")
        ]
        return OpQuery(len(ops), tuple(o for o in ops if o not in supported), "query_model")

    def _load(self, model: onnx.ModelProto, v: Variant, artifact: Artifact) -> Graph | None:
        quantized = (OV_XML_SUFFIX in artifact and OV_BIN_SUFFIX in artifact) or QDQ_SUFFIX in artifact
        if quantized and v.precision != "int8":  # only INT8 stores a graph of its own: the claim is not what runs
            raise YoloEdgeError(
                f"a stored unit is an INT8 graph but units.json says it runs at {v.label}; the bundle was altered"
            )
        if OV_XML_SUFFIX in artifact and OV_BIN_SUFFIX in artifact:
            xml, weights = artifact[OV_XML_SUFFIX], artifact[OV_BIN_SUFFIX]
            try:
                return read_ir(xml, weights), {OV_XML_SUFFIX: xml, OV_BIN_SUFFIX: weights}
            except (RuntimeError, UnicodeDecodeError) as exc:  # OpenVINO's parser on a damaged file
                why = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
                raise YoloEdgeError(f"a stored OpenVINO IR unit is not readable ({why[:160]})") from None
        qdq = qdq_artifact(artifact)
        if qdq is not None:
            return read_onnx(qdq), {QDQ_SUFFIX: qdq.SerializeToString()}
        data = artifact.get(FP32_SUFFIX)
        return (read_onnx(model, data), {}) if data and v.precision != "int8" else None

    def _lower(self, model: onnx.ModelProto, v: Variant, calib: CalibSet | None) -> Graph:
        """INT8 by onnxruntime's QDQ recipe or by NNCF, as ``v.quantizer`` says; else the FP32 graph, whose precision
        the plugin's hint sets."""
        if v.precision == "int8" and v.quantizer == "qdq":
            from yolo_edge.backends.quantize import quantize_int8  # onnxruntime.quantization: when quantizing

            qdq = quantize_int8(model, calib or [], recipe=f"openvino-{v.scheme}", exclude=v.kept)
            return read_onnx(qdq), {QDQ_SUFFIX: qdq.SerializeToString()}
        if v.precision == "int8":
            assert v.scheme is not None
            from yolo_edge.backends.openvino.nncf_int8 import quantize_nncf  # NNCF and its cache: when quantizing

            xml, weights = quantize_nncf(model, calib or [], v.scheme, v.kept, minmax=v.quantizer == "nncf-minmax")
            return read_ir(xml, weights), {OV_XML_SUFFIX: xml, OV_BIN_SUFFIX: weights}
        return read_onnx(model), {}

    def _rebatch(self, program: Graph, batch: int) -> Graph:
        """The OpenVINO model (FP32, or INT8 as NNCF quantized it at batch 1) reshaped to ``batch`` frames by
        OpenVINO itself; what a bundle stores stays the batch-1 model (a batch is given it again on load)."""
        ov_model, stored = program
        batched = ov_model.clone()
        shapes = {p.get_any_name(): [batch, *p.get_partial_shape().to_shape()[1:]] for p in batched.inputs}
        try:
            batched.reshape(shapes)
        except RuntimeError as exc:
            why = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
            raise NpuCompileError(f"OpenVINO cannot give it batch {batch}: {why[-1] if why else exc}") from None
        return batched, stored

    def _build(self, model: onnx.ModelProto, v: Variant, program: Graph) -> Executable:
        ov_model, stored = program
        inputs, outputs = io_infos(model)
        pixels = self.frame_io and any(t.name == IMAGE and t.shape[1:2] == (3,) for t in inputs)
        nhwc = frozenset(head_maps({t.name: t.shape for t in outputs}) if self.frame_io else ())
        if pixels or nhwc:
            ov_model = _frame_io(ov_model, pixels, sorted(nhwc))
        config = {"INFERENCE_PRECISION_HINT": _HINT[v.precision], "PERFORMANCE_HINT": "LATENCY", **_threads()}
        source = Compile(ov_model, self.device, config)
        try:
            compiled = source.compiled("LATENCY")
        except RuntimeError as exc:  # the plugin has no kernel for a node at this precision on this CPU
            lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
            why = next((ln for ln in lines if "node" in ln.lower()), lines[-1] if lines else type(exc).__name__)
            raise NpuCompileError(f"OpenVINO {self.device} cannot compile it at {v.label}: {why}") from None
        exe = OpenVinoExecutable(compiled, model, v, stored, source, nhwc)
        if pixels:
            exe.pixel_inputs = frozenset({IMAGE})
        return exe

    def layer_errors(
        self, model: onnx.ModelProto, variant: Variant, calib: CalibSet, feeds: CalibSet
    ) -> list[LayerError]:
        """Every convolution's output at ``variant`` against FP32 on ``feeds`` (those OpenVINO keeps by name: a
        convolution folded into another op is not measured); a layer's added error is its own (1 - cosine) less
        the largest of the convolutions feeding it (the error it inherits)."""
        low_model = self._lower(model, self.resolve(variant), calib)[0]
        fp32_model = read_onnx(model)
        ops = [{op.get_friendly_name() for op in m.get_ops()} for m in (low_model, fp32_model)]
        convs = [n for n in model.graph.node if n.op_type == "Conv" and all(n.name in names for names in ops)]
        fp32 = self._tapped(fp32_model, [n.name for n in convs], "f32")
        low = self._tapped(low_model, [n.name for n in convs], "f32")
        worst = dict.fromkeys((n.name for n in convs), 1.0)
        for f in feeds:
            a, b = fp32(f), low(f)
            for name in worst:
                worst[name] = min(worst[name], cosine(a[name], b[name]))
        upstream = _upstream_convs(model)
        rows = []
        for n in convs:
            inherited = max((1.0 - worst[u] for u in upstream[n.name] if u in worst), default=0.0)
            rows.append(LayerError(n.name, n.op_type, worst[n.name], max(0.0, 1.0 - worst[n.name] - inherited)))
        return sorted(rows, key=lambda r: -r.added)

    def _tapped(self, ov_model: Any, names: Sequence[str], hint: str) -> Any:
        """A function running ``ov_model`` that returns the outputs of the ops named ``names`` (by name)."""
        by_name = {op.get_friendly_name(): op for op in ov_model.get_ops()}
        ports = ov_model.add_outputs([by_name[n].output(0) for n in names])  # each Conv's (bias Add's) output
        compiled = core().compile_model(ov_model, self.device, {"INFERENCE_PRECISION_HINT": hint, **_threads()})
        request = compiled.create_infer_request()

        def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            request.infer({k: v for k, v in feeds.items() if k in {i.get_any_name() for i in compiled.inputs}})
            return {
                n: np.array(request.get_tensor(compiled.output(p.get_any_name())).data) for n, p in zip(names, ports)
            }

        return run


def _frame_io(ov_model: Any, pixels: bool, nhwc: Sequence[str]) -> Any:
    """``ov_model`` with the frame's input and outputs in the forms that cost least (OpenVINO's
    ``PrePostProcessor``; the values are bit-identical, ``tests/test_backends.py``). ``pixels``: the image taken as
    the letterbox's (1, H, W, 3) uint8 BGR, converted to the (1, 3, H, W) float32 RGB / 255 in the graph, where the
    CPU plugin does it with the first convolution's input reorder instead of the letterbox in numpy. ``nhwc``: these
    outputs (the head's box and class maps) given as the convolutions write them, (1, H, W, C), without the plugin's
    reorder to (1, C, H, W) (``Reorder`` in ``benchmarks/int8_layers.py``'s per-layer profile: a reference float32
    kernel on the 64-channel box maps); the decode reads either layout (``decode.head_maps``).
    ``benchmarks/vs_ultralytics_int8.py`` prints the letterbox and the call per frame."""
    from openvino import Layout, Type
    from openvino.preprocess import ColorFormat, PrePostProcessor

    ppp = PrePostProcessor(ov_model)
    if pixels:
        image = ppp.input(IMAGE)
        image.tensor().set_element_type(Type.u8).set_layout(Layout("NHWC")).set_color_format(ColorFormat.BGR)
        image.model().set_layout(Layout("NCHW"))
        image.preprocess().convert_element_type(Type.f32).convert_color(ColorFormat.RGB).scale(255.0)
    for name in nhwc:
        ppp.output(name).model().set_layout(Layout("NCHW"))
        ppp.output(name).tensor().set_layout(Layout("NHWC"))
    return ppp.build()


def _upstream_convs(model: onnx.ModelProto) -> dict[str, set[str]]:
    """For each Conv node, the Conv nodes whose outputs reach its input through no other Conv."""
    producer = {o: n for n in model.graph.node for o in n.output}
    found: dict[str, set[str]] = {}
    for node in model.graph.node:
        if node.op_type != "Conv":
            continue
        seen: set[str] = set()
        stack = [node.input[0]]
        ups: set[str] = set()
        while stack:
            tensor = stack.pop()
            src = producer.get(tensor)
            if src is None or src.name in seen:
                continue
            seen.add(src.name)
            if src.op_type == "Conv":
                ups.add(src.name)
            else:
                stack.extend(src.input)
        found[node.name] = ups
    return found


def backend_for(profile: DeviceProfile) -> Backend:
    """The OpenVINO backend of ``profile``: its device, INT8 activation schemes and quantizers."""
    options = profile.runtime_options
    assert isinstance(options, OpenVinoOptions)  # config builds a profile's options as its runtime's
    # the frame's cheapest forms where latency is measured on the CPU plugin; a simulated board's numerics keep the
    # graph's own (its letterbox is modelled), as do the other plugins (their handling of the conversions is untested)
    frame_io = profile.kind != "simulated" and options.device == "CPU"
    return OpenVinoBackend(options.device, options.int8_schemes, options.int8_quantizers, frame_io)
