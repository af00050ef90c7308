"""One builder for a deploy: the FP32 CPU backend, the profile's accelerator backend, the board model and every
executable compiled through them, each compiled once.

The checks, the planner, the search's trials, the reference and the whole-graph plan all compile through one
:class:`Builder`: the same graph at the same variant on the same calibration (or the same stored artifact) is
the same executable for all of them, so nothing compiles the same graph twice in a deploy (an FP32 subgraph was
compiled up to nine times, once per trial and per timing, before). The builder owns what it compiled and closes
it, then its backends, on :meth:`Builder.close`; an executor running units it compiled borrows them
(``SplitExecutor(borrowed=True)``).

Example:
    >>> with Builder(load_profile("host-lowp")) as builder:  # doctest: +SKIP
    ...     exe = builder.fp32(model)  # the CPU reference of model, compiled once
    ...     low = builder.compile(model, Variant("int8", "u8", "nncf"), calib)  # on the accelerator
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from contextlib import ExitStack
from functools import cached_property

import onnx

from yolo_edge.backends import board_model, cpu_backend, create_backend
from yolo_edge.backends.base import (
    FP32_SUFFIX,
    Artifact,
    Backend,
    CalibSet,
    Executable,
    NpuOutOfMemory,
    hash_feeds,
)
from yolo_edge.core.config import DeviceProfile, Variant
from yolo_edge.devices.board import BoardCpu

UNQUANTIZED = ("fp32", "fp16", "bf16")  # precisions whose compile reads no calibration


class Builder:
    """Compiles for one device profile (``profile`` None: the CPU reference only). ``npu``: an accelerator backend
    made elsewhere (a test's), closed by its maker, not here; else the profile's, created when first needed."""

    def __init__(self, profile: DeviceProfile | None, npu: Backend | None = None) -> None:
        self.profile = profile
        self._stack = ExitStack()
        self._cpu: Backend | None = None
        self._npu = npu
        self._compiled: dict[Key, Executable] = {}
        self._refused: dict[Key, NpuOutOfMemory] = {}
        self.compiles = 0  # graphs compiled (cache misses): what a deploy's compile-count test reads
        self._lock = threading.RLock()  # a loaded bundle compiles its CPU twins on a thread of their own

    @property
    def cpu(self) -> Backend:
        """onnxruntime on the CPU in FP32: the reference and the fallback."""
        with self._lock:
            if self._cpu is None:
                self._cpu = self._stack.enter_context(cpu_backend())
            return self._cpu

    @property
    def npu(self) -> Backend:
        """The profile's accelerator backend (a simulated NPU over its runtime where the board is simulated)."""
        with self._lock:
            if self._npu is None:
                assert self.profile is not None, "a builder without a profile compiles for the CPU only"
                self._npu = self._stack.enter_context(create_backend(self.profile))
            return self._npu

    @cached_property
    def board(self) -> BoardCpu | None:
        """The simulated board's CPU (None where latency is measured), found once."""
        return board_model(self.profile, self._npu) if self.profile is not None else None

    def fp32(self, model: onnx.ModelProto, artifact: Artifact | None = None) -> Executable:
        """``model`` compiled for the CPU in FP32 (``artifact``: its stored FP32 graph)."""
        return self._cached("cpu", model, Variant("fp32"), None, artifact, lambda: self.cpu)

    def compile(
        self,
        model: onnx.ModelProto,
        variant: Variant,
        calib: CalibSet | None = None,
        artifact: Artifact | None = None,
        batch: int = 1,
    ) -> Executable:
        """``model`` compiled on the accelerator at ``variant``, ``batch`` frames a call (:meth:`Backend.compile`)."""
        return self._cached("npu", model, variant, calib, artifact, lambda: self.npu, batch)

    def refusal(self, model: onnx.ModelProto, variant: Variant, calib: CalibSet | None) -> NpuOutOfMemory | None:
        """The accelerator compiler's memory refusal of ``model`` at ``variant``, where a compile here met one
        (nothing is compiled to find out)."""
        key = _key("npu", model, self.npu.resolve(variant), calib, None)
        with self._lock:
            return self._refused.get(key)

    def _cached(
        self,
        where: str,
        model: onnx.ModelProto,
        variant: Variant,
        calib: CalibSet | None,
        artifact: Artifact | None,
        backend: Callable[[], Backend],
        batch: int = 1,
    ) -> Executable:
        # the lock guards the cache, never a compile: a compile may read a lazy calibration set that waits on a
        # CPU twin compiling through this builder on a thread of its own
        chosen = backend()
        resolved = chosen.resolve(variant)
        key = _key(where, model, resolved, calib, artifact, batch)
        with self._lock:
            found, refused = self._compiled.get(key), self._refused.get(key)
        if found is not None:
            return found
        if refused is not None:  # the compiler's memory refusal is as deterministic as its output: not asked twice
            raise refused
        try:
            exe = (
                chosen.compile(model, resolved, calib, artifact)
                if batch == 1
                else chosen.compile(model, resolved, calib, artifact, batch=batch)
            )
        except NpuOutOfMemory as exc:
            with self._lock:
                self._refused[key] = exc
                if exc.numerics is not None:
                    self._stack.callback(exc.numerics.close)
            raise
        with self._lock:
            if key in self._compiled:  # compiled meanwhile on another thread: one copy is kept
                exe.close()
                return self._compiled[key]
            self._stack.callback(exe.close)
            self._compiled[key] = exe
            self.compiles += 1
        return exe

    def close(self) -> None:
        """Close every executable compiled here, then the backends (last in, first out)."""
        with self._lock:
            self._compiled.clear()
            self._refused.clear()
            self._stack.close()

    def __enter__(self) -> Builder:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


Key = tuple[str, str, Variant, str, int]  # where, the graph, the variant, what else it reads, the batch


def _key(
    where: str,
    model: onnx.ModelProto,
    resolved: Variant,
    calib: CalibSet | None,
    artifact: Artifact | None,
    batch: int = 1,
) -> Key:
    # a stored FP32 graph is what the backend compiles (its bytes are in the key's inputs): not serialized again
    graph = "stored" if artifact and FP32_SUFFIX in artifact else _digest(model)
    return (where, graph, resolved, _inputs(resolved, calib, artifact), batch)


def _digest(model: onnx.ModelProto) -> str:
    return hashlib.blake2b(model.SerializeToString(), digest_size=16).hexdigest()


def _inputs(variant: Variant, calib: CalibSet | None, artifact: Artifact | None) -> str:
    """What a compile reads besides the graph: the stored artifact's bytes, and the calibration tensors where the
    variant quantizes and nothing compiled is stored (read only then: a bundle's compiled units load without
    making their calibration set)."""
    h = hashlib.blake2b(digest_size=16)
    stored = artifact or {}
    for suffix in sorted(stored):
        h.update(suffix.encode())
        h.update(stored[suffix])
    compiled = any(suffix != FP32_SUFFIX for suffix in stored)
    if not compiled and variant.precision not in UNQUANTIZED:
        hash_feeds(h, calib or [])
    return h.hexdigest()
