"""Live metrics of a stream run in Prometheus' text format, on a local port (``yolo-edge run --metrics-port``).

Per stream: frames read, delivered and dropped by cause (counters), whether the source is up, its events
(reconnects, stalls), and latency from capture to output and frame age (summaries over the run); and the
runtime's fallback events by trigger. Served on 127.0.0.1 only, at ``/metrics``.
"""

from __future__ import annotations

import http.server
import threading
from collections import Counter

import numpy as np

from yolo_edge.errors import YoloEdgeError
from yolo_edge.pipeline.engine import StreamRunner
from yolo_edge.pipeline.sources import DROP_CAUSES
from yolo_edge.runtime import EventLog


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _metric(out: list[str], name: str, kind: str, help_: str, rows: list[tuple[dict[str, str], float]]) -> None:
    out += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
    for labels, value in rows:
        shown = ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items())
        out.append(f"{name}{{{shown}}} {value:g}" if shown else f"{name} {value:g}")


def prometheus_text(runner: StreamRunner, events: EventLog) -> str:
    """The run's metrics now, in Prometheus' text exposition format."""
    out: list[str] = []
    streams = [({"stream": str(i), "source": st.source.text}, st) for i, st in enumerate(runner.stats)]
    _metric(out, "yolo_edge_frames_read_total", "counter", "Frames read from the source.",
            [(lb, st.read) for lb, st in streams])  # fmt: skip
    _metric(out, "yolo_edge_frames_delivered_total", "counter", "Frames whose result reached the sinks.",
            [(lb, st.delivered) for lb, st in streams])  # fmt: skip
    _metric(out, "yolo_edge_frames_dropped_total", "counter", "Frames read but not delivered, by cause.",
            [({**lb, "cause": c}, st.dropped[c]) for lb, st in streams for c in DROP_CAUSES])  # fmt: skip
    _metric(out, "yolo_edge_source_up", "gauge", "1 while the source is delivering frames.",
            [(lb, 1.0 if st.state == "reading" else 0.0) for lb, st in streams])  # fmt: skip
    counts = [(lb, Counter(str(e["event"]) for e in list(st.events))) for lb, st in streams]
    _metric(out, "yolo_edge_source_events_total", "counter", "Source events (disconnected, stall, reconnected).",
            [({**lb, "event": k}, v) for lb, c in counts for k, v in sorted(c.items())])  # fmt: skip
    for name, series, help_ in (
        ("yolo_edge_latency_ms", runner.latency_ms, "Capture to sink return, milliseconds."),
        ("yolo_edge_frame_age_ms", runner.age_ms, "Age of the frame when inference started, milliseconds."),
    ):
        rows: list[tuple[dict[str, str], float]] = []
        for (lb, _), values in zip(streams, series):
            snapshot = list(values)
            if snapshot:
                q = np.percentile(snapshot, [50, 95, 99])
                rows += [({**lb, "quantile": k}, float(v)) for k, v in zip(("0.5", "0.95", "0.99"), q)]
        _metric(out, name, "summary", help_, rows)
    fallback = events.summary()
    _metric(out, "yolo_edge_fallback_events_total", "counter", "Runtime fallback events, by trigger.",
            [({"trigger": k}, v) for k, v in sorted(fallback.by_trigger.items())])  # fmt: skip
    return "\n".join(out) + "\n"


class MetricsServer:
    """``/metrics`` on 127.0.0.1:``port`` (0: a free port; ``port`` then says which) until ``close``."""

    def __init__(self, runner: StreamRunner, events: EventLog, port: int) -> None:
        def render() -> bytes:
            return prometheus_text(runner, events).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *_args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404, "metrics are at /metrics")
                    return
                body = render()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        try:
            self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        except (OSError, OverflowError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else str(exc)
            raise YoloEdgeError(
                f"--metrics-port {port}: cannot listen on 127.0.0.1 ({why}); pick a free port"
            ) from None
        self._httpd.daemon_threads = True
        self.port = int(self._httpd.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        threading.Thread(target=self._httpd.serve_forever, name="metrics", daemon=True).start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
