"""Stream throughput: pipelined units vs the same units in turn, 1/2/4 streams on one accelerator, and a
simulated accelerator at its modelled speed.

    YOLO_OFFLINE=1 python benchmarks/stream_throughput.py [--frames 150] [--rounds 2]

Deploys the demo model to ``host-lowp`` and to ``sim-edge-npu`` (small settings, temporary folders), writes
a video of the calibration images, and runs, interleaved round by round so machine noise hits both alike:
``sequential`` (one thread runs every unit of a frame in turn) against ``pipelined`` (one thread per unit,
shared by the streams), on 1, 2 and 4 copies of the video at once. On ``sim-edge-npu`` with
``emulate_latency`` the accelerator unit takes its modelled time, and the pipelined throughput is set
against 1 / (the slowest unit). Prints frames per second (all streams together) and the ratios; the CPU
first. Every frame is accounted for in every run (the script asserts it).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import cv2

from yolo_edge.bundle import load_bundle
from yolo_edge.config import load_deploy_config
from yolo_edge.deploy import deploy
from yolo_edge.host import cpu_name
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
            for k, v in r.unit_ms.items():
                unit_ms.setdefault(k, []).append(v)
        wall = time.perf_counter() - t0
    assert all(st.accounted and not st.dropped for st in runner.stats), [st.dropped for st in runner.stats]
    return sum(st.delivered for st in runner.stats) / wall, {k: statistics.median(v) for k, v in unit_ms.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    print(f"CPU: {cpu_name()}")
    cfg = load_deploy_config()
    cfg = replace(cfg, calib_images=16, validate=replace(cfg.validate, latency_runs=10, latency_warmup=2))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        video = write_video(root / "clip.avi", args.frames)
        bundles = {
            d: deploy(device=d, config=cfg, quiet=True, out=root / d).bundle for d in ("host-lowp", "sim-edge-npu")
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


if __name__ == "__main__":
    main()
