"""Rockchip RKNN: the vendor's own compiler, quantizer and simulator on the host; its lite runtime on the board.

On the host, :class:`RknnBackend` drives rknn-toolkit2 through its toolchain worker (``yolo_edge.toolchains``):
a subgraph is compiled for the profile's chip (INT8 by Rockchip's quantizer, calibrated on the subgraph's
own FP32 inputs; FP16 without quantization), exported as ``.rknn`` for the bundle, and run on Rockchip's
simulator for numerics. Op support comes from the compiler: a build that fails, or an op it has no NPU
lowering for (the board's runtime would run it on its CPU), is a refusal naming the nodes. Rockchip's
per-layer ``accuracy_analysis`` ranks the layers by the error each adds
(:meth:`RknnBackend.layer_errors`), and the convolutions named in ``Variant.kept`` stay in float16 through
Rockchip's hybrid quantization (layer-level mixed precision).
The simulator cannot load a ``.rknn`` file, so a bundle's unit is rebuilt from its ONNX and calibration
sample on the host; the ``.rknn`` files are for the board.

On the board (aarch64 with ``rknn-toolkit-lite2``, no toolchain, no torch), :class:`RknnLiteBackend` loads a
bundle's ``.rknn`` files with ``RKNNLite`` on the profile's NPU cores.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import tempfile
import threading
import uuid
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from yolo_edge.backends.base import (
    Artifact,
    Backend,
    CalibSet,
    Executable,
    LayerError,
    NpuCompileError,
    NpuError,
    NpuOutOfMemory,
    OpQuery,
    UnsupportedOperator,
    context,
    io_infos,
    save_for_worker,
)
from yolo_edge.backends.rknn.spec import ALGORITHMS, RKNN_SUFFIX, TOOLCHAIN, RknnOptions
from yolo_edge.core.config import DeviceProfile, Multicore, Variant
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.toolchains import Worker, WorkerCrashed, WorkerError, toolchain_status

_NO_LOWERING = re.compile(r"No lowering found for: (?P<node>.+?), node type = (?P<op>\w+)")
_NAMED_NODE = re.compile(r"\b(?P<op>[A-Z]\w*)\('(?P<node>[^']+)'\)")
_ERROR_LINE = re.compile(r"^(?:\w+Error|E \w+): (?!Traceback)(.+)$", re.M)


@dataclass(frozen=True)
class AnalysisRow:
    """One layer of Rockchip's accuracy analysis: its output tensor, cosine to FP32 accumulated and of the layer
    alone (fed FP32 inputs)."""

    op: str
    tensor: str  # the layer's output: what hybrid quantization's custom_quantize_layers names
    entire_cos: float
    single_cos: float


def parse_error_analysis(text: str) -> list[AnalysisRow]:
    """The rows of rknn-toolkit2's ``error_analysis.txt`` (``[Type] name  cos | euc  cos | euc``)."""
    row = re.compile(r"^\[(\w+)\]\s+(\S+)\s+([\d.]+)\s*\|\s*[\d.]+\s+([\d.]+)\s*\|", re.M)
    return [AnalysisRow(m[1], m[2], float(m[3]), float(m[4])) for m in row.finditer(text)]


def refused_nodes(log: str, error: str = "") -> list[tuple[str, str]]:
    """(node, op type) the compiler refused, from its log and error: no NPU lowering, or named in the error."""
    found = [(m["node"], m["op"]) for m in _NO_LOWERING.finditer(log)]
    found += [(m["node"], m["op"]) for m in _NAMED_NODE.finditer(error)]
    return list(dict.fromkeys(found))


def compiler_message(error: str, log: str) -> str:
    """The compiler's own words for a failure: its error line, else its last ``E`` log line."""
    lines = [m.group(1).strip() for m in _ERROR_LINE.finditer(error + "\n" + log)]
    lines = [ln for ln in lines if ln and not ln.startswith("rknn-toolkit2 version")]
    return lines[-1] if lines else error.strip().splitlines()[-1] if error.strip() else "build failed"


def _shown(nodes: list[tuple[str, str]]) -> str:
    """``node (Op), ...``: the first three refused nodes."""
    return ", ".join(f"{n} ({op})" for n, op in nodes[:3]) + (" ..." if len(nodes) > 3 else "")


def _refusal(what: str, error: str, log: str) -> NpuCompileError:
    message = compiler_message(error, log)
    nodes = refused_nodes(log, error)
    if nodes:
        message = f"{_shown(nodes)}: {message}"
    if "memory" in message.lower():
        return NpuOutOfMemory(f"rknn compiler, {what}: {message}")
    return UnsupportedOperator(f"rknn compiler, {what}: {message}", tuple(n for n, _ in nodes))


