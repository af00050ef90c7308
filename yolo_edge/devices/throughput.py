"""Many cameras, one board: how many frames a second a plan serves, and at what capture-to-result latency.

A frame passes the stages the stream engine runs (``pipeline.engine``): the letterbox, each unit in order, the
decode and NMS. A CPU stage is one worker thread; an accelerator unit's stage is a pool of contexts. How the
accelerator's cores serve the contexts is the profile's ``multicore`` model, fitted to published figures:

- **contexts pinned to cores** (one or two a core): a call holds its core for the unit's modelled time, then the
  context spends ``call_gap_us`` and the call's transfers off the core (the runtime's call overhead, the host reading
  and writing its tensors); with one context a core the core idles through them, with two the other context's call
  fills them (Rockchip's figures: one context a core 98 % of two, more add nothing);
- **one context on all cores** (Rockchip's tri-core mode): one call at a time, its time split as Amdahl's law says
  with ``parallel_fraction`` of it across the cores (only some operators run on several cores).

The stages are simulated event by event (:func:`simulate`): N streams each capturing at F frames a second from its
own phase (cameras are not synchronised; the phases seeded), every frame delivered (nothing dropped: a stage behind
shows as latency), so the aggregate a plan sustains and the capture-to-result p95 under that load come from the same
run. Every figure here is modelled (a simulated board's phases), and labelled so wherever it is shown.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from yolo_edge.core.codec import plain
from yolo_edge.core.config import MAX_STREAMS, DeviceProfile
from yolo_edge.devices.limits import MemoryUse

CAMERA_FPS = 30.0  # the rate "how many cameras" is counted at where deploy was not asked for one
SECONDS = 6.0  # the simulated capture: long enough for 100 frames a stream at 15 FPS and a p95 over hundreds
WARMUP = 0.2  # the first fraction of frames, while the pipeline fills, counts for nothing
Status = Literal["ok", "fails", "not modelled"]


@dataclass(frozen=True)
class Stage:
    """One stage of a frame's path: ``busy_s`` a frame on its CPU worker or on an accelerator core; an accelerator
    call's ``gap_s`` is its context's time off the core (call overhead and transfers)."""

    name: str
    device: Literal["cpu", "npu"]
    busy_s: float
    gap_s: float = 0.0


@dataclass(frozen=True)
class CoreMode:
    """How an accelerator unit's contexts take the cores: ``contexts_per_core`` pinned to each, or one context on all
    of them (``all_cores``)."""

    contexts_per_core: int
    all_cores: bool = False

    def label(self, cores: int) -> str:
        if self.all_cores:
            return f"1 context on all {cores} cores"
        per = "a core" if cores > 1 else "on the core"
        return f"{self.contexts_per_core} context{'s' if self.contexts_per_core > 1 else ''} {per}"

    def contexts(self, cores: int) -> int:
        return 1 if self.all_cores else self.contexts_per_core * cores


@dataclass(frozen=True)
class Served:
    """One way of running a plan's stages, simulated at the asked load: what it sustains and its latency."""

    mode: CoreMode
    cores: int
    capacity_fps: float  # the most frames a second the stages sustain (simulated saturated)
    p50_ms: float
    p95_ms: float  # capture to result, at the asked streams and rate
    utilisation: dict[str, float]  # each accelerator core's and CPU stage's busy share at the asked load
    memory_bytes: int | None  # the accelerator units' contexts together (None: nothing on the accelerator)

    @property
    def bottleneck(self) -> str:
        """The busiest resource at saturation: a CPU stage by name, or the accelerator's cores."""
        return max(self.utilisation, key=lambda k: self.utilisation[k])

    def to_dict(self) -> dict[str, object]:
        return {
            "mode": self.mode.label(self.cores),
            "contexts_per_core": None if self.mode.all_cores else self.mode.contexts_per_core,
            "all_cores": self.mode.all_cores,
            "capacity_fps": self.capacity_fps,
            "p50_ms": self.p50_ms,
            "p95_ms": self.p95_ms,
            "utilisation": dict(self.utilisation),
            "bottleneck": self.bottleneck,
            "memory_mb": None if self.memory_bytes is None else self.memory_bytes / 2**20,
        }


