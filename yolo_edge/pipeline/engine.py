"""Pipelined stream execution, every frame accounted for.

    readers (one per source) -> scheduler -> unit stages (one thread each) -> NMS -> results, per stream in order

The scheduler takes frames from the sources in turn (a slow or dead source never stalls the others), at
most ``in_flight`` at once, drops live frames older than ``max_age_s`` (``stale``) and letterboxes them.
Each execution unit is a stage with its own thread (an accelerator unit with several cores: a pool of one
worker per core, results put back in order after), shared by all streams, joined to the next by a queue
(the in-flight cap bounds them all): the runtimes release the GIL, so the accelerator unit works on frame
n+1 while the CPU units finish frame n, and throughput approaches 1 / (the slowest unit) instead of 1 / (their sum). The
executor's per-frame CPU retry, circuit breaker and hysteresis work as in a sequential run (``run_unit``).
With ``pipelined=False`` one stage runs every unit in turn (the sequential baseline). With
``emulate_latency`` a call on a simulated board takes its modelled time as the board model runs it (its context
off the core for the call overhead, then its core held: ``SimulatedExecutable``; the stage's workers run as
emulating contexts, ``backends.base.on_context``), so pipelining, contexts and SLAs can be measured for hardware
that is not here.

Per stream: frames read = delivered + dropped by cause, exactly (:class:`StreamStats`); latency from
capture to the sink's return, and the frame's age when inference starts.
"""

from __future__ import annotations

import collections
import functools
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from yolo_edge.backends.base import on_context
from yolo_edge.core.stats import Percentiles, percentiles
from yolo_edge.pipeline.detector import Detector, FrameTiming
from yolo_edge.pipeline.postprocess import Detections
from yolo_edge.pipeline.preprocess import Letterboxed
from yolo_edge.pipeline.sources import Captured, DropCause, FrameQueue, Reader, Source, SourceOptions, StreamStats
from yolo_edge.runtime.executor import SplitExecutor
from yolo_edge.runtime.units import Unit, UnitRun


@dataclass(frozen=True)
class StreamOptions:
    sources: SourceOptions = SourceOptions()
    in_flight: int | None = None  # frames between the scheduler and the sink; default: one per stage worker, +1
    pipelined: bool = True
    emulate_latency: bool = False
    order_timeout_s: float = 5.0  # a result waiting this long for an earlier frame of its stream goes out anyway
    # a batched accelerator stage (run --batch) waits this long for a batch to fill: past it, what it has runs a frame
    # a call (OpenVINO's BATCH plugin falls back to batch 1 after its timeout, 1000 ms by default, as here)
    batch_timeout_s: float = 1.0


@dataclass
class StreamResult:
    stream: int
    index: int  # the frame's position in its source (read order)
    name: str
    image: np.ndarray
    detections: Detections
    # by phase, priced as ``Detector.detect`` prices a frame (``Detector.timing``): on a simulated board every phase
    # is the board's, modelled, hand-overs over its link included; elsewhere measured
    timing: FrameTiming
    t_capture: float  # the runner's clock
    captured_at: float  # wall-clock seconds since the epoch
    age_ms: float  # how stale the frame was when inference started
    ready_ms: float  # capture -> result ready (before the sink)
    modelled: tuple[str, ...] = ()  # the units whose time is a simulated board's model, not measured here


@dataclass
class _Job:
    captured: Captured
    seq: int  # dispatch order within its stream
    frame: int  # global frame number, for the executor's events
    letterboxed: Letterboxed
    t_start: float
    tensors: dict[str, np.ndarray]
    runs: list[UnitRun] = field(default_factory=list)
    preprocess_s: float = 0.0  # the letterbox's, measured here


WINDOW = 10_000  # the frames whose latency a stream's percentiles are of: the most recent (all are counted)


class Recent:
    """The last :data:`WINDOW` values of a per-frame figure, and the count and sum of all of them: percentiles of
    recent frames, totals of the run, and memory that stays flat on an endless stream."""

    def __init__(self, size: int = WINDOW) -> None:
        self.values: collections.deque[float] = collections.deque(maxlen=size)
        self.count, self.total = 0, 0.0

    def add(self, value: float) -> None:
        self.values.append(value)
        self.count += 1
        self.total += value


