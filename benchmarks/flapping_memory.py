"""Memory of a long live run against a flapping source (issue #55, class B): flat by construction.

    YOLO_OFFLINE=1 python benchmarks/flapping_memory.py [--minutes 60] [--fps 10] [--sample-s 30]

Deploys the demo to ``cpu`` (a quick config), serves an MJPEG stream on 127.0.0.1 that flaps: each connection
alternately sends ``--burst`` frames and closes, or accepts and closes before its first frame (the case that was
reopened 300-650 times a second), and runs one stream against it for ``--minutes``. Every ``--sample-s`` it prints
the resident memory, the connections served, frames read and delivered, the source events counted and kept, and
the fallback events. Passes when the resident memory at the end is within 5 % (and 30 MB) of its value after the
first fifth of the run (warm-up: allocator pools, the first reconnects), and the connections stay within the
backoff's bound. The CPU first.
"""

from __future__ import annotations

import argparse
import http.server
import sys
import tempfile
import threading
import time
from pathlib import Path

import cv2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stream_soak import quick_config, rss_mb  # noqa: E402

from yolo_edge.bundle import load_bundle  # noqa: E402
from yolo_edge.core.host import cpu_name  # noqa: E402
from yolo_edge.flows.deploy import DeployRequest, deploy  # noqa: E402
from yolo_edge.pipeline.engine import StreamOptions, StreamRunner  # noqa: E402
from yolo_edge.pipeline.preprocess import default_calib_dir  # noqa: E402
from yolo_edge.pipeline.sources import SourceOptions, parse_source  # noqa: E402


def serve(fps: float, burst: int) -> tuple[str, http.server.ThreadingHTTPServer, list[int]]:
    """The flapping stream; the list counts its connections."""
    jpgs = [cv2.imencode(".jpg", cv2.imread(str(p)))[1].tobytes() for p in sorted(default_calib_dir().glob("*.jpg"))]
    served = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *_args: object) -> None:
            pass

        def do_GET(self) -> None:
            served[0] += 1
            self.send_response(200)
            self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
            self.end_headers()
            if served[0] % 2 == 0:  # opened, then nothing: the first read fails
                return
            for i in range(burst):
                jpg = jpgs[i % len(jpgs)]
                self.wfile.write(b"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n" % len(jpg))
                self.wfile.write(jpg + b"\r\n")
                time.sleep(1.0 / fps)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}/stream.mjpg", httpd, served


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--fps", type=float, default=10.0)
    ap.add_argument("--burst", type=int, default=20, help="frames a connection sends before it closes")
    ap.add_argument("--sample-s", type=float, default=30.0)
    args = ap.parse_args()
    print(f"CPU: {cpu_name()}")
    with tempfile.TemporaryDirectory(prefix="yolo-edge-flap-") as tmp:
        bundle = load_bundle(
            deploy(DeployRequest(device="cpu", config=quick_config()), quiet=True, out=Path(tmp) / "b").bundle
        )
        url, httpd, served = serve(args.fps, args.burst)
        options = StreamOptions(SourceOptions(backoff_s=0.5, backoff_cap_s=2.0))
        with bundle.detector() as detector:
            runner = StreamRunner(detector, [parse_source(url)], options)
            samples: list[tuple[float, float]] = []
            stop = threading.Event()

            def consume() -> None:
                with runner:
                    for _ in runner:
                        if stop.is_set():
                            break

            worker = threading.Thread(target=consume, daemon=True)
            t0 = time.monotonic()
            worker.start()
            end = t0 + args.minutes * 60
            while time.monotonic() < end and worker.is_alive():
                time.sleep(min(args.sample_s, max(0.0, end - time.monotonic())))
                st = runner.stats[0]
                elapsed = time.monotonic() - t0
                samples.append((elapsed, rss_mb()))
                print(
                    f"{elapsed / 60:6.1f} min  rss {samples[-1][1]:7.1f} MB  connections {served[0]:5d}  "
                    f"read {st.read:6d}  delivered {st.delivered:6d}  source events {sum(st.event_counts.values()):5d} "
                    f"(kept {len(st.events)})  fallback events {detector.executor.events.summary().total}",
                    flush=True,
                )
            stop.set()
            runner.stop()
            worker.join(30)
        httpd.shutdown()
    warm = next(rss for t, rss in samples if t >= samples[-1][0] / 5)
    last = samples[-1][1]
    growth = last - warm
    minutes = samples[-1][0] / 60
    # at most one connection per backoff step: a burst's connection lasts burst/fps, an empty one backs off
    bound = minutes * 60 / 0.5 + 10
    flat = growth <= max(0.05 * warm, 0.0) and growth <= 30
    print(
        f"rss after warm-up {warm:.1f} MB, at the end {last:.1f} MB ({growth:+.1f} MB over {minutes:.0f} min): "
        f"{'flat' if flat else 'NOT flat'}; {served[0]} connections (bound {bound:.0f}): "
        f"{'met' if served[0] <= bound else 'NOT met'}"
    )
    return 0 if flat and served[0] <= bound else 1


if __name__ == "__main__":
    import results_page

    with results_page.page("flapping-memory", "Memory while a unit flaps between the NPU and the CPU"):
        code = main()
    raise SystemExit(code)