@dataclass(frozen=True)
class Throughput:
    """Whether a plan serves ``streams`` cameras at ``fps`` each, every frame delivered and p95 within the SLA, on
    the accelerator's cores as its ``multicore`` model says; ``max_streams``: how many it serves at that rate."""

    streams: int
    fps: float
    asked: bool  # deploy was asked (--streams or --fps): the verdict judges it
    sla_ms: float
    chosen: Served | None  # the lowest p95 of the modes that serve it (else the one that sustains the most)
    options: tuple[Served, ...]
    max_streams: int
    budget_bytes: int
    held_out_error: float | None  # the multi-core model's error on the published figure it was not fitted to
    status: Status
    reason: str

    @property
    def aggregate_fps(self) -> float:
        return self.streams * self.fps

    def to_dict(self) -> dict[str, object]:
        c = self.chosen
        return plain(
            {
                "streams": self.streams,
                "fps": self.fps,
                "aggregate_fps": self.aggregate_fps,
                "asked": self.asked,
                "status": self.status,
                "reason": self.reason,
                "max_streams": self.max_streams,
                "capacity_fps": None if c is None else c.capacity_fps,
                "contexts_per_core": None if c is None or c.mode.all_cores else c.mode.contexts_per_core,
                "all_cores": None if c is None else c.mode.all_cores,
                "batch": 1,
                "bottleneck": None if c is None else c.bottleneck,
                "p95_ms": None if c is None else c.p95_ms,
                "utilisation": None if c is None else dict(c.utilisation),
                "memory_mb": None if c is None or c.memory_bytes is None else c.memory_bytes / 2**20,
                "budget_mb": self.budget_bytes / 2**20,
                "options": [o.to_dict() for o in self.options],
                "held_out_error": self.held_out_error,
                "kind": "modelled (board)",
            }
        )


def modes(profile: DeviceProfile) -> list[CoreMode]:
    """The ways the profile's cores can take an accelerator unit's contexts."""
    out = [CoreMode(1)]
    if profile.multicore.call_gap_us > 0:  # a second context a core fills the gap; without one it adds nothing
        out.append(CoreMode(2))
    if profile.npu_cores > 1 and profile.multicore.parallel_fraction > 0:
        out.append(CoreMode(1, all_cores=True))
    return out


def stages(phases_ms: Mapping[str, float], npu_units: Sequence[str], profile: DeviceProfile) -> list[Stage]:
    """A frame's stages from a plan's phases (median milliseconds, in the order the frame passes them, as the
    profile ran them): the ``npu_units`` on the accelerator at one core's time (a profile running one context on all
    cores measured the Amdahl share of it), with the call overhead and their share of the transfers off the core."""
    npu = [n for n in phases_ms if n in npu_units]
    transfers = phases_ms.get("transfers", 0.0) / 1e3
    gap = profile.multicore.call_gap_us * 1e-6 + (transfers / len(npu) if npu else 0.0)
    one_core = 1 / profile.multicore.share(profile.npu_cores)
    return [
        Stage(n, "npu", ms / 1e3 * one_core, gap) if n in npu else Stage(n, "cpu", ms / 1e3)
        for n, ms in phases_ms.items()
        if n != "transfers"
    ]


def on_cores(stage_list: Sequence[Stage], mode: CoreMode, profile: DeviceProfile) -> list[Stage]:
    """The stages as ``mode`` runs them: on all cores, an accelerator call's time as Amdahl's law splits it."""
    if not mode.all_cores:
        return list(stage_list)
    share = replace(profile.multicore, all_cores=True).share(profile.npu_cores)
    return [replace(s, busy_s=s.busy_s * share) if s.device == "npu" else s for s in stage_list]


def arrivals(streams: int, fps: float, seconds: float, seed: int = 0) -> list[float]:
    """Capture times of ``streams`` cameras at ``fps``, each from its own seeded phase, sorted."""
    rng = random.Random(seed)
    period = 1.0 / fps
    times = []
    for _ in range(streams):
        phase = rng.uniform(0, period)
        times += [phase + i * period for i in range(max(1, int(seconds * fps)))]
    return sorted(times)


def simulate(
    stage_list: Sequence[Stage], mode: CoreMode, cores: int, captured: Sequence[float]
) -> tuple[list[float], dict[str, float], float]:
    """Every frame captured at ``captured`` through the stages: each frame's capture-to-result seconds (in capture
    order), each resource's busy seconds, and the time the last result came out."""
    return _Simulation(stage_list, mode, cores).run(captured)


