"""Live metrics of a stream run in Prometheus' text format, on a local port (``yolo-edge run --metrics-port``).

Per stream: frames read, delivered and dropped by cause (counters), whether the source is up, its events
(reconnects, stalls), and latency from capture to output and frame age (summaries over the run); and the
runtime's fallback events by trigger. Written by prometheus_client (the field's library), served on 127.0.0.1 only
by a fixed pool of threads (its own server takes a thread per connection, with no timeout).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

import numpy as np

from yolo_edge.errors import YoloEdgeError
from yolo_edge.pipeline.engine import StreamRunner
from yolo_edge.pipeline.sources import DROP_CAUSES
from yolo_edge.runtime import EventLog

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


def registry(runner: StreamRunner, events: EventLog) -> Any:
    """A prometheus_client registry of the run's metrics (read at each scrape)."""
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry(auto_describe=False)
    reg.register(_RunCollector(runner, events))
    return reg


WORKERS = 4  # threads that answer scrapes: a fixed pool, not a thread per connection
WAITING = 64  # connections accepted and waiting for a worker; more are closed at once (shed, not queued)
IDLE_S = 5.0  # a connection that sends nothing for this long is closed
BACKLOG = 256  # the listen queue: concurrent scrapes wait in the kernel instead of being refused


class _Handler(WSGIRequestHandler):
    timeout = IDLE_S  # the socket's timeout: an idle client cannot hold a worker

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a scrape is not news on a run's stderr."""


class _PooledServer(WSGIServer):
    """A WSGI server whose connections are answered by a fixed pool of :data:`WORKERS` threads, at most
    :data:`WAITING` waiting, each closed after :data:`IDLE_S` of silence: thousands of idle connections hold a
    bounded number of threads and file descriptors, and the accept loop never spins on a full table."""

    request_queue_size = BACKLOG

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, _Handler)
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="metrics")
        self._slots = threading.BoundedSemaphore(WAITING + WORKERS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):  # full: this one is closed, the server stays up
            self.shutdown_request(request)
            return
        self._pool.submit(self._answer, request, client_address)

    def _answer(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away or timed out: its connection is closed, nothing printed."""

    def server_close(self) -> None:
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)


class MetricsServer:
    """The run's metrics in prometheus_client's text format (its WSGI app) on 127.0.0.1:``port`` (0: a free port;
    ``port`` then says which) until ``close``; ``url`` is its ``/metrics``. Served by :class:`_PooledServer`."""

    def __init__(self, runner: StreamRunner, events: EventLog, port: int) -> None:
        from prometheus_client import make_wsgi_app

        try:
            self._httpd = _PooledServer(("127.0.0.1", port))
        except (OSError, OverflowError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else str(exc)
            raise YoloEdgeError(
                f"--metrics-port {port}: cannot listen on 127.0.0.1 ({why}); pick a free port"
            ) from None
        self._httpd.set_app(make_wsgi_app(registry(runner, events)))
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="metrics", daemon=True)
        self._thread.start()
        self.port = int(self._httpd.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}/metrics"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