class StreamRunner:
    """``with StreamRunner(detector, sources) as runner: for result in runner: ...`` (or ``runner.run(sink)``)."""

    def __init__(
        self,
        detector: Detector,
        sources: list[Source],
        options: StreamOptions = StreamOptions(),
        clock: Callable[[], float] = time.monotonic,
        close_detector: bool = False,
    ) -> None:
        self.detector, self.options, self.clock = detector, options, clock
        self._close_detector = close_detector  # the runner owns the detector (yolo_edge.stream)
        self.stats = [StreamStats(s) for s in sources]
        self.latency_ms = [Recent() for _ in sources]
        self.age_ms = [Recent() for _ in sources]
        self.span: tuple[float, float] | None = None  # the first delivered frame's capture, the last delivery
        self._stop = threading.Event()
        opts = options.sources
        self._queues = [
            FrameQueue(opts.queue_for(src), opts.drop_policy if src.live else "block", st)
            for src, st in zip(sources, self.stats)
        ]
        self._readers = [
            Reader(i, s, q, st, opts, self._stop, clock)
            for i, (s, q, st) in enumerate(zip(sources, self._queues, self.stats))
        ]
        self._admission = _Admission(len(sources))  # sized when the run starts (_start), as the stage pools are then
        self._results: queue.Queue[Ordered | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._failed: BaseException | None = None  # what ended a pipeline thread: the run ends with it
        self._stopped = False

    # ---------------------------------------------------------------- stages
    def _stages(self) -> list[list[Unit]]:
        units = self.detector.executor.units
        return [[u] for u in units] if self.options.pipelined else [list(units)]

    @staticmethod
    def _pool(units: list[Unit]) -> int:
        """Workers of a stage: one per accelerator core for a single accelerator unit, else one."""
        return max((u.npu.concurrency for u in units if u.npu is not None), default=1) if len(units) == 1 else 1

    def _nms(self, inp: queue.Queue[_Job | None]) -> None:
        outputs, name = self.detector.executor.output_names, self.detector.executor.input_name
        while True:
            job = inp.get()
            if job is None:
                self._results.put(None)
                return
            t0 = time.perf_counter()
            dets = self.detector.postprocess({n: job.tensors[n] for n in outputs}, job.letterboxed)
            post = time.perf_counter() - t0
            self.detector.audit_frame(job.frame, {name: job.tensors[name]}, job.letterboxed, dets, None)
            result = self.detector.executor.result(job.tensors, job.runs)
            measured = (job.preprocess_s, post)
            timing = self.detector.timing(job.captured.image.shape, result, measured, self.detector.nms.conf)
            self._results.put(Ordered(_result(job, dets, timing, self.clock()), job.seq))

    def _start(self) -> None:
        for r in self._readers:
            r.start()
        stages = self._stages()
        for npu in (u.npu for units in stages for u in units if u.npu is not None):
            npu.serve(len(self._readers))  # a runtime's throughput mode for several streams (OpenVINO's)
        # unbounded: the in-flight cap bounds them, and a put never blocks a stage that is shutting down
        qs: list[queue.Queue[_Job | None]] = [queue.Queue() for _ in range(len(stages) + 1)]
        pools = [self._pool(units) for units in stages]
        rows = [_batch(units) for units in stages]  # frames a worker of each stage takes at once
        slots = [p * r for p, r in zip(pools, rows)]
        self._admission.size(self.options.in_flight or sum(slots) + 1, slots[0])
        scheduler = _Scheduler(self.detector, self._readers, self._admission, self._stop, self.clock, qs[0])
        self._threads = [self._thread("scheduler", qs[0], scheduler.run)]
        for k, (units, pool) in enumerate(zip(stages, pools)):
            admit = self._admission.admit if k == 0 else None
            stage = _Stage(self.detector.executor, units, (qs[k], qs[k + 1]), pool, admit, self._stop)
            stage.emulate = self.options.emulate_latency
            stage.timeout_s = self.options.batch_timeout_s
            self._threads += [
                self._thread(f"stage-{k}.{w}", qs[k + 1], functools.partial(stage.run, w)) for w in range(pool)
            ]
        self._threads.append(self._thread("nms", self._results, lambda: self._nms(qs[-1])))
        for t in self._threads:
            t.daemon = True
            t.start()

    def _thread(self, name: str, out: queue.Queue[Any], target: Callable[[], None]) -> threading.Thread:
        """A pipeline thread whose failure ends the run: the error is kept for the consumer to raise (a write that
        fails in an event sink, a bug), and the end mark goes downstream so nothing waits for its frames."""

        def body() -> None:
            try:
                target()
            except BaseException as exc:
                if self._failed is None:
                    self._failed = exc
                self._stop.set()
                out.put(None)

        return threading.Thread(target=body, name=name, daemon=True)

    # ---------------------------------------------------------------- results
    def __iter__(self) -> Iterator[StreamResult]:
        return self._loop(None)

    def run(self, sink: Callable[[StreamResult], None]) -> list[StreamStats]:
        """Feed every result to ``sink``; a sink that raises loses that frame (``sink_error``, and a problem
        line), not the stream. A :class:`BrokenPipeError` is the consumer gone (``run --json | head``): that
        frame is a ``sink_error`` drop, the stream stops (what was read and not delivered counted as
        ``shutdown``) and the error propagates: nobody is left to read the rest of a camera's frames."""
        for _ in self._loop(sink):
            pass
        return self.stats

    def _loop(self, sink: Callable[[StreamResult], None] | None) -> Iterator[StreamResult]:
        self._start()
        order = Reorder(len(self.stats), self.options.order_timeout_s, self.clock)
        try:
            done = False
            while not done or order.waiting:
                if self._failed is not None:
                    raise self._failed
                try:
                    got = self._results.get(timeout=0.05)
                except queue.Empty:
                    done = done or not any(t.is_alive() for t in self._threads)
                else:
                    if got is None:
                        done = True
                    else:
                        order.add(got)
                for result in order.ready(flush=done):
                    if sink is None:
                        try:
                            yield result
                        finally:  # handed over, even to a consumer that stops here: delivered
                            self._finish(result, None)
                        continue
                    try:
                        sink(result)
                        self._finish(result, None)
                    except BrokenPipeError as exc:  # the consumer is gone: stop (the finally below) and say so
                        self._finish(result, f"sink gone at {result.name}: {exc}")
                        raise
                    except Exception as exc:  # the sink's failure: this frame is lost to it, the stream goes on
                        self._finish(result, f"sink failed on {result.name}: {type(exc).__name__}: {exc}")
                    yield result
            if self._failed is not None:  # the end mark it sent downstream ended the loop
                raise self._failed
        finally:
            self.stop()

    def _finish(self, result: StreamResult, sink_error: str | None) -> None:
        stats = self.stats[result.stream]
        if sink_error is None:
            self.latency_ms[result.stream].add((self.clock() - result.t_capture) * 1e3)
            self.age_ms[result.stream].add(result.age_ms)
            first = result.t_capture if self.span is None else min(self.span[0], result.t_capture)
            self.span = (first, self.clock())
            stats.deliver()
        else:
            stats.drop("sink_error")
            stats.problems.append(sink_error)
        self._admission.done(result.stream)

    def stop(self) -> None:
        """Stop reading, count what was still queued or in flight as ``shutdown`` drops, join the threads."""
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        for r in self._readers:
            r.join(timeout=10)
        for s, q in enumerate(self._queues):
            self.stats[s].drop("shutdown", q.drain())
        for t in self._threads:
            t.join(timeout=10)
        for s, n in enumerate(self._admission.drain()):
            self.stats[s].drop("shutdown", n)
        if self._close_detector:
            self.detector.close()

    @property
    def aggregate_fps(self) -> float | None:
        """Frames delivered a second, every stream together, from the first frame's capture to the last delivery."""
        if self.span is None or self.span[1] <= self.span[0]:
            return None
        return sum(st.delivered for st in self.stats) / (self.span[1] - self.span[0])

    def __enter__(self) -> StreamRunner:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


class _Admission:
    """The in-flight cap (``slots``: frames between the scheduler and the sink), the first stage's free workers
    (``admit``), and per stream the frames dispatched but not yet delivered or dropped."""

    def __init__(self, streams: int) -> None:
        self.slots, self.admit = threading.Semaphore(1), threading.Semaphore(1)
        self._pending = [0] * streams
        self._lock = threading.Lock()

    def size(self, in_flight: int, first_stage: int) -> None:
        self.slots, self.admit = threading.Semaphore(in_flight), threading.Semaphore(first_stage)

    def acquire(self, timeout_s: float) -> bool:
        """A free first-stage worker and an in-flight slot, both or neither."""
        if not self.admit.acquire(timeout=timeout_s):
            return False
        if not self.slots.acquire(timeout=timeout_s):
            self.admit.release()
            return False
        return True

    def release(self) -> None:
        """Give back what ``acquire`` took: no frame was dispatched after all."""
        self.slots.release()
        self.admit.release()

    def dispatched(self, stream: int) -> None:
        with self._lock:
            self._pending[stream] += 1

    def done(self, stream: int) -> None:
        """A frame of ``stream`` reached the sink (delivered, or lost to it): its slot is free."""
        with self._lock:
            self._pending[stream] -= 1
        self.slots.release()

    def drain(self) -> list[int]:
        """The frames still in flight per stream, now counted as gone."""
        with self._lock:
            pending, self._pending = self._pending, [0] * len(self._pending)
        return pending


class _Scheduler:
    """The scheduler thread: frames from the sources in turn, admitted when the first stage is free; a live frame
    older than ``max_age_s`` is dropped (``stale``); the rest are preprocessed by the detector."""

    def __init__(
        self,
        detector: Detector,
        readers: list[Reader],
        admission: _Admission,
        stop: threading.Event,
        clock: Callable[[], float],
        out: queue.Queue[_Job | None],
    ) -> None:
        self.detector, self.readers, self.admission = detector, readers, admission
        self.stop, self.clock, self.out = stop, clock, out
        self.queues = [r.out for r in readers]

    def _next(self, turn: int) -> tuple[Captured | None, int]:
        """Round robin: the next source with a frame waiting, and the turn after it."""
        for k in range(len(self.queues)):
            s = (turn + k) % len(self.queues)
            item = self.queues[s].get_nowait()
            if item is not None:
                return item, s + 1
        return None, turn

    def run(self) -> None:
        seq = [0] * len(self.queues)
        frame, turn = 0, 0
        while not self.stop.is_set() and not all(q.finished for q in self.queues):
            # a frame leaves its source only when a first-stage worker is free: it waits in the source's queue,
            # where drop-oldest keeps the freshest, not inside the pipeline; and under the in-flight cap
            if not self.admission.acquire(0.05):
                continue
            item, turn = self._next(turn)
            if item is None:
                self.admission.release()
                time.sleep(0.002)
                continue
            now, reader = self.clock(), self.readers[item.stream]
            max_age = reader.options.max_age_s
            if reader.source.live and max_age is not None and now - item.t_capture > max_age:
                reader.stats.drop("stale")
                self.admission.release()
                continue
            self.admission.dispatched(item.stream)
            t0 = time.perf_counter()
            lb = self.detector.preprocess(item.image)
            feeds = self.detector.feeds(lb)
            pre = time.perf_counter() - t0
            self.out.put(_Job(item, seq[item.stream], frame, lb, now, feeds, preprocess_s=pre))
            seq[item.stream] += 1
            frame += 1
        self.out.put(None)


class _Stage:
    """One stage: its units run in turn on each frame, by ``workers`` threads sharing ``inp`` (an accelerator's
    pool of one per core); the end mark goes round the workers, and the last one passes it on."""

    def __init__(
        self,
        executor: SplitExecutor,
        units: list[Unit],
        queues: tuple[queue.Queue[_Job | None], queue.Queue[_Job | None]],
        workers: int,
        admit: threading.Semaphore | None,
        stop: threading.Event,
    ) -> None:
        self.executor, self.units, (self.inp, self.out) = executor, units, queues
        self.admit = admit  # the first stage frees a worker for the scheduler after each frame
        self.stop = stop
        self.timeout_s = StreamOptions.batch_timeout_s  # how long a batch may wait to fill
        self.emulate = False  # calls on a simulated board take its modelled time (run --emulate-latency)
        self._left = workers
        self._lock = threading.Lock()
        self._gather = threading.Lock()

    def run(self, worker: int = 0) -> None:
        """One worker: its calls are the pool's context ``worker``; while that context is out of the pool (failing in
        a row) it takes no frame, the others take them all."""
        on_context(worker, self.emulate)
        pooled = len(self.units) == 1 and self._left > 1
        while True:
            if pooled:
                self.executor.pool_wait(self.units[0], self._ending)
            jobs, ended = self._take()
            if len(self.units) == 1 and jobs:
                self._rows(self.units[0], jobs)
            for job in jobs if len(self.units) > 1 else ():
                for unit in self.units:
                    outs, run = self.executor.run_unit(unit, job.tensors, job.frame)
                    job.tensors.update(outs)
                    job.runs.append(run)
            for job in jobs:
                if self.admit is not None:
                    self.admit.release()
                self.out.put(job)
            if ended:
                with self._lock:
                    self._left -= 1
                    last = self._left == 0
                (self.out if last else self.inp).put(None)
                return

    def _ending(self) -> bool:
        """The run stops, or every other worker of the pool has ended (the end mark waits for this one)."""
        with self._lock:
            return self.stop.is_set() or self._left == 1

    def _take(self) -> tuple[list[_Job], bool]:
        """The next frames for one call (a batched unit's: as many as its batch, or what came within ``timeout_s``),
        and whether the end mark (or a stop) came."""
        batch = _batch(self.units)
        if batch == 1:
            job = self.inp.get()
            return ([], True) if job is None or self.stop.is_set() else ([job], False)
        with self._gather:  # one worker of the pool fills its batch at a time: they do not split the frames
            return self._fill(batch)

    def _fill(self, batch: int) -> tuple[list[_Job], bool]:
        first = self.inp.get()
        if first is None or self.stop.is_set():
            return [], True
        jobs = [first]
        deadline = time.monotonic() + self.timeout_s
        while len(jobs) < batch:
            try:
                job = self.inp.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if job is None:
                return jobs, True
            jobs.append(job)
        return jobs, self.stop.is_set()

    def _rows(self, unit: Unit, jobs: list[_Job]) -> None:
        """One unit for ``jobs``: one call of its batch where it has that many (``SplitExecutor.run_rows``)."""
        done = self.executor.run_rows(unit, [j.tensors for j in jobs], [j.frame for j in jobs])
        for job, (outs, run) in zip(jobs, done):
            job.tensors.update(outs)
            job.runs.append(run)


def _batch(units: list[Unit]) -> int:
    """Frames a stage's call takes: a single unit's batch (``Unit.batch``), else 1."""
    return units[0].batch if len(units) == 1 else 1


@dataclass(frozen=True)
class StreamSummary:
    """One stream at the end (or now): its frame accounting, its source events, and the percentiles (ms) of
    latency from capture to the sink's return and of frame age at inference start (None before a frame)."""

    source: str
    read: int
    delivered: int
    dropped: dict[DropCause, int]
    events: list[dict[str, object]]  # the last KEPT, with their details
    event_counts: dict[str, int]  # every one, by kind
    latency_ms: Percentiles | None
    age_ms: Percentiles | None


def summarize(runner: StreamRunner) -> list[StreamSummary]:
    return [
        StreamSummary(
            st.source.shown,
            st.read,
            st.delivered,
            dict(st.dropped),
            list(st.events),
            dict(st.event_counts),
            percentiles(list(runner.latency_ms[i].values)) if runner.latency_ms[i].count else None,
            percentiles(list(runner.age_ms[i].values)) if runner.age_ms[i].count else None,
        )
        for i, st in enumerate(runner.stats)
    ]


def _result(job: _Job, dets: Detections, timing: FrameTiming, now: float) -> StreamResult:
    c = job.captured
    return StreamResult(
        c.stream,
        c.index,
        c.name,
        c.image,
        dets,
        timing,
        c.t_capture,
        c.captured_at,
        (job.t_start - c.t_capture) * 1e3,
        (now - c.t_capture) * 1e3,
        modelled=tuple(r.unit for r in job.runs if r.modelled_ms is not None),
    )


@dataclass
class Ordered:
    result: StreamResult
    seq: int


class Reorder:
    """Results per stream in dispatch order; a gap older than ``timeout_s`` is skipped rather than waited on."""

    def __init__(self, streams: int, timeout_s: float, clock: Callable[[], float]) -> None:
        self.next = [0] * streams
        self.held: list[dict[int, tuple[StreamResult, float]]] = [{} for _ in range(streams)]
        self.timeout_s, self.clock = timeout_s, clock

    @property
    def waiting(self) -> bool:
        return any(self.held)

    def add(self, item: Ordered) -> None:
        self.held[item.result.stream][item.seq] = (item.result, self.clock())

    def ready(self, flush: bool = False) -> Iterator[StreamResult]:
        for s, held in enumerate(self.held):
            while held:
                if self.next[s] in held:
                    yield held.pop(self.next[s])[0]
                    self.next[s] += 1
                    continue
                oldest = min(held)
                if flush or self.clock() - held[oldest][1] > self.timeout_s:
                    self.next[s] = oldest  # the frames before it are late: the ones waiting go out now
                    continue
                break
