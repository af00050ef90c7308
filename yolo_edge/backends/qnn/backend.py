"""Qualcomm Hexagon NPU (HTP) through ONNX Runtime's QNN execution provider (``onnxruntime-qnn``, a plugin EP).

On an x86-64 host, QNN's HTP backend (``libQnnHtp.so``) is Qualcomm's simulator and ``libHtpPrepare.so`` its graph
compiler: numerics are the chip's, latency is modelled (the profile). On a Snapdragon Linux board (aarch64 with
``onnxruntime-qnn``) the same backend runs on the NPU itself.

- INT8 is QDQ by ONNX Runtime's QNN recipe (``quantize_qnn``: uint8 weights, uint8 activations
  for ``w8a8``, uint16 for ``w8a16``), compiled for the profile's HTP architecture and VTCM size.
- Op support is ONNX Runtime's own partition, decided by Qualcomm's validation: the nodes the EP logs as
  ``Validation FAILED`` (:meth:`QnnBackend.query`). With CPU fallback disabled, a graph with such nodes is refused
  (:class:`UnsupportedOperator` naming them), and one the compiler cannot finalize (``QNN_COMMON_ERROR_MEM_ALLOC``)
  is a refusal with Qualcomm's message.
- A compiled unit is stored as an EPContext model with the context binary embedded (``<unit>.qnn.onnx``): what a
  board loads without recompiling, in tens of milliseconds.
"""

from __future__ import annotations

import platform
import re
import tempfile
import threading
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from yolo_edge.backends.base import (
    Artifact,
    Backend,
    CalibSet,
    Executable,
    NpuCompileError,
    NpuOutOfMemory,
    OpQuery,
    UnsupportedOperator,
    io_infos,
    qdq_artifact,
    self_contained,
)
from yolo_edge.backends.onnxruntime.backend import RUN_FAILURES, OrtExecutable
from yolo_edge.backends.qnn.spec import QNN_SUFFIX, QnnOptions
from yolo_edge.backends.quantize import CalibReader, quantized
from yolo_edge.core.config import DeviceProfile, Scheme, Variant
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.host import runtime_threads
from yolo_edge.core.native import native_output

EP = "QNNExecutionProvider"
CONTEXT_SUFFIX = QNN_SUFFIX  # an EPContext model, its context binary embedded
INSTALL = "pip install 'yolo-edge[qnn]' (onnxruntime-qnn: Qualcomm's QNN libraries, the HTP simulator on x86-64)"
_REFUSED = re.compile(r"Operator type: (\S+) Node name: (.*?) Node index")
_QNN_ERROR = re.compile(r"(QNN_[A-Z_]+[^.,]*)")


@cache
def _library() -> tuple[str, str]:
    """The QNN EP registered with ONNX Runtime (once per process), and the HTP backend library's path."""
    try:
        import onnxruntime_qnn
    except ImportError:
        raise YoloEdgeError(f"the qnn runtime needs onnxruntime-qnn: {INSTALL}") from None
    ort.register_execution_provider_library(EP, onnxruntime_qnn.get_library_path())
    return EP, onnxruntime_qnn.get_qnn_htp_path()


def htp_session(
    graph: bytes, options: dict[str, str], fallback: bool, context: Path | None = None, verbose: bool = False
) -> tuple[ort.InferenceSession, str]:
    """A session on the QNN EP and what the EP logged creating it: ``verbose``, every node Qualcomm's validation
    refused and why (the session then logs each run too: for queries). ``fallback``: refused nodes run on the CPU,
    else the session is refused (:func:`_refusal`, naming them: asked again verbosely); ``context``: write the
    compiled graph there as an EPContext model, its binary embedded."""
    name, htp = _library()
    so = ort.SessionOptions()
    so.log_severity_level = 0 if verbose else 3  # captured, never shown
    so.intra_op_num_threads = runtime_threads()  # the CPU's share: nodes the HTP refused, where they may fall back
    entries = {"session.force_spinning_stop": "1"}
    if not fallback:
        entries["session.disable_cpu_ep_fallback"] = "1"
    if context is not None:
        entries.update({"ep.context_enable": "1", "ep.context_file_path": str(context), "ep.context_embed_mode": "1"})
    for key, value in entries.items():
        so.add_session_config_entry(key, value)
    so.add_provider_for_devices(
        [d for d in ort.get_ep_devices() if d.ep_name == name], {"backend_path": htp, **options}
    )
    failure = ""
    with native_output() as log:
        try:
            session: Any = ort.InferenceSession(graph, sess_options=so)
        except RUN_FAILURES as exc:
            session, failure = None, str(exc)
    text = log.getvalue().decode(errors="replace")
    if session is None and not verbose:
        htp_session(graph, options, fallback, verbose=True)  # raises, naming what Qualcomm refused
    if session is None:
        raise _refusal(text, failure)
    return session, text