class RknnExecutable(Executable):
    """A subgraph built by rknn-toolkit2 and loaded on its simulator. After a worker crash the next call
    rebuilds it in the fresh worker (same ONNX, same calibration), so a frame is lost to the CPU, never
    the unit."""

    def __init__(self, backend: RknnBackend, job: dict[str, Any], model: onnx.ModelProto, variant: Variant) -> None:
        inputs, outputs = io_infos(model)
        super().__init__(inputs, outputs, variant, f"rknn-sim:{job['target']}", model)
        self.backend = backend
        self.job = job
        self.build_s = 0.0
        self._generation = -1
        self._lock = threading.Lock()

    @property
    def worker(self) -> Worker:
        return self.backend.worker

    def build(self) -> None:
        """Compile in the worker (raises the compiler's refusal as :class:`NpuCompileError`)."""
        with self._lock:
            try:
                reply = self.worker.call("compile", self.job)
            except WorkerError as exc:
                raise _refusal(f"at {self.precision}", exc.error, exc.log) from None
            except WorkerCrashed as exc:
                raise NpuCompileError(f"rknn compiler crashed: {exc}") from None
            nodes = refused_nodes(reply.log)
            if nodes:
                self.close()
                raise UnsupportedOperator(
                    f"rknn compiler, at {self.precision}: {_shown(nodes)}: no NPU lowering (the board's runtime "
                    "would run it on its CPU, inside the NPU graph)",
                    tuple(n for n, _ in nodes),
                )
            self.build_s = float(reply.result["build_s"])
            self._generation = self.worker.generation

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            if self.worker.start() != self._generation:
                self.build()  # a fresh worker after a crash: it holds nothing yet
            reply = self.worker.call(
                "run", {"key": self.job["key"]}, {str(i): feeds[t.name] for i, t in enumerate(self.inputs)}
            )
        except (WorkerCrashed, WorkerError, NpuCompileError) as exc:
            raise NpuError(f"rknn simulator: {exc}") from None
        outs = {t.name: reply.arrays[str(i)].reshape(t.shape) for i, t in enumerate(self.outputs)}
        return outs

    def artifact_files(self) -> dict[str, bytes]:
        path = Path(self.job["rknn"])
        return {RKNN_SUFFIX: path.read_bytes()} if path.is_file() else {}

    def close(self) -> None:
        if self.worker.pid is not None and self._generation == self.worker.generation:
            try:
                self.worker.call("release", {"key": self.job["key"]}, timeout_s=60)
            except (WorkerCrashed, WorkerError):
                pass
        self._generation = -1


