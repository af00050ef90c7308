"""Live metrics of a stream run in Prometheus' text format, on a local port (``yolo-edge run --metrics-port``).

Per stream: frames read, delivered and dropped by cause (counters), whether the source is up, its events
(reconnects, stalls), and latency from capture to output and frame age (summaries over the run); and the
runtime's fallback events by trigger; the precision audit's figures per unit. Written by prometheus_client (the
field's library), served on 127.0.0.1 only by one thread with a selector (prometheus_client's own server takes a
thread per connection, with no timeout).
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.pipeline.engine import StreamRunner
from yolo_edge.pipeline.sources import DROP_CAUSES
from yolo_edge.runtime.events import EventLog

Rows = list[tuple[dict[str, str], float]]


class _RunCollector:
    """prometheus_client's custom collector of one run: every scrape reads the run's accounting as it is then."""

    def __init__(self, runner: StreamRunner, events: EventLog) -> None:
        self.runner, self.events = runner, events

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

        def family(kind: type[Any], name: str, help_: str, rows: Rows) -> Any:
            keys = sorted({k for labels, _ in rows for k in labels})
            fam = kind(name, help_, labels=keys)
            for labels, value in rows:
                fam.add_metric([labels.get(k, "") for k in keys], value)
            return fam

        runner = self.runner
        streams = [({"stream": str(i), "source": st.source.shown}, st) for i, st in enumerate(runner.stats)]
        yield family(CounterMetricFamily, "yolo_edge_frames_read", "Frames read from the source.",
                     [(lb, st.read) for lb, st in streams])  # fmt: skip
        yield family(CounterMetricFamily, "yolo_edge_frames_delivered", "Frames whose result reached the sinks.",
                     [(lb, st.delivered) for lb, st in streams])  # fmt: skip
        yield family(CounterMetricFamily, "yolo_edge_frames_dropped", "Frames read but not delivered, by cause.",
                     [({**lb, "cause": c}, st.dropped[c]) for lb, st in streams for c in DROP_CAUSES])  # fmt: skip
        yield family(GaugeMetricFamily, "yolo_edge_source_up", "1 while the source is delivering frames.",
                     [(lb, 1.0 if st.state == "reading" else 0.0) for lb, st in streams])  # fmt: skip
        counts = [(lb, dict(st.event_counts)) for lb, st in streams]
        yield family(CounterMetricFamily, "yolo_edge_source_events",
                     "Source events (disconnected, stall, reconnected).",
                     [({**lb, "event": k}, v) for lb, c in counts for k, v in sorted(c.items())])  # fmt: skip
        for name, series, help_ in (
            ("yolo_edge_latency_ms", runner.latency_ms, "Capture to sink return, milliseconds."),
            ("yolo_edge_frame_age_ms", runner.age_ms, "Age of the frame when inference started, milliseconds."),
        ):
            summary = Metric(name, help_, "summary")  # quantiles of recent frames, totals of the run
            for (lb, _), recent in zip(streams, series):
                snapshot = list(recent.values)
                if snapshot:
                    for q, v in zip(("0.5", "0.95", "0.99"), np.percentile(snapshot, [50, 95, 99])):
                        summary.add_sample(name, {**lb, "quantile": q}, float(v))
                    summary.add_sample(f"{name}_count", lb, float(recent.count))
                    summary.add_sample(f"{name}_sum", lb, float(recent.total))
            yield summary
        yield family(CounterMetricFamily, "yolo_edge_fallback_events", "Runtime fallback events, by trigger.",
                     [({"trigger": k}, v) for k, v in sorted(self.events.summary().by_trigger.items())])  # fmt: skip
        audits = sorted(runner.detector.executor.auditor.figures().items())
        results = (("due", "due"), ("done", "audits"), ("failed", "failed"), ("skipped", "skipped"))
        yield family(CounterMetricFamily, "yolo_edge_audits", "Precision audits of a unit, by result.",
                     [({"unit": u, "result": r}, float(a[k])) for u, a in audits for r, k in results])  # fmt: skip
        for name, key, help_ in (
            ("yolo_edge_audit_cosine", "last_cosine", "The last audited cosine of a unit with its FP32 twin."),
            ("yolo_edge_audit_cosine_min", "min_cosine", "The lowest audited cosine of a unit with its FP32 twin."),
            ("yolo_edge_audit_floor", "floor", "The lowest cosine the deploy accepted: an audit below it fails."),
            ("yolo_edge_audit_on_cpu", "on_cpu", "1 while a precision event keeps the unit on its FP32 CPU twin."),
        ):
            yield family(GaugeMetricFamily, name, help_,
                         [({"unit": u}, float(a[key])) for u, a in audits if a.get(key) is not None])  # fmt: skip
        yield family(CounterMetricFamily, "yolo_edge_audit_unseen_frames",
                     "Frames lit unlike any the deploy proved (audited as often as after a failed audit).",
                     [({"unit": u}, float(a["unseen"])) for u, a in audits if "unseen" in a])  # fmt: skip
        shares = [(u, a["boxes_kept"]["share"]) for u, a in audits if "boxes_kept" in a]
        yield family(GaugeMetricFamily, "yolo_edge_audit_boxes_kept",
                     "Share of the FP32 chain's boxes the audited frames kept (the frames' audit).",
                     [({"unit": u}, float(v)) for u, v in shares if v is not None])  # fmt: skip


def registry(runner: StreamRunner, events: EventLog) -> Any:
    """A prometheus_client registry of the run's metrics (read at each scrape)."""
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry(auto_describe=False)
    reg.register(_RunCollector(runner, events))
    return reg


