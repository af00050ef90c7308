"""The backend interface (template methods, as Polygraphy's runners).

``Backend.compile(model, variant, calib, artifact)`` resolves the variant against what the backend computes
and calls its ``_compile``, which returns an :class:`Executable`. ``Executable.run(feeds)`` validates the feeds
(names, shapes, dtypes), times the call and returns the outputs by name; a backend implements only ``_run``,
and raises :class:`NpuError` (its vendor's failures wrapped) for a failure of the device, which the executor
absorbs; any other exception is a bug and propagates. Executables are thread-safe: a pipelined stream calls
different units of different frames from different threads.

Every optional capability is declared here with its default, so that callers never probe for it:
``Backend.is_reference`` (its FP32 is the CPU reference itself), ``Backend.query`` (the runtime's own op support;
None: it cannot say), ``Backend.layer_errors`` (per-layer error at INT8; empty: it cannot say),
``Backend.compiler_report`` (the device compiler's memory report and time estimate; None: it makes none),
``Executable.modelled_s`` (a simulated device's modelled latency; None: measured), ``Executable.pixel_inputs`` (the
image taken as the letterbox's pixels; none: the tensor), ``Executable.bounded`` (the runtime bounds its own call;
False: the executor's pool does), ``Executable.warm_up`` and ``close`` on both (both are context managers).
"""

from __future__ import annotations

import statistics
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from yolo_edge.core.config import PrecisionName, Quantizer, Scheme, Variant
from yolo_edge.core.errors import InternalError, YoloEdgeError
from yolo_edge.core.pixels import is_pixels, to_pixels, to_tensor
from yolo_edge.core.registry import QDQ_SUFFIX
from yolo_edge.devices.limits import RuntimeMemory
from yolo_edge.model.batch import BatchRefused, at_batch
from yolo_edge.model.graph import TensorInfo, control_flow

Feeds = Mapping[str, np.ndarray]
CalibSet = Sequence[dict[str, np.ndarray]]


def hash_feeds(h: Any, calib: CalibSet) -> None:
    """Feed ``calib``'s tensors, by name, into the hash ``h``: what a compile calibrates on, in a cache key."""
    for feeds in calib:
        for name in sorted(feeds):
            h.update(name.encode())
            h.update(np.ascontiguousarray(feeds[name]).data)


def save_for_worker(folder: Path, model: onnx.ModelProto, calib: CalibSet | None) -> tuple[Path, list[list[str]]]:
    """What a toolchain worker reads: ``model`` as ``folder/model.onnx`` at IR version 10 at most (the toolchains'
    older onnx), and each sample of ``calib`` as one ``.npy`` per input of ``model``, in its order (float32)."""
    graph = onnx.ModelProto()
    graph.CopyFrom(model)
    graph.ir_version = min(graph.ir_version, 10)
    onnx.save(graph, str(folder / "model.onnx"))
    names = [t.name for t in io_infos(model)[0]]
    samples = []
    for k, feeds in enumerate(calib or []):
        paths = [folder / f"calib{k}_{j}.npy" for j in range(len(names))]
        for path, name in zip(paths, names):
            np.save(path, np.ascontiguousarray(feeds[name], dtype=np.float32))
        samples.append([str(p) for p in paths])
    return folder / "model.onnx", samples


Artifact = Mapping[str, bytes]  # a unit's compiled files as a bundle stores them, by suffix (artifact_suffixes())
FP32_SUFFIX = ".onnx"  # the unit's FP32 graph itself as stored: what a runtime reads, not the model serialized again


# the op domains of every graph yolo-edge writes: ONNX's, onnxruntime's contrib ops (Qualcomm's EPContext node)
OP_DOMAINS = ("", "ai.onnx", "com.microsoft")


