"""SplitExecutor: runs the placed units, hands boundary tensors over, times everything, and absorbs
the NPU's failures so that no frame is lost.

Per frame, an NPU unit that raises, exceeds ``unit_timeout_s`` or returns NaN/Inf is re-run on the
CPU in FP32 for that frame. A circuit breaker moves the whole graph to the CPU after K consecutive
NPU failures and lets one half-open probe through after a cool-down; a successful probe closes it.
Performance fallback uses hysteresis: a unit moves to the CPU after N consecutive frames slower
than ``slow_ratio`` times its CPU estimate, confirmed by timing the CPU twin on the Nth frame (a busy
machine slows both; the estimate is refreshed instead), and moves back after M consecutive good probes. Every
decision is a :class:`FallbackEvent` in a JSONL log.

Units are independently callable and thread-safe (``run_unit``), so a pipelined stream can run
different units of different frames in different threads.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace

import numpy as np

from yolo_edge.backends.base import NpuAllocationError, context
from yolo_edge.core.config import BOARD, DeviceProfile, RuntimeConfig
from yolo_edge.devices.cost import transfer_time
from yolo_edge.model.graph import TensorInfo
from yolo_edge.runtime.audit import Auditor
from yolo_edge.runtime.build import BatchPlan
from yolo_edge.runtime.calls import Calls
from yolo_edge.runtime.events import EventLog
from yolo_edge.runtime.units import CircuitBreaker, DeferredTwin, Transfer, Unit, UnitRun


@dataclass(frozen=True)
class FrameResult:
    outputs: dict[str, np.ndarray]
    units: tuple[UnitRun, ...]
    transfers: tuple[Transfer, ...]

    @property
    def transfer_bytes(self) -> int:
        return sum(t.bytes for t in self.transfers)

    @property
    def transfer_modelled_ms(self) -> float:
        return sum(t.modelled_ms for t in self.transfers)

    @property
    def model_ms(self) -> float:
        """Measured wall time of the units (hand-overs are in place)."""
        return sum(s.ms for s in self.units)


def frame_outputs(units: Sequence[Unit]) -> tuple[TensorInfo, ...]:
    """A frame's result: what no later unit reads (the head's raw outputs, which the detector decodes; or output0
    where one unit runs the whole model)."""
    read_later: set[str] = set()
    final: list[TensorInfo] = []
    for unit in reversed(units):
        final[:0] = [t for t in unit.outputs if t.name not in read_later]
        read_later.update(unit.input_names)
    return tuple(final)


class SplitExecutor:
    """Runs the units of a plan frame by frame with the fallbacks above. ``clock`` (seconds, monotonic) times
    the accelerator calls for the hysteresis and the breaker's cool-down; tests inject a fake one. ``as_placed``:
    no unit moves to the CPU for being slow (a failing accelerator still falls back): what the verdict, val and the
    gate measure, so a busy machine changes none of their figures. ``owns``: what compiled the units (a builder),
    closed with the executor; ``borrowed``: the units' executables belong to a builder the caller closes later (a
    deploy's, shared by the search's trials): the executor closes neither."""

    def __init__(
        self,
        units: Sequence[Unit],
        cfg: RuntimeConfig,
        profile: DeviceProfile | None = None,
        events: EventLog | None = None,
        clock: Callable[[], float] = time.perf_counter,
        owns: ExitStack | None = None,
        as_placed: bool = False,
        borrowed: bool = False,
    ) -> None:
        self.units = list(units)
        self._owned = owns or ExitStack()  # what the units were compiled by (a builder): closed after them
        self._borrowed = borrowed or owns is not None  # the units' executables are closed by what compiled them
        self.profile = profile
        # a simulated board: its CPU phases (letterbox, NMS; the units' board_cpu_s) modelled, as its accelerator is;
        # found once, by the builder that compiled the units
        self.board = self.units[0].board
        # how its unit times are obtained (config.FrameKind): a simulated board's modelled, else measured
        self.latency_kind = (
            BOARD
            if self.board is not None
            else "modelled NPU + measured CPU"
            if any(u.npu is not None and u.npu.modelled_s is not None for u in self.units)
            else "measured"
        )
        self.events = events or EventLog()
        self.events.latency = self.latency_kind
        self.clock = clock
        self.breaker = CircuitBreaker(cfg.breaker_failures, cfg.breaker_cooldown_s, self.events, clock)
        self.calls = Calls(cfg, self.events, self.breaker, clock)  # holds the runtime settings (``cfg``)
        self.input_name = self.units[0].input_names[0]  # the image
        self.outputs = frame_outputs(self.units)
        self.output_names = tuple(t.name for t in self.outputs)
        self.placement_problems: list[str] = []  # units that could not be placed as the plan says (Bundle.executor)
        self.batch = BatchPlan()  # frames a call of the accelerator units in a stream (Bundle.executor's batch)
        self.batch_calls: Counter[int] = Counter()  # the batched units' accelerator calls, by frames a call
        # the `cpu` profile's accelerator is the CPU reference itself: moving a unit to the CPU gains nothing,
        # and timing one engine against itself only measures noise
        self.performance_fallback = not as_placed and (profile is None or profile.kind != "cpu")
        # the precision trigger, off the frames' path; not where the figures are measured as placed (val, check)
        self.auditor = Auditor(replace(cfg, audit_every=0) if as_placed else cfg, self.events, self.units, clock)

    @property
    def cfg(self) -> RuntimeConfig:
        """The runtime settings: its calls' deadlines and hysteresis, the probes (set anew: in force at once)."""
        return self.calls.cfg

    @cfg.setter
    def cfg(self, value: RuntimeConfig) -> None:
        self.calls.cfg = value

    @property
    def takes_pixels(self) -> bool:
        """The first unit's accelerator takes the image as the letterbox's pixels (yolo_edge.core.pixels): a frame is
        fed them, and a CPU twin taking that unit over normalises them in its own call."""
        npu = self.units[0].npu
        return npu is not None and self.input_name in npu.pixel_inputs

    def close(self) -> None:
        """Stop the accelerator call pool and release the units' accelerator executables (a toolchain worker's
        compiled graphs), or leave them to the builder they are borrowed from; the executor is not used after this."""
        self.auditor.close()
        self.calls.pool.shutdown()
        for unit in self.units if not self._borrowed else ():
            if unit.npu is not None:
                unit.npu.close()
        self._owned.close()

    def __enter__(self) -> SplitExecutor:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- one unit
    def pool_wait(self, unit: Unit, stop: Callable[[], bool]) -> None:
        """A stream's pool worker before it takes a frame: held while its context is out of ``unit``'s pool (a
        context failing in a row: :mod:`yolo_edge.runtime.pool`), until its probe is due or ``stop()``."""
        self.calls.contexts.wait(unit.name, context(), stop)

    def run_unit(self, unit: Unit, tensors: dict[str, np.ndarray], frame: int) -> tuple[dict[str, np.ndarray], UnitRun]:
        """Run one unit for one frame (NPU with fallback, or CPU); thread-safe; its time to the event log."""
        feeds = {n: tensors[n] for n in unit.input_names}
        spent = 0.0
        if unit.npu is not None and not unit.precision_parked:
            with unit.lock:
                probing = unit.parked
                if probing:
                    unit.since_probe += 1
                    due = unit.since_probe >= self.cfg.probe_every
                    if due:
                        unit.since_probe = 0
            if (not probing or due) and self.breaker.allow():
                outs, spent = self.calls.npu_call(unit, feeds, frame)
                if frame > 0 and isinstance(unit.twin, DeferredTwin):  # the first frame is out: build the fallback
                    unit.twin.start()
                if outs is not None:
                    # a simulated accelerator's time is modelled: how long the host takes to simulate it (Rockchip's
                    # simulator: tens of ms) says nothing about the board, so only a real one can be slow
                    if self.performance_fallback and unit.modelled_s is None:
                        self.calls.hysteresis(unit, spent, probing, frame, feeds)
                    modelled = None if unit.modelled_s is None else unit.modelled_s * 1e3
                    self.auditor.offer(unit, frame, feeds, outs, npu=True)
                    self.events.timed(unit.name, "npu", spent * 1e3 if modelled is None else modelled)
                    return outs, UnitRun(unit.name, "npu", spent * 1e3, modelled)
        outs, run = self.calls.on_cpu(unit, feeds, frame, spent)
        self.auditor.offer(unit, frame, feeds, outs, npu=False)  # a unit a precision event moved here: probed
        return outs, run

    # ---------------------------------------------------------------- a batch of frames
    def run_rows(
        self, unit: Unit, rows: Sequence[dict[str, np.ndarray]], frames: Sequence[int]
    ) -> list[tuple[dict[str, np.ndarray], UnitRun]]:
        """Run one unit for several frames (``rows``: each frame's tensors): one call of its batched executable where
        it takes that many frames and the unit is on its accelerator, else each frame as :meth:`run_unit` runs it.
        The grain of a fallback is the row: a row with NaN/Inf re-runs alone on the CPU twin, a call that fails or
        times out re-runs each of its rows there (the breaker counts calls), and an allocation failure halves the
        batch (``Calls.shrink``) and runs these rows a frame a call on the accelerator, never on the CPU for it."""
        batched = unit.batched
        if (
            batched is None
            or len(rows) != unit.batch
            or unit.parked
            or unit.precision_parked
            or unit.npu is None
            or not self.breaker.allow()
        ):
            if batched is not None:
                self.batch_calls[1] += len(rows)
            return [self.run_unit(unit, r, f) for r, f in zip(rows, frames)]
        feeds = {n: np.concatenate([r[n] for r in rows]) for n in unit.input_names}
        try:
            outs, per_row = self.calls.batch_call(unit, batched, feeds, frames)
        except NpuAllocationError:  # the batch shrank: these frames a frame a call, still on the accelerator
            return [self.run_unit(unit, r, f) for r, f in zip(rows, frames)]
        if outs is None:  # the call failed: each of its frames re-runs on the CPU
            return [self.calls.on_cpu(unit, r, f, per_row) for r, f in zip(rows, frames)]
        self.batch_calls[len(rows)] += 1
        if self.performance_fallback and unit.modelled_s is None:
            self.calls.hysteresis(unit, per_row, False, frames[0], rows[0])  # a call's time a row against a frame's
        return self._rows_out(unit, rows, frames, outs, per_row)

    def _rows_out(
        self,
        unit: Unit,
        rows: Sequence[dict[str, np.ndarray]],
        frames: Sequence[int],
        outs: dict[str, np.ndarray],
        per_row: float,
    ) -> list[tuple[dict[str, np.ndarray], UnitRun]]:
        """A batched call's ``outs`` cut into its frames, each judged alone: a row with NaN/Inf re-runs on the CPU twin
        (its event names the frame); the breaker counts the call; the audit samples one good row."""
        split = [{k: v[i : i + 1] for k, v in outs.items()} for i in range(len(rows))]
        bad = [i for i, o in enumerate(split) if not all(np.isfinite(a).all() for a in o.values())]
        self.breaker.record(not bad, frames[0], unit.name, "nan" if bad else None)
        batched = unit.batched
        modelled = None if batched is None or batched.modelled_s is None else batched.modelled_s * 1e3 / len(rows)
        done: list[tuple[dict[str, np.ndarray], UnitRun]] = []
        for i, (row, f) in enumerate(zip(rows, frames)):
            if i in bad:
                self.events.add(f, unit.name, "nan", "retry_cpu", f"NaN/Inf in row {i} of a batch of {len(rows)}")
                done.append(self.calls.on_cpu(unit, row, f, per_row))
                continue
            self.events.timed(unit.name, "npu", per_row * 1e3 if modelled is None else modelled)
            done.append((split[i], UnitRun(unit.name, "npu", per_row * 1e3, modelled)))
        good = next((i for i in range(len(rows)) if i not in bad), None)
        if good is not None:  # the audit samples one row of the call
            self.auditor.offer(unit, frames[good], rows[good], split[good], npu=True)
        return done

    # ---------------------------------------------------------------- one frame
    def run(self, feeds: dict[str, np.ndarray], frame: int = 0) -> FrameResult:
        tensors = dict(feeds)
        runs = []
        for unit in self.units:
            outs, run = self.run_unit(unit, tensors, frame)
            tensors.update(outs)
            runs.append(run)
        for unit in self.units:  # the frame is out: build the deferred fallbacks now
            if isinstance(unit.twin, DeferredTwin):
                unit.twin.start()
        return self.result(tensors, runs)

    def result(self, tensors: dict[str, np.ndarray], runs: Sequence[UnitRun]) -> FrameResult:
        """A frame's result from its units' ``runs`` (in the units' order, by this executor or a stream's stages)
        and every tensor they saw: its outputs, and its hand-overs (:func:`_hand_overs`)."""
        assert [r.unit for r in runs] == [u.name for u in self.units], "a run per unit, in order"
        transfers = _hand_overs(self, tensors, runs)
        return FrameResult({n: tensors[n] for n in self.output_names}, tuple(runs), transfers)


