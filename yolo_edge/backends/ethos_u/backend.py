"""Arm Ethos-U (U55, U65) through Arm's Vela compiler: the NPU of NXP's i.MX 93, Alif's Ensemble, Arm's Corstone.

On the host, :class:`EthosUBackend` drives the toolchain (``yolo-edge toolchain install ethos-u``: onnx2tf and
TensorFlow Lite's converter, Vela) through its worker (``yolo_edge.toolchains``):

- a subgraph is converted to an integer TFLite model by TensorFlow Lite's post-training quantization, calibrated on
  the subgraph's own FP32 inputs: int8 activations (``w8a8``) or 16x8 (``w8a16``: int16 activations), int8
  weights, integer inputs and outputs (the board's CPU quantizes at the NPU's edges, as this executable does);
- Vela compiles it for the profile's accelerator, system config and memory mode (the board's Vela ``.ini``):
  **op support** is Vela's operator placement (an op it leaves to the CPU is a refusal: the NPU runs Vela's
  command stream only); **memory** is Vela's reported SRAM use (the tensor arena in a shared-SRAM layout: Vela
  reports an overrun and exits 0, so it is compared with the profile's ``sram_kb`` here) and its DRAM and flash
  use against ``memory_mb``; **latency** is Vela's performance estimate (the executable's ``modelled_s``,
  ``modelled (Vela)``);
- **numerics** run the integer ``.tflite`` on LiteRT's reference kernels, which Arm states the NPU matches
  bit-exactly for the ops it runs: the oracle for the board, labelled so, not the board.

A bundle stores each unit's ``.tflite``, its ``_vela.tflite`` and ``.tflite.json`` (which ONNX tensor is which
TFLite tensor, and the axis order between them: onnx2tf makes tensors channels-last). On the board (the profile's
``device`` node, ``/dev/ethosu0``, exists) :class:`EthosUBoardBackend` runs the ``_vela.tflite`` on LiteRT with
the Ethos-U delegate (the profile's ``delegate`` library), no toolchain needed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import tempfile
import threading
import uuid
import weakref
from collections.abc import Callable
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
    NpuCompileError,
    NpuError,
    NpuOutOfMemory,
    OpQuery,
    UnsupportedOperator,
    io_infos,
    save_for_worker,
)
from yolo_edge.backends.ethos_u.spec import TFLITE_IO_SUFFIX as IO_SUFFIX
from yolo_edge.backends.ethos_u.spec import TFLITE_SUFFIX, TOOLCHAIN, VELA_SUFFIX, EthosUOptions
from yolo_edge.core.config import DeviceProfile, Variant, configs_dir
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import read_cached, write_cached
from yolo_edge.toolchains import Worker, WorkerCrashed, WorkerError, toolchain_status

MAX_IO_BYTES = 1 << 16
INSTALL = "pip install 'yolo-edge[ethos-u]' (LiteRT, which runs the .tflite units)"
QUERY_SAMPLES = 2  # synthetic calibration samples of an op-support query: placement does not depend on the scales
CONVERT_TIMEOUT_S = 900


@dataclass(frozen=True)
class TensorMap:
    """Where each ONNX input and output of a unit is among its ``.tflite``'s, and the axis order between them:
    ``inputs[i] = (position, perm)`` with ``np.transpose(onnx_input, perm)`` the TFLite tensor; ``outputs[j] =
    (position, perm)`` with ``np.transpose(tflite_output, perm)`` the ONNX output."""

    inputs: tuple[tuple[int, tuple[int, ...]], ...]
    outputs: tuple[tuple[int, tuple[int, ...]], ...]

    def to_json(self) -> bytes:
        return json.dumps({"inputs": self.inputs, "outputs": self.outputs}).encode()

    @classmethod
    def parse(cls, data: bytes, model: onnx.ModelProto) -> TensorMap:
        """A stored map (untrusted: a bundle's), checked against ``model``'s inputs and outputs."""
        ins, outs = io_infos(model)
        try:
            raw = json.loads(data[:MAX_IO_BYTES])
            found = cls(*(_pairs(raw[k]) for k in ("inputs", "outputs")))
        except (ValueError, TypeError, KeyError) as exc:
            raise YoloEdgeError(f"a stored {IO_SUFFIX} is not a tensor map ({type(exc).__name__})") from None
        for what, tensors, pairs in (("inputs", ins, found.inputs), ("outputs", outs, found.outputs)):
            positions = sorted(p for p, _ in pairs)
            perms_ok = all(sorted(perm) == list(range(len(t.shape))) for t, (_, perm) in zip(tensors, pairs))
            if len(pairs) != len(tensors) or positions != list(range(len(tensors))) or not perms_ok:
                raise YoloEdgeError(f"a stored {IO_SUFFIX} does not map the unit's {what}; deploy it again")
        return found


Converted = tuple[bytes, TensorMap]  # an integer .tflite and its tensor map: what Vela or the delegate takes


def _pairs(raw: Any) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """``[[position, [axis, ...]], ...]`` as a tensor map's pairs (a JSON reply's or a bundle's)."""
    return tuple((int(p), tuple(int(a) for a in perm)) for p, perm in raw)


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """TFLite's rounding of a quantized value (half away from zero)."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


class TfliteExecutable(Executable):
    """An integer ``.tflite`` on LiteRT: FP32 feeds quantized with the model's own input scales, outputs dequantized,
    tensors moved between ONNX's axis order and the model's (:class:`TensorMap`). One interpreter, one call at a
    time. ``delegate``: the board's Ethos-U delegate (None: LiteRT's reference kernels, the NPU's numerics oracle)."""

    def __init__(
        self, data: bytes, io: TensorMap, model: onnx.ModelProto, variant: Variant, device: str, delegate: Any = None
    ) -> None:
        inputs, outputs = io_infos(model)
        super().__init__(inputs, outputs, variant, device, model)
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        self.data, self.io = data, io
        if delegate is None:
            self._lite = Interpreter(model_content=data, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
        else:
            self._lite = Interpreter(model_content=data, experimental_delegates=[delegate])
        self._lite.allocate_tensors()
        self._in = self._lite.get_input_details()
        self._out = self._lite.get_output_details()
        self._lock = threading.Lock()

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self._lock:
            try:
                for t, (pos, perm) in zip(self.inputs, self.io.inputs):
                    d = self._in[pos]
                    scale, zero = d["quantization"]
                    limits = np.iinfo(d["dtype"])
                    q = _round_half_away(np.transpose(feeds[t.name], perm) / scale) + zero
                    self._lite.set_tensor(d["index"], np.clip(q, limits.min, limits.max).astype(d["dtype"]))
                self._lite.invoke()
                outs = {}
                for t, (pos, perm) in zip(self.outputs, self.io.outputs):
                    d = self._out[pos]
                    scale, zero = d["quantization"]
                    value = (self._lite.get_tensor(d["index"]).astype(np.float32) - zero) * np.float32(scale)
                    outs[t.name] = np.ascontiguousarray(np.transpose(value, perm)).reshape(t.shape)
            except (RuntimeError, ValueError) as exc:  # LiteRT's own failures (a delegate's included)
                raise NpuError(f"LiteRT: {exc}") from None
        return outs

    def artifact_files(self) -> dict[str, bytes]:
        return {TFLITE_SUFFIX: self.data, IO_SUFFIX: self.io.to_json()}


class EthosUExecutable(TfliteExecutable):
    """A unit compiled for the profile's Ethos-U: its ``.tflite`` run on LiteRT's reference kernels (numerics) and
    Vela's report of it (``vela``: SRAM, DRAM and flash use, cycles, its performance estimate as ``modelled_s``)."""

    def __init__(
        self, data: bytes, io: TensorMap, model: onnx.ModelProto, variant: Variant, vela: dict[str, Any], built: bytes
    ) -> None:
        super().__init__(data, io, model, variant, "litert-ref")
        self.vela, self.vela_data = vela, built
        self.modelled_s = float(vela["inference_s"])
        self.memory_report = (
            f"Vela: {vela['sram_kib']:.0f} KiB of SRAM, {vela['dram_kib'] / 1024:.1f} MiB of DRAM, "
            f"{vela['flash_kib'] / 1024:.1f} MiB of flash"
        )

    def artifact_files(self) -> dict[str, bytes]:
        return {**super().artifact_files(), VELA_SUFFIX: self.vela_data}


def vela_config(options: EthosUOptions) -> Path:
    """The profile's Vela ``.ini``: a shipped one by its file name (beside the profiles), or a path."""
    path = Path(options.vela_config).expanduser()
    if not path.is_absolute():
        path = configs_dir() / "devices" / path
    if not path.is_file():
        raise YoloEdgeError(f"runtime_options.vela_config: no Vela .ini at {path}; name a shipped one or a path")
    return path


class EthosUBackend(Backend):
    """The toolchain in its worker: onnx2tf and TensorFlow Lite's quantizer, Vela for the profile's Ethos-U;
    numerics on LiteRT's reference kernels."""

    name = "ethos-u"
    batch_refusal = "Vela requires batch 1 ('IFM batch size must be 1'): a batch runs as that many calls"
    precisions = ("int8",)
    quantizers = ("tflite",)  # TensorFlow Lite's post-training full-integer quantization

    def __init__(self, profile: DeviceProfile, worker: Worker | None = None) -> None:
        options = profile.runtime_options
        assert isinstance(options, EthosUOptions)  # config builds a profile's options as its runtime's
        self.options, self.profile = options, profile
        self.int8_schemes = options.int8_schemes
        self.config = vela_config(options)
        self.worker = worker or Worker(TOOLCHAIN)  # its own, closed with it
        self._dir = Path(tempfile.mkdtemp(prefix="yolo-edge-ethos-u-"))
        self._remove_dir = weakref.finalize(self, shutil.rmtree, self._dir, True)  # on close, or at the latest at exit
        self._prefix = uuid.uuid4().hex[:8]
        self._count = 0
        self._lock = threading.Lock()

    def describe(self) -> str:
        return f"LiteRT's reference kernels (Arm's Vela for {self.options.accelerator}: latency, memory, op support)"

    def compiler_report(self, compiled: Callable[[], Executable]) -> Executable | None:
        """Vela reports the SRAM a graph needs (refusing one that does not fit) and estimates its time."""
        return compiled()

    def close(self) -> None:
        """Stop its worker and remove its folder (the ONNX, calibration and TFLite files of what it compiled)."""
        self.worker.close()
        self._remove_dir()

    def _folder(self) -> Path:
        with self._lock:
            self._count += 1
            folder = self._dir / f"{self._prefix}-{self._count}"
        folder.mkdir()
        return folder

    def _call(self, op: str, args: dict[str, Any], what: str) -> dict[str, Any]:
        try:
            return self.worker.call(op, args, timeout_s=CONVERT_TIMEOUT_S).result
        except WorkerError as exc:
            lines = [ln for ln in exc.error.strip().splitlines() if ln.strip()]
            raise NpuCompileError(f"ethos-u {what}: {lines[-1] if lines else 'failed'}") from None
        except WorkerCrashed as exc:
            raise NpuCompileError(f"ethos-u {what}: {exc}") from None

    def convert(self, model: onnx.ModelProto, scheme: str, calib: CalibSet) -> tuple[bytes, TensorMap]:
        """``model`` as an integer ``.tflite`` at ``scheme``, calibrated on ``calib`` (its own FP32 inputs); cached
        in the user's cache by the graph, ``calib``, ``scheme``, the toolchain's environment and the worker's code
        (a conversion takes tens of seconds: a second profile, or a deploy again, converts nothing twice)."""
        from yolo_edge.backends.quantize import cache_dir, calib_key  # the planner's: not on a board's load path

        key = calib_key(model, calib, f"tflite/{scheme}/{TOOLCHAIN.env_dir.name}/{_worker_digest()}", ())
        path, io_path = cache_dir() / f"{key}{TFLITE_SUFFIX}", cache_dir() / f"{key}{IO_SUFFIX}"
        data, io_data = read_cached(path), read_cached(io_path)
        if data is not None and io_data is not None:
            return data, TensorMap.parse(io_data, model)
        folder = self._folder()
        onnx_path, samples = save_for_worker(folder, model, calib)
        out = folder / f"model{TFLITE_SUFFIX}"
        job = {"onnx": str(onnx_path), "calib": samples, "scheme": scheme, "tflite": str(out)}
        reply = self._call("convert", job, f"TFLite conversion at {scheme}")
        io = TensorMap(*(_pairs(reply[k]) for k in ("inputs", "outputs")))
        data = out.read_bytes()
        write_cached(path, data)
        write_cached(io_path, io.to_json())  # last: an entry is read only with both
        return data, io

    def vela(self, data: bytes) -> tuple[dict[str, Any], bytes]:
        """Vela's report on the ``.tflite`` ``data`` for this profile, and its compiled ``_vela.tflite``."""
        folder = self._folder()
        (folder / f"unit{TFLITE_SUFFIX}").write_bytes(data)
        job = {
            "tflite": str(folder / f"unit{TFLITE_SUFFIX}"),
            "accelerator": self.options.accelerator,
            "config": str(self.config),
            "system_config": self.options.system_config,
            "memory_mode": self.options.memory_mode,
            "output_dir": str(folder / "vela"),
        }
        report = self._call("vela", job, "Vela")
        return report, Path(report["vela_tflite"]).read_bytes()

    def refusal(self, report: dict[str, Any]) -> NpuCompileError | None:
        """Why Vela's ``report`` does not fit the profile's board: ops left to the CPU, SRAM over the budget (the
        arena of a shared-SRAM layout), DRAM and flash over ``memory_mb``."""
        where = f"Vela, {self.options.accelerator} ({self.options.system_config}, {self.options.memory_mode})"
        if report["cpu_ops"]:
            types = ", ".join(report["cpu_op_types"]) or "not named"
            total = report["cpu_ops"] + report["npu_ops"]
            return UnsupportedOperator(f"{where}: {report['cpu_ops']} of {total} ops run on the CPU ({types})")
        budget = self.profile.sram_kb
        if budget is not None and report["sram_kib"] > budget:
            return NpuOutOfMemory(f"{where}: {report['sram_kib']:.0f} KiB of SRAM used > the board's {budget:.0f} KiB")
        off_chip = report["dram_kib"] + report["flash_kib"]
        if off_chip > self.profile.memory_mb * 1024:
            return NpuOutOfMemory(
                f"{where}: {off_chip / 1024:.1f} MiB of DRAM and flash used > {self.profile.memory_mb:.0f} MiB"
            )
        return None

    def _load(self, model: onnx.ModelProto, v: Variant, artifact: Artifact) -> Converted | None:
        """The bundle's integer ``.tflite`` and its tensor map (Vela compiles it again: a build is 0.3 s)."""
        stored, io_data = artifact.get(TFLITE_SUFFIX), artifact.get(IO_SUFFIX)
        return (stored, TensorMap.parse(io_data, model)) if stored and io_data else None

    def _lower(self, model: onnx.ModelProto, v: Variant, calib: CalibSet | None) -> Converted:
        """The unit converted to an integer TFLite, calibrated on ``calib``."""
        if not calib:
            raise YoloEdgeError("ethos-u INT8 needs calibration samples")
        assert v.scheme is not None  # resolved
        return self.convert(model, v.scheme, calib)

    def _build(self, model: onnx.ModelProto, v: Variant, program: Converted) -> Executable:
        """Compile with Vela; refuse what does not fit the board."""
        data, io = program
        report, built = self.vela(data)
        refused = self.refusal(report)
        if isinstance(refused, NpuOutOfMemory):  # converted and compiled: its numerics are known all the same
            refused.numerics = EthosUExecutable(data, io, model, v, report, built)
        if refused is not None:
            raise refused
        return EthosUExecutable(data, io, model, v, report, built)

    def query(self, model: onnx.ModelProto) -> OpQuery:
        """The ops Vela leaves to the CPU, from a conversion at the first scheme on synthetic calibration (where an
        op is placed does not depend on its scales); a graph the converter refuses is refused whole."""
        n_ops = sum(1 for n in model.graph.node if n.op_type != "Constant")
        try:
            data, _ = self.convert(model, self.int8_schemes[0], synthetic(model))
            report, _ = self.vela(data)
        except NpuCompileError as exc:
            return OpQuery(n_ops, (f"(whole graph: {exc})",), "compiler")
        refused = self.refusal(report)  # its operator refusal only: memory is the memory check's
        if isinstance(refused, UnsupportedOperator):
            return OpQuery(n_ops, (f"(whole graph: {refused})",), "Vela")
        return OpQuery(n_ops, (), "Vela")


@functools.cache
def _worker_digest() -> str:
    """The conversion code's own digest: a changed worker converts anew."""
    return hashlib.sha256(TOOLCHAIN.worker_path.read_bytes()).hexdigest()[:12]


def synthetic(model: onnx.ModelProto, samples: int = QUERY_SAMPLES) -> list[dict[str, np.ndarray]]:
    """Feeds of ``model``'s shapes in [0, 1): calibration for a conversion whose scales nobody reads."""
    rng = np.random.default_rng(0)
    return [{t.name: rng.random(t.shape, dtype=np.float32) for t in io_infos(model)[0]} for _ in range(samples)]


class EthosUBoardBackend(Backend):
    """The board: a bundle's ``_vela.tflite`` units on LiteRT with the Ethos-U delegate (the NPU), no toolchain."""

    name = "ethos-u-board"
    batch_refusal = "Vela requires batch 1 ('IFM batch size must be 1'): a batch runs as that many calls"
    precisions = ("int8",)
    quantizers = ("tflite",)
    on_accelerator = True  # the board's NPU: measured, never wrapped as a simulation

    def __init__(self, options: EthosUOptions) -> None:
        self.options = options
        self.int8_schemes = options.int8_schemes

    def describe(self) -> str:
        return f"LiteRT with the Ethos-U delegate ({self.options.delegate}) on {self.options.device}"

    def _load(self, model: onnx.ModelProto, v: Variant, artifact: Artifact) -> Converted | None:
        stored, io_data = artifact.get(VELA_SUFFIX), artifact.get(IO_SUFFIX)
        return (stored, TensorMap.parse(io_data, model)) if stored and io_data else None

    def _lower(self, model: onnx.ModelProto, v: Variant, calib: CalibSet | None) -> Converted:
        raise NpuCompileError(
            f"no {VELA_SUFFIX} for this unit in the bundle (the board cannot compile): deploy it on a host with "
            "`yolo-edge toolchain install ethos-u`"
        )

    def _build(self, model: onnx.ModelProto, v: Variant, program: Converted) -> Executable:
        stored, io = program
        from ai_edge_litert.interpreter import load_delegate

        try:
            delegate = load_delegate(self.options.delegate)
        except (OSError, ValueError, RuntimeError) as exc:
            raise NpuCompileError(f"cannot load the Ethos-U delegate {self.options.delegate}: {exc}") from None
        return TfliteExecutable(stored, io, model, v, "ethos-u-npu", delegate)


def present(profile: DeviceProfile) -> bool:
    """Whether this is the board (its NPU's device node there): asked without starting the toolchain's worker."""
    options = profile.runtime_options
    return isinstance(options, EthosUOptions) and Path(options.device).exists()


def backend_for(profile: DeviceProfile) -> Backend:
    """The board's delegate where the profile's NPU device exists, else the toolchain on this host, else a one-line
    error; both need LiteRT."""
    options = profile.runtime_options
    assert isinstance(options, EthosUOptions)  # config builds a profile's options as its runtime's
    try:
        import ai_edge_litert.interpreter  # noqa: F401  (what runs every .tflite unit)
    except ImportError:
        raise YoloEdgeError(f"{profile.name} needs LiteRT: {INSTALL}") from None
    if present(profile):
        return EthosUBoardBackend(options)
    worker = Worker(TOOLCHAIN)  # the backend's own: asked first whether it starts
    status = toolchain_status(TOOLCHAIN, worker=worker)
    if not status.usable:
        worker.close()
        raise YoloEdgeError(f"{profile.name} needs Arm's Vela and the TFLite converter: {status.detail}")
    return EthosUBackend(profile, worker)