def self_contained(model: onnx.ModelProto, what: str) -> onnx.ModelProto:
    """``model`` if it carries its weights and has no control flow: a stored graph whose tensors name external data
    would have the runtime open that file relative to the current folder (a bundle is untrusted input), and one with
    a ``Loop`` may never finish a frame (:func:`~yolo_edge.model.graph.control_flow`), so both are refused."""
    tensors = [*model.graph.initializer]
    tensors += [a.t for n in model.graph.node for a in n.attribute if a.type == onnx.AttributeProto.TENSOR]
    external = [t.name for t in tensors if t.data_location == onnx.TensorProto.EXTERNAL]
    if external:
        raise YoloEdgeError(f"{what} names external data for {external[0]}; yolo-edge writes its graphs self-contained")
    loops = control_flow(model)
    if loops:
        raise YoloEdgeError(f"{what} holds control flow ({', '.join(loops)}), which no graph yolo-edge writes has")
    foreign = sorted({f"{n.domain}:{n.op_type}" for n in model.graph.node if n.domain not in OP_DOMAINS})
    if foreign:  # an op no runtime here has: every session of it fails, a fallback twin's only when it is needed
        raise YoloEdgeError(f"{what} holds ops of no standard domain ({', '.join(foreign[:3])})")
    return model


def qdq_artifact(artifact: Artifact | None) -> onnx.ModelProto | None:
    """The INT8 QDQ graph in ``artifact``, if it holds one, carrying its weights (:func:`self_contained`)."""
    data = (artifact or {}).get(QDQ_SUFFIX)
    if not data:
        return None
    try:
        model = onnx.load_from_string(data)
    except Exception as exc:  # DecodeError and protobuf's other errors
        raise YoloEdgeError(f"a stored INT8 unit is not a readable ONNX graph ({type(exc).__name__})") from None
    return self_contained(model, "a stored INT8 unit")


class NpuError(Exception):
    """An accelerator failure at run time (not a user error, not a bug): the executor re-runs the frame on the
    CPU. Backends wrap their vendor runtime's failures in it."""


class NpuTimeout(NpuError):
    """A call that did not answer within its time (``Executable.run(feeds, timeout_s)``), given up on and cancelled
    by the runtime itself."""


class NpuCompileError(Exception):
    """The accelerator's compiler refused the graph."""


