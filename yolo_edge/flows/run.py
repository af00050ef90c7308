"""``run`` as a flow: a bundle's pipelined detection over several sources, every frame accounted for.

A :class:`RunRequest` says what to run (the bundle, the sources, how the streams are read and batched, NMS
overrides, where the fallback events go, a metrics port); :class:`StreamRun` loads the bundle, compiles its
detector, runs the stream engine with a sink of the caller's (each :class:`StreamResult`), and ends with a
:class:`RunOutcome`: per stream its accounting and latency, the precision audit's figures, the aggregate frames a
second, what the batch did, the fallback events and the run's problems. The CLI (``cli/run.py``) parses its
arguments into a request and prints the outcome; it wires nothing and reaches into no executor.

Example:
    >>> request = RunRequest(Path("out/bundle"), ("a.mp4", "b.mp4"))  # doctest: +SKIP
    >>> with StreamRun(request) as run:  # doctest: +SKIP
    ...     run.run(print)
    ...     outcome = run.finish()
    >>> outcome.aggregate_fps, outcome.delivered  # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from yolo_edge.bundle import load_bundle
from yolo_edge.flows.predict import nms_settings
from yolo_edge.pipeline.engine import StreamOptions, StreamResult, StreamRunner, StreamSummary, summarize
from yolo_edge.pipeline.metrics import MetricsServer
from yolo_edge.pipeline.sources import Source, parse_source
from yolo_edge.runtime.build import BatchPlan
from yolo_edge.runtime.events import EventLog, EventSummary

AUDIT_DRAIN_S = 10.0  # at a run's end, how long the audits still running may hold its summary


@dataclass(frozen=True)
class NmsOverrides:
    """``--conf``, ``--iou``, ``--classes``, ``--max-det`` over the bundle's NMS settings (None: the bundle's)."""

    conf: float | None = None
    iou: float | None = None
    classes: tuple[int | str, ...] | None = None
    max_det: int | None = None


@dataclass(frozen=True)
class RunRequest:
    """What ``yolo-edge run`` is asked to do."""

    bundle: Path
    sources: tuple[str, ...]  # files, folders, videos, camera indices, stream URLs
    options: StreamOptions = StreamOptions()
    batch: int | None = None  # frames a call of the accelerator units (None: the bundle's plan.batch)
    nms: NmsOverrides = NmsOverrides()
    events: Path | None = None  # the fallback log, as JSON lines
    metrics_port: int | None = None  # serve the run's metrics on 127.0.0.1 (0: a free port)


@dataclass(frozen=True)
class RunOutcome:
    """How a run went, once its threads stopped (a normal end, Ctrl-C, SIGTERM or a reader gone alike)."""

    streams: list[StreamSummary]
    audits: dict[str, dict[str, Any]]  # per audited unit (and the frames' audit): the precision audit's figures
    delivered: int
    aggregate_fps: float | None  # every stream's delivered frames over the run's span (None: before a frame)
    batch: BatchPlan
    batch_calls: dict[int, int]  # accelerator calls of the batched units, by frames a call
    events: EventSummary
    problems: list[str] = field(default_factory=list)  # what went wrong, each one line: the run exits 1


class StreamRun:
    """``with StreamRun(request) as run: run.run(sink); outcome = run.finish()``. Opening parses the sources (a bad
    one is a one-line error before the bundle is compiled), loads the bundle, compiles its detector and readies the
    stream engine (and the metrics server, ``metrics_url``); ``placement_problems`` and ``batch_note`` are what the
    user should know before the first frame (a unit not placed as deploy proved it; a batch not run as asked)."""

    def __init__(self, request: RunRequest) -> None:
        self.request = request
        self.sources: list[Source] = [parse_source(s) for s in request.sources]
        bundle = load_bundle(request.bundle)
        self._events = EventLog(request.events)
        self._outcome: RunOutcome | None = None
        batch = bundle.config.plan.batch if request.batch is None else request.batch
        o = request.nms
        nms = nms_settings(bundle.config.nms, bundle.meta.model.names, o.conf, o.iou, o.classes, o.max_det)
        self.detector = bundle.detector(events=self._events, batch=batch)
        self.detector.nms = nms
        executor = self.detector.executor
        self.placement_problems = list(executor.placement_problems)
        self.batch_note = f"batch {batch}: {executor.batch.why}" if executor.batch.why else None
        self._started = time.monotonic()
        try:
            self._runner = StreamRunner(self.detector, self.sources, request.options)
            port = request.metrics_port
            self._metrics = MetricsServer(self._runner, self._events, port) if port is not None else None
        except BaseException:  # a port taken: the compiled detector is not left behind
            self.detector.close()
            raise

    @property
    def metrics_url(self) -> str | None:
        """Where the run's metrics are served (None: not asked)."""
        return None if self._metrics is None else self._metrics.url

    def audits(self) -> dict[str, dict[str, object]]:
        """The precision audit's figures so far (per audited unit: cosine, audits, failed)."""
        return self.detector.executor.auditor.figures()

    def run(self, sink: Callable[[StreamResult], None]) -> None:
        """Every result to ``sink`` until the sources end (or the run is interrupted: :meth:`finish` still accounts
        for every frame)."""
        self._runner.run(sink)

    def finish(self) -> RunOutcome:
        """Stop the threads, drain the last frames' audits, close the fallback log: the outcome (once)."""
        if self._outcome is not None:
            return self._outcome
        runner, executor = self._runner, self.detector.executor
        runner.stop()
        if self._metrics is not None:
            self._metrics.close()
        audits = executor.auditor.figures(AUDIT_DRAIN_S)  # the last frames' audits in them
        delivered = sum(st.delivered for st in runner.stats)
        self._events.finish(delivered, time.monotonic() - self._started, audits)
        problems = [p for st in runner.stats for p in st.problems]
        if self._events.write_error:
            problems.append(self._events.write_error)
        self._outcome = RunOutcome(
            summarize(runner),
            audits,
            delivered,
            runner.aggregate_fps,
            executor.batch,
            dict(executor.batch_calls),
            self._events.summary(),
            problems,
        )
        return self._outcome

    def close(self) -> None:
        try:
            self.finish()
        finally:
            self.detector.close()

    def __enter__(self) -> StreamRun:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
