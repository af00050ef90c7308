"""The runtime's units: one executable step of a frame (a subgraph, fused subgraphs, or an op-level piece) with its
FP32 CPU twin (deferred off the path to the first frame), the circuit breaker that moves the whole graph to the CPU,
and what a unit's run and a boundary hand-over record.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import onnx

from yolo_edge.backends.base import Executable
from yolo_edge.core.config import Device
from yolo_edge.devices.board import BoardCpu
from yolo_edge.model.graph import TensorInfo
from yolo_edge.runtime.events import EventLog, Trigger


class CircuitBreaker:
    """closed -> (K consecutive failures) -> open -> (cool-down) -> half_open probe -> closed | open."""

    def __init__(
        self, failures: int, cooldown_s: float, events: EventLog, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.failures = failures
        self.cooldown_s = cooldown_s
        self.events = events
        self.clock = clock
        self.state = "closed"
        self.consecutive = 0
        self.opened_at = 0.0
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            if self.state == "open" and self.clock() - self.opened_at >= self.cooldown_s:
                self.state = "half_open"
            return self.state != "open"

    def record(self, ok: bool, frame: int, unit: str, trigger: Trigger | None) -> None:
        with self._lock:
            if ok:
                self.consecutive = 0
                if self.state == "half_open":
                    self.state = "closed"
                    self.events.add(frame, unit, "recovered", "close_breaker", "half-open probe succeeded")
                return
            self.consecutive += 1
            if self.state == "half_open":
                self.state, self.opened_at = "open", self.clock()
                self.events.add(frame, unit, trigger or "runtime_error", "reopen_breaker", "half-open probe failed")
            elif self.state == "closed" and self.consecutive >= self.failures:
                self.state, self.opened_at = "open", self.clock()
                self.events.add(
                    frame,
                    unit,
                    trigger or "runtime_error",
                    "open_breaker",
                    f"{self.consecutive} consecutive NPU failures: whole graph to the CPU",
                )


class DeferredTwin:
    """A CPU twin compiled off the path to the first frame: on a thread of its own once started (the executor
    starts it after the unit's first frame), or at once when something needs it first (a fallback). ``then``
    runs on that thread after it is built (timing it: the hysteresis' estimate)."""

    def __init__(self, make: Callable[[], Executable]) -> None:
        self._make = make
        self._then: Callable[[Executable], None] = lambda _exe: None
        self._future: Future[Executable] = Future()
        self._started = False
        self._lock = threading.Lock()

    def then(self, after: Callable[[Executable], None]) -> None:
        self._then = after

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        # not a daemon: the interpreter waits for it at exit (a runtime killed mid-compile aborts the process)
        threading.Thread(target=self._build, name="twin", daemon=False).start()

    def _build(self) -> None:
        try:
            exe = self._make()
        except BaseException as exc:  # raised again to whoever asks for the twin
            self._future.set_exception(exc)
            return
        self._future.set_result(exe)
        self._then(exe)

    def result(self) -> Executable:
        self.start()
        return self._future.result()


@dataclass
class Unit:
    """One executable unit (a subgraph, fused subgraphs, or an op-level piece) with its CPU twin. The twin may
    still be compiling (a loaded bundle's accelerator unit: not on the path to the first frame); ``cpu`` waits
    for it, and the hysteresis judges nothing before ``cpu_estimate_s`` is measured."""

    name: str
    subgraphs: tuple[str, ...]  # the subgraphs it runs (of which it is a piece)
    twin: Executable | DeferredTwin
    npu: Executable | None
    cpu_estimate_s: float | None  # the twin's seconds on this machine: what the hysteresis judges against
    modelled_s: float | None = None  # simulated NPU: modelled latency
    board_cpu_s: float | None = None  # a simulated board: the twin's modelled seconds on the board's CPU
    board: BoardCpu | None = None  # that board's CPU (its builder's), which the executor hands the detector
    parked: bool = False
    audit_floor: float | None = None  # the lowest cosine with its FP32 twin the deploy accepted (audit.py)
    graph: onnx.ModelProto | None = None  # its FP32 graph, which the audit compiles its own twin of
    precision_parked: bool = False  # moved to the CPU by a precision event: only audits run the accelerator
    # the accelerator executable taking ``batch`` frames a call (run --batch; None: each frame a call of ``npu``) and
    # what compiles it at another batch (an allocation failure at run time halves it)
    batched: Executable | None = None
    rebatch: Callable[[int], Executable] | None = None
    slow_run: list[float] = field(default_factory=list)  # accelerator seconds of the current run of slow frames
    good_probes: int = 0
    since_probe: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def cpu(self) -> Executable:
        """The FP32 CPU twin (compiled now, or waited for, if it is deferred)."""
        return self.twin.result() if isinstance(self.twin, DeferredTwin) else self.twin

    @property
    def _shape(self) -> Executable:
        """An executable with this unit's inputs and outputs, without waiting for a deferred twin."""
        return self.npu if isinstance(self.twin, DeferredTwin) and self.npu is not None else self.cpu

    @property
    def batch(self) -> int:
        """Frames one accelerator call takes (1 without a batched executable)."""
        return 1 if self.batched is None else self.batched.inputs[0].shape[0]

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self._shape.inputs]

    @property
    def outputs(self) -> tuple[TensorInfo, ...]:
        return self._shape.outputs

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]


@dataclass(frozen=True)
class UnitRun:
    unit: str
    device: Device
    ms: float  # measured wall time of the run that produced the result (plus a failed NPU try, if any)
    modelled_ms: float | None


@dataclass(frozen=True)
class Transfer:
    """One boundary hand-over in a frame: ``producer -> consumer`` (``input`` for the image). On the host it
    costs nothing more: every backend returns host arrays, read in place by the next unit (its copy out of
    the accelerator is inside that unit's time). Over the profile's link it takes ``modelled_ms``."""

    boundary: str
    bytes: int
    modelled_ms: float  # over the profile's link (0 without a profile)
