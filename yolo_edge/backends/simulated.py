"""Simulated NPU: hardware that is not present, as honestly as it can be done without it.

Numerics run on a real low-precision backend (INT8 QDQ or FP16/BF16 kernels); the profile's op list
and memory limits are enforced at compile time (:class:`UnsupportedOperator`, :class:`NpuOutOfMemory`);
latency is modelled by the cost model and reported beside the measured host time; and faults can be
injected (errors, NaN outputs, hangs), deterministic from a seed, to exercise the runtime fallback.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
import onnx

from yolo_edge.backends.base import (
    Backend,
    CalibSet,
    Executable,
    Feeds,
    NpuAllocationError,
    NpuError,
    NpuOutOfMemory,
    UnsupportedOperator,
    context,
    emulating,
)
from yolo_edge.core.config import DeviceProfile, Faults, Variant
from yolo_edge.devices.cost import npu_time
from yolo_edge.devices.limits import memory_use, memory_violation, unsupported_ops
from yolo_edge.model.graph import GraphInfo


class FaultInjector:
    """Draws one fault (or none) per call from a seeded generator; thread-safe, so deterministic per call order."""

    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        self._rng = np.random.default_rng(faults.seed)
        self._lock = threading.Lock()
        self.injected = {"error": 0, "nan": 0, "hang": 0, "degrade": 0, "oom": 0}
        self.calls = 0

    def draw(self) -> str | None:
        f = self.faults
        with self._lock:
            u = float(self._rng.random())
            kind = None
            if f.burst_start <= self.calls < f.burst_start + f.burst_len:
                kind = f.burst_kind
            elif u < f.error_rate:
                kind = "error"
            elif u < f.error_rate + f.nan_rate:
                kind = "nan"
            elif u < f.error_rate + f.nan_rate + f.hang_rate:
                kind = "hang"
            elif u < f.error_rate + f.nan_rate + f.hang_rate + f.degrade_rate:
                kind = "degrade"
            self.calls += 1
            if kind:
                self.injected[kind] += 1
            return kind


FIRST_CALL_SLACK_S = 30.0  # a simulator's first call (nothing measured yet): allocation, graph finalisation


class SimulatedExecutable(Executable):
    def __init__(
        self, inner: Executable, modelled_s: float, injector: FaultInjector, hang_s: float, device: str
    ) -> None:
        super().__init__(inner.inputs, inner.outputs, inner.variant, device, inner.model)
        self.inner = inner
        self.modelled_s: float | None = modelled_s
        self.memory_report = inner.memory_report
        self.injector = injector
        self.hang_s = hang_s
        self._numerics_s: float | None = None  # the host's own time for the last call's numerics
        self._called = False  # a call has started (it may never answer)
        self._computing = 0  # calls whose numerics run on this host now (host_busy)
        self._count_lock = threading.Lock()
        self.all_cores = False  # whether one context spans all the accelerator's cores
        self.gap_s = 0.0  # a call's time off its core (the board's call overhead), its context held
        # the accelerator's cores, shared by the board's units: emulated calls of a core's contexts take turns on it
        self.core_locks: list[threading.Lock] = [threading.Lock()]

    @property
    def cores(self) -> int:
        return len(self.core_locks)

    def _faulty(self) -> bool:
        """Whether this call may draw a fault: every call, or where the faults are one core's, a call of a context
        on that core (one context on all the cores uses it too)."""
        core = self.injector.faults.core
        return core is None or self.all_cores or context() % self.cores == core

    def _core(self) -> AbstractContextManager[object]:
        """The core this thread's context runs on (``k`` modulo the cores), held while a call computes there; one
        context on all the cores holds none of its own."""
        return nullcontext() if self.all_cores else self.core_locks[context() % self.cores]

    @property
    def host_slack_s(self) -> float:
        """Three times the numerics' last wall time on this host (the first call: FIRST_CALL_SLACK_S): a simulator
        slow on a loaded host is not a hung board, while an injected hang (``hang_s`` on top) still times out. A
        first call that never answered spends the first-call slack once: later calls get none until one answers
        (a hung unit times out each frame after ``unit_timeout_s``, not after 30 s)."""
        if self._numerics_s is not None:
            return 3 * self._numerics_s
        return 0.0 if self._called else FIRST_CALL_SLACK_S

    @property
    def host_busy(self) -> bool:
        return self._computing > 0

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self._called = True
        fault = self.injector.draw() if self._faulty() else None
        if fault == "error":
            raise NpuError("injected NPU error")
        if fault == "oom":
            raise NpuAllocationError("injected allocation failure: no memory for this call's buffers")
        if fault == "hang":
            time.sleep(self.hang_s)
        board_s = self.modelled_s if emulating() else None  # the call takes the board's time (run --emulate-latency)
        if board_s is not None:  # as the board model runs it: the context off its core for the call overhead
            time.sleep(self.gap_s)
        with self._core() if board_s is not None else nullcontext():  # then on its core
            t0 = time.perf_counter()
            with self._count_lock:
                self._computing += 1
            try:
                outs = self.inner.run(feeds)
            finally:
                with self._count_lock:
                    self._computing -= 1
            self._numerics_s = time.perf_counter() - t0
            if board_s is not None:  # the rest of the modelled time, the core held
                time.sleep(max(0.0, board_s - self._numerics_s))
        if fault == "nan":  # in one frame's row of a batch (the call's number picks it)
            first = self.outputs[0].name
            outs[first] = outs[first].copy()
            row = outs[first][self.injector.calls % len(outs[first])].reshape(-1)
            row[:: max(1, row.size // 7)] = np.nan
        if fault == "degrade":  # silently wrong: every output noised, finite, nothing the NaN check sees
            rng = np.random.default_rng(self.injector.calls)
            noise = self.injector.faults.degrade_noise
            outs = {k: (v * (1 + noise * rng.standard_normal(v.shape))).astype(v.dtype) for k, v in outs.items()}
        return outs

    def warm_up(self, feeds: Feeds, runs: int) -> None:
        """The numerics run directly: no injected fault is drawn (their time is the first calls' slack)."""
        t0 = time.perf_counter()
        self.inner.warm_up(feeds, runs)
        if runs:
            self._numerics_s = (time.perf_counter() - t0) / runs

    def artifact_files(self) -> dict[str, bytes]:
        return self.inner.artifact_files()

    def close(self) -> None:
        self.inner.close()


class SimulatedNpu(Backend):
    name = "simulated"

    def __init__(self, profile: DeviceProfile, numerics: Backend, faults: Faults | None = None) -> None:
        self.profile = profile
        self.numerics = numerics
        self.precisions = tuple(p for p in profile.precisions if p in numerics.precisions)
        self.int8_schemes = numerics.int8_schemes
        self.quantizers = numerics.quantizers
        self.fallback_quantizers = numerics.fallback_quantizers
        self.kept_precision = numerics.kept_precision
        self.recipe = numerics.recipe  # the numerics' vendor's recipe, its latency the board's
        self.max_batch, self.batch_refusal = numerics.max_batch, numerics.batch_refusal  # the numerics' compiler's
        self.faults = faults or profile.faults
        self.injector = FaultInjector(self.faults)
        self.core_locks = [threading.Lock() for _ in range(profile.npu_cores)]  # emulated calls take turns on them

    def is_reference(self, variant: Variant) -> bool:
        """Never: a simulated unit is the board's, its latency modelled, even where its numerics are the CPU's."""
        return False

    def _admit(self, model: onnx.ModelProto, v: Variant) -> None:
        """The profile's op list and memory budget first, then whatever the numerics backend refuses up front."""
        info = GraphInfo.of(model)
        bad = unsupported_ops(info, self.profile)
        if bad:
            raise UnsupportedOperator(
                f"{self.profile.name}: {bad[0].node}: {bad[0].reason}"
                + (f" (+{len(bad) - 1} more)" if len(bad) > 1 else "")
            )
        why = memory_violation(memory_use(info, v.precision, v.scheme), self.profile)
        if why:
            raise NpuOutOfMemory(f"{self.profile.name}: {why}")
        self.numerics._admit(model, v)

    def _lower(self, model: onnx.ModelProto, v: Variant, calib: CalibSet | None) -> Any:
        return self.numerics._lower(model, v, calib)  # a step every backend implements: not a hook with a default

    def _build(self, model: onnx.ModelProto, v: Variant, program: Any) -> Executable:
        """The numerics backend's executable, its latency modelled for the profile (or the vendor compiler's own
        estimate, Vela's, where it makes one)."""
        inner = self.numerics._build(model, v, program)
        modelled = inner.modelled_s  # the vendor compiler's estimate, where it makes one
        if modelled is None:
            kept = self.kept_precision or v.precision
            modelled = npu_time(GraphInfo.of(model), self.profile, v.precision, v.kept, kept, v.scheme).total_s
        cores, multicore = self.profile.npu_cores, self.profile.multicore
        modelled *= multicore.share(cores)  # one context on all the cores: a call split across them
        exe = SimulatedExecutable(inner, modelled, self.injector, self.faults.hang_s, f"sim:{self.profile.name}")
        exe.concurrency = multicore.contexts(cores)
        exe.all_cores, exe.gap_s, exe.core_locks = multicore.all_cores, multicore.call_gap_us * 1e-6, self.core_locks
        return exe


def _forwarded(name: str) -> Callable[..., Any]:
    def forward(self: SimulatedNpu, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.numerics, name)(*args, **kwargs)

    forward.__name__, forward.__qualname__ = name, f"SimulatedNpu.{name}"
    forward.__doc__ = f"The numerics backend's own ``{name}``: what a simulated board does not model, it delegates."
    return forward


# every hook Backend declares with a default that the simulated NPU does not define itself (it models admission and
# the build, and is never the CPU reference): the numerics backend's, so a hook added to Backend needs no edit here
FORWARDED = tuple(
    name
    for name, value in vars(Backend).items()
    if callable(value)
    and not name.startswith("__")
    and name not in ("compile", "resolve")  # the template and its validation: the simulated NPU's own, inherited
    and not getattr(value, "__isabstractmethod__", False)
    and name not in vars(SimulatedNpu)
)
for _name in FORWARDED:
    setattr(SimulatedNpu, _name, _forwarded(_name))