class _Simulation:
    """The event-by-event run of :func:`simulate`: CPU stages are single FIFO workers; an accelerator stage is a FIFO
    of frames waiting for one of its contexts, each context pinned to a core (or holding all of them), each core a
    FIFO of contexts waiting to compute."""

    def __init__(self, stage_list: Sequence[Stage], mode: CoreMode, cores: int) -> None:
        self.stages = list(stage_list)
        self.cores = 1 if mode.all_cores else cores
        self.contexts = mode.contexts(cores)
        self.events: list[tuple[float, int, str, int, int]] = []  # time, order, what, frame, stage or context
        self.order = 0
        self.busy: dict[str, float] = {}
        self.free_at = {i: 0.0 for i, s in enumerate(self.stages) if s.device == "cpu"}
        self.waiting: dict[int, deque[int]] = {i: deque() for i, s in enumerate(self.stages) if s.device == "npu"}
        self.idle: dict[int, deque[int]] = {i: deque(range(self.contexts)) for i in self.waiting}
        self.core_queue: dict[int, deque[tuple[int, int, int]]] = {c: deque() for c in range(self.cores)}
        self.core_busy = dict.fromkeys(range(self.cores), False)

    def _at(self, t: float, what: str, frame: int, where: int) -> None:
        self.order += 1
        heapq.heappush(self.events, (t, self.order, what, frame, where))

    def _use(self, name: str, seconds: float) -> None:
        self.busy[name] = self.busy.get(name, 0.0) + seconds

    def run(self, captured: Sequence[float]) -> tuple[list[float], dict[str, float], float]:
        done = [math.nan] * len(captured)
        for f, t in enumerate(captured):
            self._at(t, "enter", f, 0)
        end = 0.0
        while self.events:
            t, _, what, f, where = heapq.heappop(self.events)
            if what == "enter":
                if where == len(self.stages):
                    done[f], end = t - captured[f], max(end, t)
                else:
                    self._enter(t, f, where)
            elif what == "core_done":
                self._core_done(t, f, where)
            else:  # the call's gap is over: its context takes the next frame
                self._context_free(t, f, where)
        return done, self.busy, end

    def _enter(self, t: float, f: int, i: int) -> None:
        s = self.stages[i]
        if s.device == "cpu":
            start = max(t, self.free_at[i])
            self.free_at[i] = start + s.busy_s
            self._use(s.name, s.busy_s)
            self._at(start + s.busy_s, "enter", f, i + 1)
            return
        if self.idle[i]:
            self._call(t, f, i, self.idle[i].popleft())
        else:
            self.waiting[i].append(f)

    def _call(self, t: float, f: int, i: int, context: int) -> None:
        core = context % self.cores
        self.core_queue[core].append((f, i, context))
        if not self.core_busy[core]:
            self._compute(t, core)

    def _compute(self, t: float, core: int) -> None:
        f, i, context = self.core_queue[core].popleft()
        self.core_busy[core] = True
        busy = self.stages[i].busy_s
        self._use(f"npu core {core}" if self.cores > 1 else "npu", busy)
        self._at(t + busy, "core_done", f, i * 1000 + context)

    def _core_done(self, t: float, f: int, code: int) -> None:
        i, context = divmod(code, 1000)
        core = context % self.cores
        self.core_busy[core] = False
        if self.core_queue[core]:
            self._compute(t, core)
        self._at(t + self.stages[i].gap_s, "gap_done", f, code)

    def _context_free(self, t: float, f: int, code: int) -> None:
        i, context = divmod(code, 1000)
        self._at(t, "enter", f, i + 1)
        if self.waiting[i]:
            self._call(t, self.waiting[i].popleft(), i, context)
        else:
            self.idle[i].append(context)


def sustained(done: Sequence[float]) -> float:
    """Frames a second of a saturated run (every frame captured at once), past the pipeline's filling: the results
    after the first :data:`WARMUP` share over the time they took."""
    out = sorted(done)
    start = out[int(len(out) * WARMUP)]
    later = sum(1 for d in out if d > start)
    return later / max(out[-1] - start, 1e-12)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def serve(
    stage_list: Sequence[Stage], mode: CoreMode, profile: DeviceProfile, load: tuple[int, float], memory: int | None
) -> Served:
    """``mode`` simulated twice: saturated (every frame at once: what it sustains), and at ``load`` (streams, fps):
    the latency and the utilisation."""
    cores, run = profile.npu_cores, on_cores(stage_list, mode, profile)
    burst = max(60, 12 * mode.contexts(cores))
    latencies, _, _ = simulate(run, mode, cores, [0.0] * burst)
    capacity = sustained(latencies)
    captured = arrivals(*load, SECONDS)
    latencies, busy, end = simulate(run, mode, cores, captured)
    kept = latencies[int(len(latencies) * WARMUP) :]
    span = max(end - captured[0], 1e-12)
    return Served(
        mode,
        cores,
        capacity,
        percentile(kept, 0.5) * 1e3,
        percentile(kept, 0.95) * 1e3,
        {k: v / span for k, v in busy.items()},
        memory,
    )


