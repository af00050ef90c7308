"""Soak: long live streams with accelerator faults and forced reconnects; every frame accounted for.

    YOLO_OFFLINE=1 python benchmarks/stream_soak.py [--frames 1500] [--streams 2] [--fps 40] [--reconnect-every 500]

Deploys the demo model to ``sim-edge-npu``, then runs it with the simulated accelerator injecting 5 %
errors and 1 % NaN outputs (``faults`` in the profile) on ``--streams`` MJPEG-over-HTTP streams served on
127.0.0.1 by this script, each closing its connection every ``--reconnect-every`` frames (the reader
reopens it) until ``--frames`` have been sent. Prints per stream: frames read, delivered, dropped by cause,
whether results came out in order, the reconnections; the runtime's fallback events; and the resident
memory at the first ``--reconnect-every`` frames and at the end. Exits 1 if a frame is unaccounted for,
a result is out of order, or memory grew by 5 % or more. The CPU first.
"""

from __future__ import annotations

import argparse
import http.server
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import cv2

from yolo_edge.bundle import load_bundle
from yolo_edge.core.config import DeployConfig, Faults, load_deploy_config
from yolo_edge.core.host import cpu_name
from yolo_edge.flows.deploy import DeployRequest, deploy
from yolo_edge.pipeline.engine import StreamOptions, StreamRunner
from yolo_edge.pipeline.preprocess import default_calib_dir
from yolo_edge.pipeline.sources import parse_source


def quick_config() -> DeployConfig:
    """The shipped deploy settings with fewer calibration images and timing runs, and no conditions: a bundle in a
    minute."""
    cfg = load_deploy_config()
    return replace(
        cfg, calib_images=16, validate=replace(cfg.validate, latency_runs=10, latency_warmup=2, conditions=())
    )


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def serve(frames: int, fps: float, every: int) -> tuple[str, http.server.ThreadingHTTPServer]:
    """An MJPEG stream of the calibration images that closes its connection every ``every`` frames, ``frames``
    in all over its connections; later connections get nothing."""
    jpgs = [cv2.imencode(".jpg", cv2.imread(str(p)))[1].tobytes() for p in sorted(default_calib_dir().glob("*.jpg"))]
    sent = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *_args: object) -> None:
            pass

        def do_GET(self) -> None:
            if sent[0] >= frames:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
            self.end_headers()
            for _ in range(every):
                if sent[0] >= frames:
                    return
                jpg = jpgs[sent[0] % len(jpgs)]
                head = b"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n" % len(jpg)
                self.wfile.write(head + jpg + b"\r\n")
                sent[0] += 1
                time.sleep(1 / fps)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}/stream.mjpg", httpd


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=1500, help="frames per stream")
    ap.add_argument("--streams", type=int, default=2)
    ap.add_argument("--fps", type=float, default=40.0, help="each stream's frame rate")
    ap.add_argument("--reconnect-every", type=int, default=500)
    args = ap.parse_args()
    print(f"CPU: {cpu_name()}")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "b"
        bundle = load_bundle(
            deploy(DeployRequest(device="sim-edge-npu", config=quick_config()), quiet=True, out=out).bundle
        )
        bundle.profile = replace(bundle.profile, faults=Faults(error_rate=0.05, nan_rate=0.01, seed=1))
        servers = [serve(args.frames, args.fps, args.reconnect_every) for _ in range(args.streams)]
        detector = bundle.detector()
        runner = StreamRunner(detector, [parse_source(url) for url, _ in servers], StreamOptions())
        last, seen = [-1] * args.streams, [0] * args.streams
        in_order, mark, t0 = True, None, time.monotonic()
        with runner:
            for r in runner:
                in_order = in_order and r.index > last[r.stream]
                last[r.stream] = r.index
                if mark is None and sum(st.read for st in runner.stats) >= args.reconnect_every * args.streams:
                    mark = rss_mb()
                seen[r.stream] += 1  # (this result counts as delivered once the loop asks for the next)
                # done when every frame sent was read and has its result (or its drop), not before
                finished = all(
                    st.read >= args.frames and seen[i] + sum(st.dropped.values()) >= st.read
                    for i, st in enumerate(runner.stats)
                )
                if finished or time.monotonic() - t0 > 30 * args.frames / args.fps:
                    break
        end = rss_mb()
        for _, httpd in servers:
            httpd.shutdown()
        ev = detector.executor.events.summary()
        detector.close()
    ok = in_order
    for i, st in enumerate(runner.stats):
        reconnects = sum(1 for e in st.events if e["event"] == "reconnected")
        print(f"stream {i}: read {st.read}, delivered {st.delivered}, dropped {dict(st.dropped) or 'none'}, "
              f"accounted {st.accounted}, reconnected {reconnects} times")  # fmt: skip
        ok = ok and st.accounted and st.read == args.frames
    growth = (end - mark) / mark if mark else float("nan")
    print(f"results in order per stream: {in_order}; fallback events {ev.total} {ev.by_trigger}")
    at = f"{args.reconnect_every} frames/stream"
    print(f"resident memory {mark:.0f} MB at {at}, {end:.0f} MB at the end ({growth:+.1%})")
    ok = ok and growth < 0.05
    print("soak: PASS" if ok else "soak: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    import results_page

    with results_page.page("stream-soak", "Streams: a long run with faults"):
        code = main()
    raise SystemExit(code)
