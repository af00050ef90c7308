"""An executor's accelerator calls: each within its deadline (on a daemon pool where the runtime cannot bound its own
call), a failure or NaN to the event log and the circuit breaker, the hysteresis judging a call's speed, and an
allocation failure shrinking a unit's batch. The executor (``runtime.executor``) decides what runs where; this
module makes the calls.
"""

from __future__ import annotations

import queue
import statistics
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import numpy as np

from yolo_edge.backends.base import (
    Executable,
    NpuAllocationError,
    NpuError,
    NpuTimeout,
    context,
    emulating,
    median_run_s,
    on_context,
)
from yolo_edge.core.config import RuntimeConfig
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.runtime.events import EventLog, Trigger
from yolo_edge.runtime.pool import ContextPool
from yolo_edge.runtime.units import CircuitBreaker, Unit, UnitRun


class DaemonPool:
    """Accelerator calls on daemon threads, each call's result a :class:`Future`. Not a ThreadPoolExecutor: the
    interpreter joins those at exit, so one accelerator call that never returns (a hung driver) would keep a
    ``run`` from ever ending after its summary; a daemon thread stuck in such a call is left behind at exit.
    Up to ``workers`` threads, started as calls come; a hung one is replaced by the next idle one."""

    def __init__(self, workers: int, name: str) -> None:
        self.workers, self.name = workers, name
        self._calls: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the accelerator call pool is shut down")
            if self._idle == 0 and len(self._threads) < self.workers:
                t = threading.Thread(target=self._work, name=f"{self.name}-{len(self._threads)}", daemon=True)
                self._threads.append(t)
                t.start()
            else:
                self._idle -= 1 if self._idle else 0
        self._calls.put((future, fn, args))
        return future

    def _work(self) -> None:
        while True:
            item = self._calls.get()
            if item is None:
                return
            future, fn, args = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:  # handed to the caller, which decides (a bug propagates there)
                    future.set_exception(exc)
            with self._lock:
                self._idle += 1

    def shutdown(self) -> None:
        """No more calls; idle threads end, a thread still in a call is left to the process's exit."""
        with self._lock:
            self._closed = True
            threads = len(self._threads)
        for _ in range(threads):
            self._calls.put(None)