def contexts_memory(units: Sequence[MemoryUse], contexts: int) -> int | None:
    """The accelerator units held together with ``contexts`` contexts each (None: none on the accelerator)."""
    if not units:
        return None
    return sum(replace(u, residency=replace(u.residency, contexts=contexts)).dram_at(1) for u in units)


def plan_throughput(
    stage_list: Sequence[Stage],
    profile: DeviceProfile,
    load: tuple[int, float],
    sla_ms: float,
    asked: bool,
    units_memory: Sequence[MemoryUse] = (),
) -> Throughput:
    """The way of running ``stage_list`` on the profile's cores that serves ``load`` (streams, fps each) with the
    lowest p95 within ``sla_ms`` (a mode whose contexts do not fit the accelerator's memory is not one), else the one
    that sustains the most; and how many streams at that rate the plan serves."""
    streams, fps = load
    budget = int(profile.memory_mb * 2**20)
    on_npu = any(s.device == "npu" for s in stage_list)
    options = []
    for mode in modes(profile) if on_npu else [CoreMode(1)]:
        memory = contexts_memory(units_memory, mode.contexts(profile.npu_cores))
        if memory is None or memory <= budget:
            options.append(serve(stage_list, mode, profile, load, memory))
    held = profile.multicore.held_out_error
    if not options:
        why = "no way of holding the accelerator units' contexts fits its memory"
        return Throughput(streams, fps, asked, sla_ms, None, (), 0, budget, held, "fails", why)
    meets = [o for o in options if o.capacity_fps >= streams * fps and o.p95_ms <= sla_ms]
    chosen = min(meets, key=lambda o: o.p95_ms) if meets else max(options, key=lambda o: o.capacity_fps)
    most = most_streams(stage_list, profile, options, fps, sla_ms)
    if meets:
        status: Status = "ok"
        reason = (
            f"{streams} x {fps:g} FPS = {streams * fps:g} FPS served by {chosen.mode.label(profile.npu_cores)}: "
            f"sustains {chosen.capacity_fps:.0f} FPS, p95 {chosen.p95_ms:.1f} ms <= {sla_ms:g} ms"
        )
    else:
        status = "fails"
        short = chosen.capacity_fps < streams * fps
        reason = (
            f"{streams} x {fps:g} FPS = {streams * fps:g} FPS asked; the most any mode sustains is "
            f"{chosen.capacity_fps:.0f} FPS ({chosen.mode.label(profile.npu_cores)}, bottleneck {chosen.bottleneck})"
            if short
            else f"p95 {chosen.p95_ms:.1f} ms > the SLA {sla_ms:g} ms at {streams} x {fps:g} FPS"
        )
    return Throughput(streams, fps, asked, sla_ms, chosen, tuple(options), most, budget, held, status, reason)


def most_streams(
    stage_list: Sequence[Stage], profile: DeviceProfile, options: Sequence[Served], fps: float, sla_ms: float
) -> int:
    """The most streams at ``fps`` that one of the ways ``options`` simulated serves with p95 within ``sla_ms`` (at
    most :data:`MAX_STREAMS`, and what each sustains): a bisection on the streams, each judged by the simulation."""

    def served(n: int) -> bool:
        for option in options:
            if n * fps > option.capacity_fps:
                continue
            run = on_cores(stage_list, option.mode, profile)
            captured = arrivals(n, fps, SECONDS)
            latencies, _, _ = simulate(run, option.mode, profile.npu_cores, captured)
            kept = latencies[int(len(latencies) * WARMUP) :]
            if percentile(kept, 0.95) * 1e3 <= sla_ms:
                return True
        return False

    lo, hi = 0, min(MAX_STREAMS, int(max((o.capacity_fps for o in options), default=0.0) / fps))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if served(mid) else (lo, mid - 1)
    return lo


def not_modelled(load: tuple[int, float], profile: DeviceProfile, sla_ms: float, asked: bool) -> Throughput:
    """A profile whose latency is measured on this host: its throughput is measured by ``run`` on its streams, not
    modelled here."""
    sources = f"{load[0]} sources" if load[0] > 1 else "its sources"
    why = (
        f"{profile.name}'s latency is measured on this host, not modelled: measure the aggregate with `yolo-edge "
        f"bench BUNDLE --streams N`, or run the bundle on {sources} (`yolo-edge run`)"
    )
    budget = int(profile.memory_mb * 2**20)
    return Throughput(load[0], load[1], asked, sla_ms, None, (), 0, budget, None, "not modelled", why)