class UnsupportedOperator(NpuCompileError):
    """The compiler refused ops; ``nodes`` names them where it said which (op-level fallback cuts around them)."""

    def __init__(self, message: str, nodes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.nodes = nodes


class NpuAllocationError(NpuError):
    """An allocation failed at run time (the driver could not give a call its buffers now): a smaller batch may
    fit where this one did not."""


class NpuOutOfMemory(NpuCompileError):
    """The graph does not fit the board's memory. ``numerics``: where the compiler built the graph before it
    refused it, what it computes, run on the host (Ethos-U: the int8 TFLite on LiteRT's reference kernels): it runs
    nowhere on the board, but the whole-graph comparison row shows its precision beside the memory failure."""

    def __init__(self, message: str, numerics: Executable | None = None) -> None:
        super().__init__(message)
        self.numerics = numerics


def io_infos(model: onnx.ModelProto) -> tuple[tuple[TensorInfo, ...], tuple[TensorInfo, ...]]:
    def info(vi: onnx.ValueInfoProto) -> TensorInfo:
        tt = vi.type.tensor_type
        return TensorInfo(vi.name, tuple(d.dim_value for d in tt.shape.dim), tt.elem_type)

    inits = {t.name for t in model.graph.initializer}
    return (
        tuple(info(i) for i in model.graph.input if i.name not in inits),
        tuple(info(o) for o in model.graph.output),
    )


_CONTEXT = threading.local()


def on_context(k: int, emulating: bool = False) -> None:
    """This thread's accelerator calls are its pool's context ``k`` (a stream's worker, one of
    :attr:`Executable.concurrency`; context ``k`` runs on core ``k`` modulo the cores): the stream engine sets it.
    ``emulating``: its calls on a simulated board take the board's modelled time (``run --emulate-latency``)."""
    _CONTEXT.k, _CONTEXT.emulating = k, emulating


def context() -> int:
    """The pool context this thread's calls are (0 outside a pool)."""
    return int(getattr(_CONTEXT, "k", 0))


def emulating() -> bool:
    """Whether this thread's calls on a simulated board take the board's modelled time."""
    return bool(getattr(_CONTEXT, "emulating", False))


class Executable(ABC):
    """A compiled subgraph. ``run`` is the public, validated and timed entry point."""

    def __init__(
        self,
        inputs: Sequence[TensorInfo],
        outputs: Sequence[TensorInfo],
        variant: Variant,
        device: str,
        model: onnx.ModelProto | None = None,
    ) -> None:
        self.model = model  # the ONNX actually compiled (the QDQ graph for INT8 by onnxruntime's quantizer)
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.variant = variant
        self.device = device
        self.concurrency = 1  # calls that may run at once, each on its own accelerator core (a stream's pool)
        self.modelled_s: float | None = None  # a simulated device's modelled seconds per call; None: measured
        self.memory_report: str | None = None  # what the compiler reports of the graph's memory use (Vela's SRAM)
        # inputs taken as the letterbox's pixels, normalised in the runtime's own graph (yolo_edge.core.pixels)
        self.pixel_inputs: frozenset[str] = frozenset()
        self._local = threading.local()

    @property
    def host_slack_s(self) -> float:
        """Seconds a call may take on this host beyond the unit timeout without counting as a hung device: none for
        a device that runs here; a simulator's own time (Qualcomm's HTP simulator: seconds a call on a loaded host),
        which says nothing about the board's."""
        return 0.0

    @property
    def host_busy(self) -> bool:
        """A simulator computing a call's numerics on this host right now: its wall time there, however loaded the
        host, is not the board's, so a call past the unit timeout while this is True is waited for, not a timeout
        (an injected hang is not numerics: it still times out). False for a device that runs here."""
        return False

    def __enter__(self) -> Executable:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def precision(self) -> str:
        return self.variant.precision

    @property
    def last_run_s(self) -> float:
        """Wall time of this thread's last ``run``."""
        return float(getattr(self._local, "last_run_s", 0.0))

    @property
    def bounded(self) -> bool:
        """Its runtime waits for a call with a deadline of its own and cancels it past it (``run(feeds, timeout_s)``
        raises :class:`NpuTimeout`): the executor calls it on the frame's thread, not on a thread it can only give
        up on (OpenVINO's ``wait_for``); False: the deadline is the caller's."""
        return False

    def run(self, feeds: Feeds, timeout_s: float | None = None) -> dict[str, np.ndarray]:
        """The outputs of one call on ``feeds`` (``timeout_s``: a :attr:`bounded` executable's deadline, else
        None); the image may come in either form (:mod:`yolo_edge.core.pixels`). A tensor
        for an input taken as pixels (a caller holding calibration tensors) is converted before the call is timed: a
        frame's image comes as pixels. A frame's pixels for a graph taking the tensor (a CPU twin) are normalised
        within the call's time, as the pixel graphs normalise within theirs."""
        given = self._validate(feeds)
        for name in self.pixel_inputs:
            if given[name].dtype != np.uint8:
                given[name] = to_pixels(given[name])
        t0 = time.perf_counter()
        for name, a in given.items():
            if a.dtype == np.uint8 and name not in self.pixel_inputs:
                given[name] = to_tensor(a)
        outs = self._run(given) if timeout_s is None else self._run_within(given, timeout_s)
        self._local.last_run_s = time.perf_counter() - t0
        return outs

    def _validate(self, feeds: Feeds) -> dict[str, np.ndarray]:
        """This graph's feeds, by input. They are built by yolo-edge itself (letterbox, the previous unit): a
        mismatch is a bug."""
        expected = {t.name for t in self.inputs}
        missing = sorted(expected - set(feeds))
        if missing:
            raise InternalError(f"missing input tensor(s) {missing}; this graph takes {sorted(expected)}")
        for t in self.inputs:
            a = feeds[t.name]
            if is_pixels(a, t.shape):
                continue
            if tuple(a.shape) != t.shape:
                raise InternalError(f"input '{t.name}' has shape {list(a.shape)}, expected {list(t.shape)}")
            if a.dtype != np.float32:
                raise InternalError(f"input '{t.name}' is {a.dtype}, expected float32")
        return {t.name: feeds[t.name] for t in self.inputs}

    def warm_up(self, feeds: Feeds, runs: int) -> None:
        """Run ``runs`` untimed calls before frames are timed: a fresh executable's first calls allocate and tune
        (onnxruntime's arena, OpenVINO's kernels) and would read as a slow accelerator to the hysteresis."""
        for _ in range(runs):
            self.run(feeds)

    @abstractmethod
    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the compiled graph on validated feeds."""

    def _run_within(self, feeds: dict[str, np.ndarray], timeout_s: float) -> dict[str, np.ndarray]:
        """A :attr:`bounded` executable's call with its deadline."""
        raise InternalError(f"{type(self).__name__} waits for no call of its own; the caller bounds it")

    def artifact_files(self) -> dict[str, bytes]:
        """What a bundle stores of this executable, by suffix: the INT8 QDQ graph where it differs from the
        FP32 subgraph; a vendor backend adds its own compiled file (``.rknn``)."""
        if self.precision == "int8" and self.model is not None:
            return {QDQ_SUFFIX: self.model.SerializeToString()}
        return {}

    def serve(self, streams: int) -> None:
        """Be ready for ``streams`` streams at once (the stream engine says so as a run starts): a runtime with a
        throughput mode of its own takes it for several and sets :attr:`concurrency` to the calls it runs at once
        (OpenVINO's THROUGHPUT hint); by default nothing changes (the contexts chosen at compile, or one call)."""
        return None

    def close(self) -> None:
        """Release what the executable holds outside this process (a toolchain worker's compiled graph)."""
        return None


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two arrays, flattened (1 when both are zero)."""
    # elementwise sums, not np.dot/np.linalg: keeps numpy's BLAS thread pool (which may busy-wait after
    # a call) out of loops that time the inference runtimes; a precaution, its effect not measured here
    x, y = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    nx, ny = float(np.sqrt(np.sum(x * x))), float(np.sqrt(np.sum(y * y)))
    if nx == 0 and ny == 0:
        return 1.0
    if nx == 0 or ny == 0:
        return 0.0
    return float(np.sum(x * y)) / (nx * ny)


def run_chain(executables: Sequence[Executable], feeds: Feeds) -> dict[str, np.ndarray]:
    """Run ``executables`` in order over one dict of tensors: each takes its inputs from it and adds its
    outputs. Returns the dict (the feeds and every output)."""
    tensors = dict(feeds)
    for exe in executables:
        tensors.update(exe.run(tensors))
    return tensors


def median_run_s(exe: Executable, feeds: Feeds, runs: int = 3, warmup: int = 1) -> float:
    """Median wall seconds of ``runs`` calls of ``exe`` on ``feeds``, after ``warmup`` untimed ones: the one
    timing loop for unit estimates and the hysteresis (frame latency is ``validate.latency``'s)."""
    return interleaved_run_s([exe], feeds, runs, warmup)[0]


def interleaved_run_s(exes: Sequence[Executable], feeds: Feeds, runs: int = 3, warmup: int = 1) -> list[float]:
    """Median wall seconds of each of ``exes`` on the same ``feeds``, called in turn ``runs`` rounds after
    ``warmup`` untimed ones: a machine that slows down or speeds up meanwhile slows all of them alike, so it
    cannot rank them (planning compares a subgraph's variants this way)."""
    return [statistics.median(t) for t in interleaved_rounds(exes, feeds, runs, warmup)]


def interleaved_rounds(exes: Sequence[Executable], feeds: Feeds, runs: int = 3, warmup: int = 1) -> list[list[float]]:
    """Each of ``exes``' wall seconds in each of ``runs`` rounds (one call of each in turn per round, after ``warmup``
    untimed ones): the same round's times are paired, taken under the same load."""
    for _ in range(warmup):
        for exe in exes:
            exe.run(feeds)
    times: list[list[float]] = [[] for _ in exes]
    for _ in range(runs):
        for exe, got in zip(exes, times):
            exe.run(feeds)
            got.append(exe.last_run_s)
    return times


@dataclass(frozen=True)
class LayerError:
    """One layer's error at low precision against FP32 on the same input: ``cosine`` of its output, and
    ``added``, how much of the unit's error this layer adds (the vendor's single-layer figure where it has one)."""

    layer: str  # as the backend names it, what Variant.kept holds (an ONNX node; Rockchip: its output tensor)
    op: str
    cosine: float
    added: float


@dataclass(frozen=True)
class OpQuery:
    """A runtime's own answer on which of a graph's ops it takes: ``ops`` counted, ``refused`` by node name (a
    refusal of the whole graph names no node: it is given in parentheses), and how it was asked (``via``)."""

    ops: int
    refused: tuple[str, ...]
    via: str  # "query_model", "compiler"


class Backend(ABC):
    """Compiles subgraphs for one runtime/device. Subclasses list the precisions they really compute in, the
    INT8 activation schemes and quantizers they offer, and whether they can keep layers at higher precision;
    they implement the steps of :meth:`compile` and override the optional hooks they have. A backend is a context
    manager: ``close`` releases what it holds (a temp folder); it outlives the executables it compiled."""

    name: str = ""
    precisions: tuple[PrecisionName, ...] = ()
    int8_schemes: tuple[Scheme, ...] = ("u8",)  # INT8 activation schemes this backend can compile (config.INT8_SCHEMES)
    quantizers: tuple[Quantizer, ...] = ("qdq",)  # INT8 quantizers (config.QUANTIZERS), the preferred first
    # the vendor's stronger quantization: tried for a graph whose every INT8 variant by ``quantizers`` fails the
    # precision check, and for a subgraph the verdict blames for drift, before layers are kept out of INT8 (OpenVINO:
    # NNCF with min-max ranges, onnxruntime's QDQ recipe; Rockchip: its mmse and kl_divergence algorithms)
    fallback_quantizers: tuple[Quantizer, ...] = ()
    # the vendor's published recipe for YOLOv8, judged beside every chosen plan: backbone, neck and head at this
    # backend's first INT8 variant on the accelerator, DFL, decode and NMS on the CPU; where it was published
    recipe: str = ""
    kept_precision: str | None = None  # what a layer kept out of INT8 computes in (None: no mixed precision)
    # what the runtime holds of a graph besides its liveness count (devices/limits.RuntimeMemory): whether a stream's
    # contexts share one copy of the weights, its own memory per context, its activations' multiple
    memory: RuntimeMemory = RuntimeMemory()
    on_accelerator: bool = False  # runs on the profile's accelerator itself (a board's runtime), not a stand-in
    # the most frames one compiled call takes (None: any; 1: a batch runs as that many calls, as Vela requires) and,
    # where it is 1, why
    max_batch: int | None = 1
    batch_refusal: str = "it compiles batch 1 only"

    def compile(
        self,
        model: onnx.ModelProto,
        variant: Variant | str,
        calib: CalibSet | None = None,
        artifact: Artifact | None = None,
        batch: int = 1,
    ) -> Executable:
        """Compile ``model`` (a graph taking one frame) as ``variant`` (a precision, or for INT8 also its scheme,
        quantizer and kept layers: defaults the backend's first) taking ``batch`` frames a call; INT8 needs ``calib``
        (feeds of this subgraph at batch 1; read only when the backend quantizes). ``artifact`` is ``model`` already
        compiled at batch 1 (a bundle's unit files): what the backend can run of it runs as it is, and ``model`` is
        what limits are checked on.

        The same steps for every backend, each its own: refuse what the device cannot take (``_admit``, at the
        batch), load what ``artifact`` stores (``_load``), else lower ``model`` to the variant (``_lower``: quantize,
        convert; at batch 1, as it was calibrated), give the program the batch (``_rebatch``), then build it for the
        runtime (``_build``). A batch larger than :attr:`max_batch` raises :class:`NpuCompileError` saying why."""
        v = self.resolve(variant)
        batched = model if batch == 1 else self._batched(model, batch)
        self._admit(batched, v)
        program = self._load(model, v, artifact) if artifact else None
        if program is None:
            program = self._lower(model, v, calib)
        if batch != 1:
            program = self._rebatch(program, batch)
        return self._build(batched, v, program)

    def _batched(self, model: onnx.ModelProto, batch: int) -> onnx.ModelProto:
        """``model`` at ``batch`` frames (:func:`~yolo_edge.model.batch.at_batch`), where this backend batches."""
        if self.max_batch is not None and batch > self.max_batch:
            raise NpuCompileError(f"{self.name} cannot compile batch {batch}: {self.batch_refusal}")
        try:
            return at_batch(model, batch)
        except BatchRefused as exc:
            raise NpuCompileError(f"cannot compile batch {batch}: {exc}") from None

    def _rebatch(self, program: Any, batch: int) -> Any:
        """``program`` (what :meth:`_load` or :meth:`_lower` made, at batch 1) taking ``batch`` frames a call; a backend
        with a :attr:`max_batch` above 1 implements it."""
        raise InternalError(f"{self.name} declares batches of up to {self.max_batch} but cannot give one")

    def _admit(self, model: onnx.ModelProto, v: Variant) -> None:
        """Raise :class:`NpuCompileError` before any work when the device cannot take ``model`` at ``v``."""
        return None

    def _load(self, model: onnx.ModelProto, v: Variant, artifact: Artifact) -> Any | None:
        """What ``artifact`` stores of ``model`` at ``v`` in the form :meth:`_build` takes (None: nothing this runtime
        can use as it is; ``model`` is lowered again)."""
        return None

    @abstractmethod
    def _lower(self, model: onnx.ModelProto, v: Variant, calib: CalibSet | None) -> Any:
        """``model`` lowered to ``v`` for this runtime (INT8: quantized on ``calib``), in the form :meth:`_build`
        takes; a runtime that cannot lower (a board's) raises :class:`NpuCompileError` saying where it can."""

    @abstractmethod
    def _build(self, model: onnx.ModelProto, v: Variant, program: Any) -> Executable:
        """``program`` (what :meth:`_load` or :meth:`_lower` made) built into an executable of ``model`` at ``v``."""

    def is_reference(self, variant: Variant) -> bool:
        """Whether compiling at ``variant`` gives the FP32 CPU reference itself (the ``cpu`` profile): a unit's CPU
        twin then serves as its accelerator executable, not a second session of the same graph."""
        return False

    def query(self, model: onnx.ModelProto) -> OpQuery | None:
        """Which of ``model``'s ops the runtime itself takes (None: it cannot say; the profile's op list decides)."""
        return None

    def describe(self) -> str:
        """Where this backend runs, for ``yolo-edge devices``."""
        return self.name

    def close(self) -> None:
        """Release what the backend holds (a temp folder); the executables it compiled are closed first."""
        return None

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def layer_errors(
        self, model: onnx.ModelProto, variant: Variant, calib: CalibSet, feeds: CalibSet
    ) -> list[LayerError]:
        """The layers of ``model`` at ``variant`` ranked by the error they add, worst first, measured on ``feeds``
        (empty where the backend cannot say)."""
        return []

    def compiler_report(self, compiled: Callable[[], Executable]) -> Executable | None:
        """What the device's own compiler says of a graph, where it says anything (Arm's Vela: the SRAM it takes,
        its ``memory_report``, a refusal for memory raised as :class:`NpuOutOfMemory`, and its time, ``modelled_s``):
        the graph compiled by ``compiled`` (the caller's, cached). None: this compiler reports nothing, and nothing
        is compiled to find out (the profile's models decide)."""
        return None

    def resolve(self, variant: Variant | str) -> Variant:
        """``variant`` validated, with this backend's defaults for an INT8 scheme and quantizer left open."""
        v = Variant.parse(variant) if isinstance(variant, str) else variant
        if v.precision not in self.precisions:
            raise YoloEdgeError(f"{self.name} cannot run {v.precision} here; it runs {list(self.precisions)}")
        if v.precision != "int8":
            if v.scheme or v.quantizer or v.kept:
                raise YoloEdgeError(f"{v.label}: only INT8 has a scheme, a quantizer or kept layers")
            return v
        if v.scheme is not None and v.scheme not in self.int8_schemes:
            raise YoloEdgeError(f"{self.name} has no INT8 scheme '{v.scheme}'; it has {list(self.int8_schemes)}")
        offered = (*self.quantizers, *self.fallback_quantizers)
        if v.quantizer is not None and v.quantizer not in offered:
            raise YoloEdgeError(f"{self.name} has no INT8 quantizer '{v.quantizer}'; it has {list(offered)}")
        if v.kept and self.kept_precision is None:
            raise YoloEdgeError(f"{self.name} cannot keep layers out of INT8 ({v.label})")
        return Variant("int8", v.scheme or self.int8_schemes[0], v.quantizer or self.quantizers[0], v.kept)
