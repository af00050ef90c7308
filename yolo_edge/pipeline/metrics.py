"""Live metrics of a stream run in Prometheus' text format, on a local port (``yolo-edge run --metrics-port``).

Per stream: frames read, delivered and dropped by cause (counters), whether the source is up, its events
(reconnects, stalls), and latency from capture to output and frame age (summaries over the run); and the
runtime's fallback events by trigger. Written and served by prometheus_client (the field's library), on
127.0.0.1 only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

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
        streams = [({"stream": str(i), "source": st.source.text}, st) for i, st in enumerate(runner.stats)]
        yield family(CounterMetricFamily, "yolo_edge_frames_read", "Frames read from the source.",
                     [(lb, st.read) for lb, st in streams])  # fmt: skip
        yield family(CounterMetricFamily, "yolo_edge_frames_delivered", "Frames whose result reached the sinks.",
                     [(lb, st.delivered) for lb, st in streams])  # fmt: skip
        yield family(CounterMetricFamily, "yolo_edge_frames_dropped", "Frames read but not delivered, by cause.",
                     [({**lb, "cause": c}, st.dropped[c]) for lb, st in streams for c in DROP_CAUSES])  # fmt: skip
        yield family(GaugeMetricFamily, "yolo_edge_source_up", "1 while the source is delivering frames.",
                     [(lb, 1.0 if st.state == "reading" else 0.0) for lb, st in streams])  # fmt: skip
        counts = [(lb, Counter(str(e["event"]) for e in list(st.events))) for lb, st in streams]
        yield family(CounterMetricFamily, "yolo_edge_source_events",
                     "Source events (disconnected, stall, reconnected).",
                     [({**lb, "event": k}, v) for lb, c in counts for k, v in sorted(c.items())])  # fmt: skip
        for name, series, help_ in (
            ("yolo_edge_latency_ms", runner.latency_ms, "Capture to sink return, milliseconds."),
            ("yolo_edge_frame_age_ms", runner.age_ms, "Age of the frame when inference started, milliseconds."),
        ):
            summary = Metric(name, help_, "summary")  # quantiles over the run (the family class has none)
            for (lb, _), values in zip(streams, series):
                snapshot = list(values)
                if snapshot:
                    for q, v in zip(("0.5", "0.95", "0.99"), np.percentile(snapshot, [50, 95, 99])):
                        summary.add_sample(name, {**lb, "quantile": q}, float(v))
                    summary.add_sample(f"{name}_count", lb, float(len(snapshot)))
                    summary.add_sample(f"{name}_sum", lb, float(np.sum(snapshot)))
            yield summary
        yield family(CounterMetricFamily, "yolo_edge_fallback_events", "Runtime fallback events, by trigger.",
                     [({"trigger": k}, v) for k, v in sorted(self.events.summary().by_trigger.items())])  # fmt: skip


def registry(runner: StreamRunner, events: EventLog) -> Any:
    """A prometheus_client registry of the run's metrics (read at each scrape)."""
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry(auto_describe=False)
    reg.register(_RunCollector(runner, events))
    return reg


class MetricsServer:
    """prometheus_client's server of the run's metrics on 127.0.0.1:``port`` (0: a free port; ``port`` then says
    which) until ``close``; ``url`` is its ``/metrics``."""

    def __init__(self, runner: StreamRunner, events: EventLog, port: int) -> None:
        from prometheus_client import start_http_server

        try:
            self._httpd, self._thread = start_http_server(port, addr="127.0.0.1", registry=registry(runner, events))
        except (OSError, OverflowError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else str(exc)
            raise YoloEdgeError(
                f"--metrics-port {port}: cannot listen on 127.0.0.1 ({why}); pick a free port"
            ) from None
        self.port = int(self._httpd.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}/metrics"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