class RknnBackend(Backend):
    """rknn-toolkit2 in its worker: Rockchip's compiler and quantizer, numerics on its simulator."""

    name = "rknn"
    # Rockchip's build takes rknn_batch_size, but its runtime takes a batch only for inputs of 1, 3 or 4 channels
    # ("only support input channel in [1,3,4] when batch_size > 1", airockchip/rknn-toolkit2 issue 83): a split's
    # neck and head read feature maps; yolo-edge does not pass it yet
    batch_refusal = (
        "Rockchip's runtime batches only inputs of 1, 3 or 4 channels (a split's later units read feature maps) and "
        "yolo-edge does not pass rknn_batch_size yet: a batch runs as that many calls"
    )
    precisions = ("int8", "fp16")
    int8_schemes = ("w8a8",)  # Rockchip's INT8: asymmetric int8 activations, per-channel int8 weights
    quantizers = ("rknn",)  # its "normal" algorithm, the model zoo's recipe
    fallback_quantizers = ("rknn-mmse", "rknn-kl")  # its stronger algorithms (spec.ALGORITHMS)
    kept_precision = "fp16"  # hybrid quantization: a kept convolution runs in float16
    recipe = "Rockchip's model zoo (examples/yolov8: INT8 by the normal algorithm, DFL and after on the CPU)"

    def __init__(self, target: str, worker: Worker | None = None) -> None:
        self.target = target
        self.worker = worker or Worker(TOOLCHAIN)  # its own, closed with it
        self._dir = Path(tempfile.mkdtemp(prefix="yolo-edge-rknn-"))
        self._remove_dir = weakref.finalize(self, shutil.rmtree, self._dir, True)  # on close, or at the latest at exit
        self._prefix = uuid.uuid4().hex[:8]
        self._count = 0

    def describe(self) -> str:
        return "Rockchip's simulator (rknn-toolkit2)"

    def close(self) -> None:
        """Stop its worker and remove its folder (ONNX, calibration and ``.rknn`` files of what it compiled)."""
        self.worker.close()
        self._remove_dir()

    def _job(self, model: onnx.ModelProto, variant: Variant, calib: CalibSet | None) -> dict[str, Any]:
        """Write the ONNX and (INT8) the calibration dataset file the toolkit reads: one line per sample,
        one ``.npy`` per input (NCHW float32, the subgraph's own inputs from FP32 runs of what precedes it)."""
        self._count += 1
        key = f"{self._prefix}-{self._count}"
        folder = self._dir / key
        folder.mkdir()
        quantize = variant.precision == "int8"
        if quantize and not calib:
            raise YoloEdgeError("rknn INT8 needs calibration samples")
        onnx_path, samples = save_for_worker(folder, model, calib if quantize else None)
        job: dict[str, Any] = {
            "key": key,
            "onnx": str(onnx_path),
            "precision": variant.precision,
            "kept": list(variant.kept),
            "target": self.target,
            "rknn": str(folder / f"model{RKNN_SUFFIX}"),
        }
        if quantize:
            (folder / "dataset.txt").write_text("".join(" ".join(paths) + "\n" for paths in samples))
            job["dataset"] = str(folder / "dataset.txt")
            job["config"] = {"quantized_algorithm": ALGORITHMS[variant.quantizer or self.quantizers[0]]}
        return job

    def _lower(self, model: onnx.ModelProto, v: Variant, calib: CalibSet | None) -> dict[str, Any]:
        """The compiler's job (Rockchip's compiler quantizes as it builds). A bundle's ``.rknn`` is not loadable by
        the simulator: the unit is rebuilt from the ONNX and ``calib``, as deploy built it."""
        return self._job(model, v, calib)

    def _build(self, model: onnx.ModelProto, v: Variant, program: dict[str, Any]) -> Executable:
        """Build ``model`` with Rockchip's compiler in the worker, which then holds it for the simulator."""
        exe = RknnExecutable(self, program, model, v)
        exe.build()
        return exe

    def query(self, model: onnx.ModelProto) -> OpQuery:
        """The nodes Rockchip's compiler refuses, from an FP16 build (which needs no calibration)."""
        n_ops = sum(1 for n in model.graph.node if n.op_type != "Constant")
        try:
            self.compile(model, "fp16").close()
        except NpuCompileError as exc:
            named = exc.nodes if isinstance(exc, UnsupportedOperator) else ()
            return OpQuery(n_ops, named or (f"(whole graph: {exc})",), "compiler")
        return OpQuery(n_ops, (), "compiler")

    def layer_errors(
        self, model: onnx.ModelProto, variant: Variant, calib: CalibSet, feeds: CalibSet
    ) -> list[LayerError]:
        """Rockchip's per-layer accuracy analysis of ``model`` at ``variant`` on the first of ``feeds``: its
        convolutions (what hybrid quantization can keep in float16), worst single-layer cosine first."""
        job = self._job(model, self.resolve(variant), calib)
        folder = Path(job["onnx"]).parent
        inputs = []
        for j, t in enumerate(io_infos(model)[0]):
            np.save(folder / f"analysis_{j}.npy", np.ascontiguousarray(feeds[0][t.name], dtype=np.float32))
            inputs.append(str(folder / f"analysis_{j}.npy"))
        try:
            reply = self.worker.call("accuracy", {**job, "inputs": inputs, "output_dir": str(folder / "analysis")})
        except (WorkerError, WorkerCrashed):
            return []
        rows = [r for r in parse_error_analysis(Path(reply.result["report"]).read_text()) if r.op == "Conv"]
        return [
            LayerError(r.tensor, r.op, r.entire_cos, 1.0 - r.single_cos)
            for r in sorted(rows, key=lambda r: r.single_cos)
        ]


class RknnLiteExecutable(Executable):
    """A bundle's ``.rknn`` on the board: RKNNLite contexts pinned to the NPU cores (``cores``: their masks), a call
    on its stream worker's own (pool context ``k``: the ``k``-th, ``backends.base.context``), so that a failing core
    is one context's and the pool can leave it out (``runtime.pool``); a stream runs ``concurrency`` calls at once."""

    def __init__(self, runtimes: list[Any], model: onnx.ModelProto, variant: Variant, cores: str) -> None:
        inputs, outputs = io_infos(model)
        super().__init__(inputs, outputs, variant, f"rknn-npu:{cores}", model)
        self.runtimes = runtimes
        self.concurrency = len(runtimes)
        self._locks = [threading.Lock() for _ in runtimes]  # a context runs one call at a time

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        arrays = [feeds[t.name] for t in self.inputs]
        layout = ["nchw"] * len(arrays) if all(a.ndim == 4 for a in arrays) else None
        k = context() % len(self.runtimes)
        with self._locks[k]:
            try:
                outs = self.runtimes[k].inference(inputs=arrays, data_format=layout)
            except Exception as exc:  # RKNNLite raises plain exceptions of its own: the device's failure, not a bug
                raise NpuError(f"RKNNLite: {type(exc).__name__}: {exc}") from exc
        if outs is None or len(outs) != len(self.outputs):
            raise NpuError(f"RKNNLite.inference returned {None if outs is None else len(outs)} outputs")
        return {t.name: np.asarray(o, dtype=np.float32).reshape(t.shape) for t, o in zip(self.outputs, outs)}

    def artifact_files(self) -> dict[str, bytes]:
        return {}

    def close(self) -> None:
        for runtime in self.runtimes:
            runtime.release()