def _as_context(k: int, emulate: bool, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on a pool thread as the caller's accelerator context ``k`` (emulating the board or not)."""
    on_context(k, emulate)
    return fn(*args)


def answer_within(call: Future[dict[str, np.ndarray]], limit: float, npu: Executable) -> dict[str, np.ndarray]:
    """A pool call's outputs within ``limit`` seconds, else :class:`FutureTimeout`; past it, waited for as long as a
    simulator is still computing numerics on this host (``npu.host_busy``: a loaded host's wall time is not the
    board's, and must not fire the board's timeout trigger; its worker's own call timeout bounds it)."""
    while True:
        try:
            return call.result(timeout=limit)
        except FutureTimeout:
            if not npu.host_busy:
                raise


class Calls:
    """The accelerator calls of one executor: ``cfg``'s deadlines and hysteresis, failures to ``events`` and the
    ``breaker``, timed by ``clock``; ``pool``: the daemon threads of calls a runtime cannot bound itself."""

    def __init__(
        self, cfg: RuntimeConfig, events: EventLog, breaker: CircuitBreaker, clock: Callable[[], float]
    ) -> None:
        self.cfg, self.events, self.breaker, self.clock = cfg, events, breaker, clock
        self.pool = DaemonPool(8, "npu")
        self.contexts = ContextPool(cfg.breaker_failures, cfg.breaker_cooldown_s, events, clock)

    def limit(self, exe: Executable, frames: int) -> float:
        """Seconds an accelerator call of ``frames`` frames may take (a simulator's own time on this host is not the
        board's: its slack is added)."""
        return self.cfg.unit_timeout_s * frames + exe.host_slack_s

    def call(self, exe: Executable, feeds: dict[str, np.ndarray], limit: float) -> dict[str, np.ndarray]:
        """One accelerator call within ``limit`` seconds (else :class:`NpuTimeout` or ``FutureTimeout``)."""
        if exe.bounded:  # its runtime waits with the deadline and cancels the call past it
            return exe.run(feeds, limit)
        # on a pool thread, given up on past the deadline (a hung driver's thread is left behind), as this thread's
        # context
        return answer_within(self.pool.submit(_as_context, context(), emulating(), exe.run, feeds), limit, exe)

    def npu_call(
        self, unit: Unit, feeds: dict[str, np.ndarray], frame: int
    ) -> tuple[dict[str, np.ndarray] | None, float]:
        """Run the NPU twin with a timeout; returns (outputs or None on failure, seconds spent)."""
        assert unit.npu is not None
        t0 = self.clock()
        limit = self.limit(unit.npu, 1)
        trigger: Trigger | None = None
        try:
            outs = self.call(unit.npu, feeds, limit)
        except (FutureTimeout, NpuTimeout):
            trigger, why = "timeout", f"no answer in {limit:.3g} s"
        except NpuError as exc:  # the accelerator's failure: this frame re-runs on the CPU (a bug propagates)
            trigger, why = "runtime_error", f"{type(exc).__name__}: {exc}"
        elapsed = self.clock() - t0
        if trigger is None and not all(np.isfinite(a).all() for a in outs.values()):
            trigger, why = "nan", "NaN/Inf in the NPU output"
        if trigger is not None:
            self.events.add(frame, unit.name, trigger, "retry_cpu", why)
        self.breaker.record(trigger is None, frame, unit.name, trigger)
        self.contexts.record(unit.name, unit.npu.concurrency, context(), trigger, frame)
        return (None if trigger is not None else outs), elapsed

    def hysteresis(self, unit: Unit, elapsed: float, probing: bool, frame: int, feeds: dict[str, np.ndarray]) -> None:
        if unit.cpu_estimate_s is None:  # not estimated: nothing to judge against (a CPU profile, modelled latency)
            return
        slow = elapsed > self.cfg.slow_ratio * unit.cpu_estimate_s
        with unit.lock:
            if probing:
                unit.good_probes = 0 if slow else unit.good_probes + 1
                if unit.good_probes >= self.cfg.recover_probes:
                    unit.parked, unit.good_probes, unit.slow_run = False, 0, []
                    self.events.add(
                        frame, unit.name, "recovered", "move_to_npu", f"{self.cfg.recover_probes} good probes in a row"
                    )
                return
            unit.slow_run = [*unit.slow_run, elapsed] if slow else []
            if len(unit.slow_run) < self.cfg.slow_frames:
                return
            npu_s, unit.slow_run = statistics.median(unit.slow_run), []
            # Before moving: time the CPU twin now, on this frame. A busy machine slows the CPU as much as the
            # accelerator; measured against an estimate from a quiet minute, that would move the unit for nothing.
            cpu_now_s = median_run_s(unit.cpu, feeds)
            if npu_s <= self.cfg.slow_ratio * cpu_now_s:
                unit.cpu_estimate_s = cpu_now_s
                return
            unit.parked, unit.since_probe = True, 0
            self.events.add(
                frame,
                unit.name,
                "performance",
                "move_to_cpu",
                f"{self.cfg.slow_frames} frames over {self.cfg.slow_ratio}x the CPU estimate: the accelerator's median "
                f"{npu_s * 1e3:.2f} ms against {cpu_now_s * 1e3:.2f} ms for the CPU on this frame",
            )

    def batch_call(
        self, unit: Unit, batched: Executable, feeds: dict[str, np.ndarray], frames: Sequence[int]
    ) -> tuple[dict[str, np.ndarray] | None, float]:
        """One call of ``unit``'s ``batched`` executable for ``frames`` (their rows stacked in ``feeds``) within a
        deadline of ``unit_timeout_s`` a frame: its outputs (None where it raised or timed out: an event for each
        frame, the breaker told) and its seconds a frame. An allocation failure shrinks the unit's batch
        (:meth:`shrink`) and is raised for the caller to run the frames a frame a call."""
        t0 = self.clock()
        limit = self.limit(batched, len(frames))
        try:
            outs = self.call(batched, feeds, limit)
        except NpuAllocationError as exc:
            self.shrink(unit, batched, frames, exc)
            raise
        except (FutureTimeout, NpuError) as exc:  # NpuTimeout is an NpuError
            timeout = isinstance(exc, (FutureTimeout, NpuTimeout))
            trigger: Trigger = "timeout" if timeout else "runtime_error"
            why = f"no answer in {limit:.3g} s" if timeout else f"{type(exc).__name__}: {exc}"
            for f in frames:
                self.events.add(f, unit.name, trigger, "retry_cpu", f"a call of {len(frames)} frames: {why}")
            self.breaker.record(False, frames[0], unit.name, trigger)
            return None, (self.clock() - t0) / len(frames)
        return outs, (self.clock() - t0) / len(frames)

    def shrink(self, unit: Unit, batched: Executable, frames: Sequence[int], exc: NpuAllocationError) -> None:
        """An allocation failure at run time: the unit's batch halves (compiled again; 1: each frame a call of its
        batch-1 executable), and a ``memory`` event says what failed and the batch chosen."""
        size = len(frames)
        half = size // 2
        with unit.lock:
            if unit.batched is not batched:  # shrunk meanwhile by another worker
                return
            unit.batched = unit.rebatch(half) if half > 1 and unit.rebatch is not None else None
        self.events.add(
            frames[0],
            unit.name,
            "memory",
            "shrink_batch",
            f"a call of {size} frames failed to allocate ({exc}); runs at batch {max(1, unit.batch)} from now on, "
            f"these {size} frames a frame a call on the accelerator",
        )

    def on_cpu(
        self, unit: Unit, row: dict[str, np.ndarray], frame: int, spent: float
    ) -> tuple[dict[str, np.ndarray], UnitRun]:
        """One frame's unit on its CPU twin after its accelerator call failed (``spent`` seconds of it its share)."""
        feeds = {n: row[n] for n in unit.input_names}
        try:
            outs = unit.cpu.run(feeds)
        except NpuError as exc:  # the CPU runtime failed: no fallback is left (a damaged graph, no memory for it)
            raise YoloEdgeError(
                f"unit {unit.name} failed on the CPU, where nothing can take it over ({exc}); its graph cannot run "
                "here: deploy it again, or free memory"
            ) from None
        board = None if unit.board_cpu_s is None else unit.board_cpu_s * 1e3
        ms = (spent + unit.cpu.last_run_s) * 1e3
        self.events.timed(unit.name, "cpu", ms if board is None else board)
        return outs, UnitRun(unit.name, "cpu", ms, board)