def _refused(log: str) -> tuple[tuple[str, str], ...]:
    """(op type, node) of every node the EP's validation refused, in order, once each: the indented lines under
    each ``Validation FAILED`` entry (the EP lists the nodes it passes the same way)."""
    found: list[tuple[str, str]] = []
    failing = False
    for line in log.splitlines():
        if not line.startswith("\t"):
            failing = "Validation FAILED" in line
        elif failing:
            found += _REFUSED.findall(line)
    return tuple(dict.fromkeys(found))


def _refusal(log: str, failure: str) -> NpuCompileError:
    """Qualcomm's words for a graph it would not compile: out of memory when finalizing (whatever ran elsewhere), the
    nodes its validation refused, else its error code."""
    if "MEM_ALLOC" in failure:
        code = _QNN_ERROR.search(failure)
        return NpuOutOfMemory(f"QNN HTP compiler: {code.group(1).strip() if code else 'out of memory'}")
    refused = _refused(log)
    if refused:
        shown = ", ".join(f"{node} ({op})" for op, node in refused[:3]) + (" ..." if len(refused) > 3 else "")
        return UnsupportedOperator(f"QNN HTP refuses {shown}", tuple(node for _, node in refused))
    code = _QNN_ERROR.search(failure)
    lines = failure.strip().splitlines()
    why = code.group(1).strip() if code else (lines[-1][:300] if lines else "the session failed")
    return NpuCompileError(f"QNN HTP compiler: {why}")


def quantize_qnn(model: onnx.ModelProto, calib: CalibSet, activations: str) -> onnx.ModelProto:
    """The QDQ graph of ``model`` as Qualcomm's HTP takes it: ONNX Runtime's QNN recipe (``get_qnn_qdq_config``:
    uint8 weights, ``activations`` uint8 = w8a8 or uint16 = w8a16, the Q/DQ where QNN fuses them), calibrated
    on ``calib`` (cached)."""
    from onnxruntime.quantization import QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    act = QuantType.QUInt16 if activations == "w8a16" else QuantType.QUInt8

    def run(src: str, dst: str) -> None:
        quantize(
            src, dst, get_qnn_qdq_config(src, CalibReader(calib), activation_type=act, weight_type=QuantType.QUInt8)
        )

    return quantized(model, calib, f"qnn-{activations}", run, ("onnxruntime", "onnxruntime-qnn"))


class QnnExecutable(OrtExecutable):
    """A session on the QNN EP; what a bundle stores of it is its EPContext model (``context``)."""

    def __init__(self, session: ort.InferenceSession, model: onnx.ModelProto, variant: Variant, context: bytes) -> None:
        super().__init__(session, model, variant, "qnn-htp")
        self._context = context

    def artifact_files(self) -> dict[str, bytes]:
        return {CONTEXT_SUFFIX: self._context}


def stored_context(artifact: Artifact | None) -> bytes | None:
    """A bundle's EPContext model, if it has one: every EPContext node must embed its binary (a file name there
    would have the EP open a path the bundle chose)."""
    data = (artifact or {}).get(CONTEXT_SUFFIX)
    if not data:
        return None
    try:
        model = onnx.load_from_string(data)
    except Exception as exc:  # protobuf's DecodeError and its other errors
        raise YoloEdgeError(f"a stored QNN context is not a readable ONNX graph ({type(exc).__name__})") from None
    self_contained(model, "a stored QNN context")
    for node in model.graph.node:
        embed = next((a.i for a in node.attribute if a.name == "embed_mode"), 1)
        if node.op_type == "EPContext" and embed != 1:
            raise YoloEdgeError("a stored QNN context names an external binary; yolo-edge embeds it")
    return data