class RknnLiteBackend(Backend):
    """The board: ``rknnlite.api.RKNNLite`` runs a bundle's ``.rknn`` files on the NPU cores of ``core_mask``."""

    name = "rknn-lite"
    batch_refusal = "a board's .rknn is compiled at batch 1 by deploy: a batch runs as that many calls"
    precisions = ("int8", "fp16")
    int8_schemes = ("w8a8",)
    quantizers = ("rknn",)
    fallback_quantizers = ("rknn-mmse", "rknn-kl")  # a bundle's units quantized by any of Rockchip's algorithms
    kept_precision = "fp16"
    on_accelerator = True  # the board's NPU: measured, never wrapped as a simulation

    def __init__(self, core_mask: str, cores: int = 1, multicore: Multicore | None = None) -> None:
        self.core_mask, self.cores, self.multicore = core_mask, cores, multicore or Multicore()
        self._dir = Path(tempfile.mkdtemp(prefix="yolo-edge-rknnlite-"))
        self._remove_dir = weakref.finalize(self, shutil.rmtree, self._dir, True)

    def describe(self) -> str:
        return "RKNNLite on the NPU"

    def close(self) -> None:
        """Remove the folder the bundle's ``.rknn`` files were written to for RKNNLite."""
        self._remove_dir()

    def _load(self, model: onnx.ModelProto, v: Variant, artifact: Artifact) -> bytes | None:
        return artifact.get(RKNN_SUFFIX) or None

    def _lower(self, model: onnx.ModelProto, v: Variant, calib: CalibSet | None) -> bytes:
        raise NpuCompileError(
            "no .rknn for this unit in the bundle (the board cannot compile): deploy it on a host with "
            "`yolo-edge toolchain install rknn`"
        )

    def _build(self, model: onnx.ModelProto, v: Variant, program: bytes) -> Executable:
        from rknnlite.api import RKNNLite

        path = self._dir / f"unit{len(list(self._dir.iterdir()))}{RKNN_SUFFIX}"
        path.write_bytes(program)
        # with several cores, the way the bundle's profile says a stream runs them (deploy --streams chose it): a pool
        # of contexts_per_core contexts pinned to each core (NPU_CORE_0, _1, ...), or one context on all of them
        # (Rockchip's tri-core mode); with one core, the core mask
        if self.cores > 1 and self.multicore.all_cores:
            masks = ["NPU_CORE_" + "_".join(str(k) for k in range(self.cores))]
        elif self.cores > 1:
            masks = [f"NPU_CORE_{k}" for _ in range(self.multicore.contexts_per_core) for k in range(self.cores)]
        else:
            masks = [f"NPU_CORE_{self.core_mask.upper()}"] * self.multicore.contexts_per_core
        runtimes = []
        for mask in masks:
            runtime = RKNNLite()
            if runtime.load_rknn(str(path)) != 0 or runtime.init_runtime(core_mask=getattr(RKNNLite, mask)) != 0:
                raise NpuCompileError(f"RKNNLite could not load {path.name} on {mask}")
            runtimes.append(runtime)
        return RknnLiteExecutable(runtimes, model, v, ",".join(m.removeprefix("NPU_CORE_") for m in masks))


def present(profile: DeviceProfile) -> bool:
    """Whether this is the board (its lite runtime installed): asked without starting the toolchain's worker."""
    return importlib.util.find_spec("rknnlite") is not None


def backend_for(profile: DeviceProfile) -> Backend:
    """The board's lite runtime where it is installed, else the toolchain on this host, else a one-line error."""
    options = profile.runtime_options
    assert isinstance(options, RknnOptions)  # config builds a profile's options as its runtime's
    if present(profile):
        return RknnLiteBackend(options.core_mask, profile.npu_cores, profile.multicore)
    worker = Worker(TOOLCHAIN)  # the backend's own: asked first whether it starts (one that does not is no use)
    status = toolchain_status(TOOLCHAIN, worker=worker)
    if not status.usable:
        worker.close()
        raise YoloEdgeError(f"{profile.name} needs Rockchip's toolchain: {status.detail}")
    return RknnBackend(options.target or profile.name, worker)