OPEN = 256  # connections held at once: past it the one silent longest is closed to take a new one
IDLE_S = 5.0  # a connection that has not sent its request this long after it came is closed
REQUEST_BYTES = 8192  # a request line and headers longer than this are not a scrape
BACKLOG = 256  # the listen queue: a burst of scrapes waits in the kernel instead of being refused


class _Server:
    """The metrics on one thread with a selector, as an event loop serves: every connection is read without
    blocking, answered (HTTP/1.0, ``GET``) once its request is whole, and closed; one silent for :data:`IDLE_S` is
    closed, and at :data:`OPEN` connections the one silent longest makes room for a new one. Thousands of idle
    connections hold one thread and at most :data:`OPEN` descriptors, and scrapes keep being answered."""

    def __init__(self, port: int, page: Callable[[], bytes], content_type: str) -> None:
        self._listener = socket.create_server(("127.0.0.1", port), backlog=BACKLOG)
        self._listener.setblocking(False)
        self.port = int(self._listener.getsockname()[1])
        self._page, self._type, self._stop = page, content_type.encode(), threading.Event()
        self._thread = threading.Thread(target=self._serve, name="metrics", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        pending: dict[socket.socket, tuple[float, bytes]] = {}  # connection -> (when it came, what it sent)
        with selectors.DefaultSelector() as sel:
            sel.register(self._listener, selectors.EVENT_READ)
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=0.2):
                    if key.fileobj is self._listener:
                        self._accept(sel, pending)
                    else:
                        self._read(sel, pending, key.fileobj)  # type: ignore[arg-type]
                now = time.monotonic()
                for conn in [c for c, (t, _) in pending.items() if now - t > IDLE_S]:
                    self._close(sel, pending, conn)
            for conn in list(pending):
                self._close(sel, pending, conn)

    def _accept(self, sel: selectors.BaseSelector, pending: dict[socket.socket, tuple[float, bytes]]) -> None:
        try:
            conn, _ = self._listener.accept()
        except OSError:  # out of descriptors, or the client gave up: the loop goes on (the next select retries)
            return
        if len(pending) >= OPEN:
            self._close(sel, pending, min(pending, key=lambda c: pending[c][0]))
        conn.setblocking(False)
        pending[conn] = (time.monotonic(), b"")
        sel.register(conn, selectors.EVENT_READ)

    def _read(
        self, sel: selectors.BaseSelector, pending: dict[socket.socket, tuple[float, bytes]], conn: socket.socket
    ) -> None:
        try:
            data = conn.recv(REQUEST_BYTES)
        except OSError:
            data = b""
        came, got = pending[conn]
        got += data
        if data and b"\r\n\r\n" not in got and len(got) < REQUEST_BYTES:
            pending[conn] = (came, got)
            return
        if data:
            self._answer(conn, got)
        self._close(sel, pending, conn)

    def _answer(self, conn: socket.socket, request: bytes) -> None:
        parts = request.split(b"\r\n", 1)[0].split()
        if len(parts) >= 2 and parts[0] == b"GET" and parts[1].split(b"?")[0] in (b"/", b"/metrics"):
            status, body = b"200 OK", self._page()
        else:
            status, body = b"404 Not Found", b"not found: GET /metrics\n"
        head = b"HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (status, self._type, len(body))
        try:
            conn.settimeout(1.0)  # a client that does not read its answer cannot hold the loop
            conn.sendall(head + body)
        except OSError:
            pass

    @staticmethod
    def _close(
        sel: selectors.BaseSelector, pending: dict[socket.socket, tuple[float, bytes]], conn: socket.socket
    ) -> None:
        pending.pop(conn, None)
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(conn)
        conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._listener.close()


class MetricsServer:
    """The run's metrics in prometheus_client's text format on 127.0.0.1:``port`` (0: a free port; ``port`` then says
    which) until ``close``; ``url`` is its ``/metrics``. Served by :class:`_Server`."""

    def __init__(self, runner: StreamRunner, events: EventLog, port: int) -> None:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        reg = registry(runner, events)
        try:
            self._server = _Server(port, lambda: generate_latest(reg), CONTENT_TYPE_LATEST)
        except (OSError, OverflowError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else str(exc)
            raise YoloEdgeError(
                f"--metrics-port {port}: cannot listen on 127.0.0.1 ({why}); pick a free port"
            ) from None
        self.port = self._server.port
        self.url = f"http://127.0.0.1:{self.port}/metrics"

    def close(self) -> None:
        self._server.close()