class QnnBackend(Backend):
    """Qualcomm's HTP: its QDQ recipe, its compiler, its simulator (or the NPU on a Snapdragon board)."""

    name = "qnn"
    batch_refusal = "yolo-edge compiles QNN context binaries at batch 1: a batch runs as that many calls"
    precisions = ("int8",)
    int8_schemes: tuple[Scheme, ...] = ("w8a8", "w8a16")  # uint8 weights; uint8 or uint16 activations
    quantizers = ("qnn",)
    recipe = "Qualcomm AI Hub's YOLOv8 detection (w8a8 on the HTP, the decode after it on the CPU)"
    on_accelerator = platform.machine().lower() in ("aarch64", "arm64")  # a Snapdragon board: the HTP itself

    def __init__(self, htp_arch: str, vtcm_mb: int, schemes: tuple[Scheme, ...] = ("w8a8", "w8a16")) -> None:
        _library()
        self.options = {"htp_arch": htp_arch, "vtcm_mb": str(vtcm_mb)}
        self.int8_schemes = schemes
        self._dir = tempfile.TemporaryDirectory(prefix="yolo-edge-qnn-")
        self._count = 0
        self._lock = threading.Lock()

    def describe(self) -> str:
        where = "the NPU" if self.on_accelerator else "Qualcomm's HTP simulator"
        return f"HTP v{self.options['htp_arch']} ({where}, onnxruntime-qnn)"

    def close(self) -> None:
        self._dir.cleanup()

    def query(self, model: onnx.ModelProto) -> OpQuery:
        """The nodes Qualcomm's validation refuses: ONNX Runtime's own partition (they would run on the CPU). Asked of
        the graph in QNN's QDQ form (an HTP such as v68 computes no float at all), quantized on seeded noise: which
        ops the EP takes does not depend on the ranges."""
        n_ops = sum(1 for n in model.graph.node if n.op_type != "Constant")
        rng = np.random.default_rng(0)
        noise = [{t.name: rng.random(t.shape, dtype=np.float32) for t in io_infos(model)[0]} for _ in range(2)]
        graph = quantize_qnn(model, noise, "w8a8")
        own = {n.name for n in model.graph.node}
        try:
            _, log = htp_session(graph.SerializeToString(), self.options, fallback=True, verbose=True)
        except UnsupportedOperator as exc:
            return OpQuery(n_ops, tuple(n for n in exc.nodes if n in own), "validation")
        except NpuCompileError:  # the graph did not finalize: the compile of the calibrated unit says why
            return OpQuery(n_ops, (), "validation")
        return OpQuery(n_ops, tuple(node for _, node in _refused(log) if node in own), "validation")

    def _load(self, model: onnx.ModelProto, v: Variant, artifact: Artifact) -> bytes | onnx.ModelProto | None:
        """A stored EPContext (bytes: loaded as it is), else a stored QDQ graph (compiled again)."""
        return stored_context(artifact) or qdq_artifact(artifact)

    def _lower(self, model: onnx.ModelProto, v: Variant, calib: CalibSet | None) -> onnx.ModelProto:
        """The unit quantized by QNN's recipe (a QDQ graph)."""
        assert v.scheme is not None
        return quantize_qnn(model, calib or [], v.scheme)

    def _build(self, model: onnx.ModelProto, v: Variant, program: bytes | onnx.ModelProto) -> Executable:
        """A context loads as it is; a QDQ graph is compiled with CPU fallback disabled, its context kept for the
        bundle."""
        if isinstance(program, bytes):
            session, _ = htp_session(program, self.options, fallback=False)
            return QnnExecutable(session, model, v, program)
        with self._lock:
            self._count += 1
            path = Path(self._dir.name, f"unit{self._count}{CONTEXT_SUFFIX}")
        session, _ = htp_session(program.SerializeToString(), self.options, fallback=False, context=path)
        return QnnExecutable(session, model, v, path.read_bytes())


def present(profile: DeviceProfile) -> bool:
    """Whether this is a Snapdragon board (the HTP itself, not its simulator)."""
    return QnnBackend.on_accelerator


def backend_for(profile: DeviceProfile) -> Backend:
    """The QNN backend of ``profile``: its HTP architecture and VTCM size; w8a8 and w8a16 unless one is chosen."""
    options = profile.runtime_options
    assert isinstance(options, QnnOptions)  # config builds a profile's options as its runtime's
    if not options.htp_arch or not options.vtcm_mb:
        raise YoloEdgeError(
            f"device profile '{profile.name}': the qnn runtime needs runtime_options htp_arch and vtcm_mb"
        )
    return QnnBackend(options.htp_arch, options.vtcm_mb, options.int8_schemes)