def _hand_overs(ex: SplitExecutor, tensors: dict[str, np.ndarray], runs: Sequence[UnitRun]) -> tuple[Transfer, ...]:
    """Each tensor read by a unit on another device than the one holding it (decode and NMS on the CPU), by
    boundary, priced over the profile's link (read in place on the host: nothing more there)."""
    where = {ex.input_name: "cpu"}  # device holding each tensor
    owner = {ex.input_name: "input"}  # unit that produced it
    moved: dict[str, list[float]] = {}  # boundary -> [bytes, modelled seconds]

    def hand_over(name: str, boundary: str) -> None:
        n_bytes = tensors[name].nbytes
        acc = moved.setdefault(boundary, [0, 0.0])
        acc[0] += n_bytes
        acc[1] += transfer_time(n_bytes, ex.profile.link) if ex.profile is not None else 0.0

    for unit, run in zip(ex.units, runs):
        for name in unit.input_names:
            if where[name] != run.device:
                hand_over(name, f"{owner[name]}->{unit.name}")
                where[name] = run.device
        where.update({n: run.device for n in unit.output_names})
        owner.update({n: unit.name for n in unit.output_names})
    for name in ex.output_names:
        if where[name] != "cpu":
            hand_over(name, f"{owner[name]}->nms")
    return tuple(Transfer(k, int(v[0]), v[1] * 1e3) for k, v in moved.items())
