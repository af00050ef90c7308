"""Stream throughput: pipelined units vs the same units in turn, 1/2/4 streams on one accelerator, and a
simulated accelerator at its modelled speed.

    YOLO_OFFLINE=1 python benchmarks/stream_throughput.py [--frames 150] [--rounds 2]

Deploys the demo model to ``host-lowp`` and to ``sim-edge-npu`` (small settings, temporary folders), writes
a video of the calibration images, and runs, interleaved round by round so machine noise hits both alike:
``sequential`` (one thread runs every unit of a frame in turn) against ``pipelined`` (one thread per unit,
shared by the streams), on 1, 2 and 4 copies of the video at once. On ``sim-edge-npu`` with
``emulate_latency`` the accelerator unit takes its modelled time, and the pipelined throughput is set
against 1 / (the slowest unit). Then an accelerator-bound unit (held at 60 ms a frame by emulation, as a
3-core RK3588's backbone would be) on a pool of 3 contexts against 1, and a live MJPEG stream on 127.0.0.1
sent at twice the 1-core service rate (drop-oldest): latency from capture to output (p95, first and
second half of the run: flat, not growing) and frame age (p99). Prints frames per second (all streams
together) and the ratios; the CPU first. Every frame is accounted for in every run (the script asserts it).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

from yolo_edge.bundle import load_bundle
from yolo_edge.core.host import cpu_name
from yolo_edge.flows.deploy import DeployRequest, deploy
from yolo_edge.pipeline.engine import StreamOptions, StreamRunner
from yolo_edge.pipeline.preprocess import default_calib_dir
from yolo_edge.pipeline.sources import parse_source


def write_video(path: Path, frames: int) -> Path:
    images = sorted(default_calib_dir().glob("*.jpg"))
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"MJPG"), 30.0, (320, 320))
    for i in range(frames):
        writer.write(cv2.resize(cv2.imread(str(images[i % len(images)])), (320, 320)))
    writer.release()
    return path


def fps(bundle: Path, video: Path, streams: int, pipelined: bool, emulate: bool = False) -> tuple[float, dict]:  # type: ignore[type-arg]
    """Frames per second over all streams, and the mean unit times (ms) of the run."""
    b = load_bundle(bundle)
    with b.detector() as detector:
        options = StreamOptions(in_flight=4 * streams, pipelined=pipelined, emulate_latency=emulate)
        runner = StreamRunner(detector, [parse_source(str(video))] * streams, options)
        unit_ms: dict[str, list[float]] = {}
        t0 = time.perf_counter()
        for r in runner:
            for k, v in r.timing.unit_ms.items():
                unit_ms.setdefault(k, []).append(v)
        wall = time.perf_counter() - t0
    assert all(st.accounted and not st.dropped for st in runner.stats), [st.dropped for st in runner.stats]
    return sum(st.delivered for st in runner.stats) / wall, {k: statistics.median(v) for k, v in unit_ms.items()}


def held_runner(bundle: Path, sources: list[str], cores: int, hold_s: float = 0.06) -> StreamRunner:
    """A pipelined run whose accelerator unit takes ``hold_s`` a frame (emulated, as a simulated profile's modelled
    time) on a pool of ``cores`` contexts: an accelerator-bound stream, like an RK3588's backbone at 640."""
    detector = load_bundle(bundle).detector()
    unit = next(u for u in detector.executor.units if u.npu is not None)
    unit.modelled_s = hold_s
    unit.npu.concurrency = cores  # type: ignore[union-attr]
    opts = StreamOptions(in_flight=cores + 3, emulate_latency=True)
    return StreamRunner(detector, [parse_source(s) for s in sources], opts, close_detector=True)


def pool_and_overload(bundle: Path, video: Path, frames: int) -> None:
    """3 accelerator contexts vs 1 on an accelerator-bound unit; then a live stream at 2x the 1-core service rate."""
    from stream_soak import serve  # the soak's MJPEG server on 127.0.0.1 (this folder)

    rates = {}
    for cores in (1, 3):
        with held_runner(bundle, [str(video)], cores) as runner:
            t0 = time.perf_counter()
            n = sum(1 for _ in runner)
            rates[cores] = n / (time.perf_counter() - t0)
    print(
        f"pool, accelerator unit held at 60 ms (emulated): 1 core {rates[1]:.1f} fps, 3 cores {rates[3]:.1f} fps, "
        f"{rates[3] / rates[1]:.2f}x"
    )
    service_fps = rates[1]
    url, httpd = serve(frames, 2 * service_fps, frames)
    with held_runner(bundle, [url], 1) as runner:
        for _ in runner:
            if runner.stats[0].read >= frames - 1:
                break
    httpd.shutdown()
    st, lat, age = runner.stats[0], runner.latency_ms[0], runner.age_ms[0]
    half = len(lat) // 2
    p95 = [float(np.percentile(x, 95)) for x in (lat[:half], lat[half:])]
    interval = 1e3 / (2 * service_fps)
    print(
        f"overload 2x ({2 * service_fps:.1f} fps sent, drop-oldest): read {st.read}, delivered {st.delivered}, "
        f"dropped {dict(st.dropped)}; capture->output p95 {p95[0]:.0f} ms (first half), {p95[1]:.0f} ms (second); "
        f"frame age p99 {np.percentile(age, 99):.0f} ms; service {1e3 / service_fps:.0f} ms + one frame interval "
        f"{interval:.0f} ms = {1e3 / service_fps + interval:.0f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    print(f"CPU: {cpu_name()}")
    from stream_soak import quick_config  # this folder

    cfg = quick_config()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        video = write_video(root / "clip.avi", args.frames)
        bundles = {
            d: deploy(DeployRequest(device=d, config=cfg), quiet=True, out=root / d).bundle
            for d in ("host-lowp", "sim-edge-npu")
        }
        print(f"demo model 320, {args.frames}-frame video per stream, {args.rounds} interleaved rounds, median fps")
        for streams in (1, 2, 4):
            seq, pipe = [], []
            for _ in range(args.rounds):
                seq.append(fps(bundles["host-lowp"], video, streams, pipelined=False)[0])
                pipe.append(fps(bundles["host-lowp"], video, streams, pipelined=True)[0])
            s, p = statistics.median(seq), statistics.median(pipe)
            print(
                f"host-lowp    {streams} stream(s): sequential {s:6.1f} fps, pipelined {p:6.1f} fps, ratio {p / s:.2f}x"
            )
        rate, unit_ms = fps(bundles["sim-edge-npu"], video, 1, pipelined=True, emulate=True)
        slowest = max(unit_ms.values())
        shown = ", ".join(f"{k} {v:.2f} ms" for k, v in unit_ms.items())
        print(
            f"sim-edge-npu 1 stream, emulated: pipelined {rate:6.1f} fps vs 1/slowest unit {1e3 / slowest:6.1f} fps "
            f"({rate * slowest / 1e3:.2f}); unit medians {shown} (accelerator: modelled)"
        )
        pool_and_overload(bundles["host-lowp"], video, args.frames)


if __name__ == "__main__":
    import results_page

    with results_page.page("streams", "Streams: throughput and freshness"):
        main()
