"""``yolo-edge run BUNDLE --source SRC [--source SRC ...]``: detect with a deployed bundle on images, folders,
videos, cameras (an index) and stream URLs (RTSP, HTTP MJPEG: whatever OpenCV opens), several at once.

The units run pipelined (each in its own thread, shared by all streams; ``--sequential`` runs them in turn)
and NPU failures are retried on the CPU, so every frame read gets its result or a counted drop: files never
drop (backpressure); live sources drop the oldest queued frame when the pipeline is behind
(``--drop-policy``), and reconnect with backoff when they close or stall. Prints a line (or a JSON line)
per frame (its preprocess / inference / postprocess ms, as ultralytics prints them, and how long after capture
it was ready), then per stream: frames read, delivered and dropped by cause, events, latency from capture to
output and frame age. ``--save`` writes annotated images (class-coloured boxes), or an annotated .avi per video or
live stream; ``--save-txt`` YOLO-format labels; ``--save-json`` every frame's detections in one JSON file.
``--conf``, ``--iou``, ``--classes`` and ``--max-det`` override the bundle's NMS settings, as ultralytics' do.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yolo_edge.cli.common import positive_float, warn_placement
from yolo_edge.core.codec import dumps
from yolo_edge.core.config import MAX_BATCH
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import JsonArrayWriter, check_can_write, printable
from yolo_edge.flows.predict import Results, speed_of
from yolo_edge.flows.run import NmsOverrides, RunOutcome, RunRequest, StreamRun
from yolo_edge.pipeline.engine import StreamOptions, StreamResult
from yolo_edge.pipeline.outputs import AnnotatedOutput, save_dirs
from yolo_edge.pipeline.sources import DROP_POLICIES, SourceOptions, parse_source
from yolo_edge.runtime.audit import FRAMES, coverage


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        aliases=["predict"],  # ultralytics' word for it: `yolo predict` users type `yolo-edge predict`
        help="run a bundle on images, videos, cameras or streams",
        description=__doc__,
    )
    p.add_argument("bundle", type=Path)
    p.add_argument(
        "sources",
        nargs="*",
        metavar="SOURCE",
        help="an image, a folder of images, a video, a camera index or a stream URL (or source=SOURCE, as ultralytics)",
    )
    p.add_argument("--source", action="append", default=None, help="a source too; repeat for several streams")
    p.add_argument("--save", type=Path, default=None, help="write annotated images (or video) here")
    p.add_argument("--conf", type=float, default=None, help="confidence threshold (default: the bundle's, 0.25)")
    p.add_argument("--iou", type=float, default=None, help="NMS IoU threshold (default: the bundle's, 0.7)")
    p.add_argument("--classes", nargs="+", default=None, help="keep only these classes (ids or names)")
    p.add_argument("--max-det", type=int, default=None, help="most detections per image (default: the bundle's)")
    p.add_argument("--save-txt", action="store_true", help="YOLO-format labels per frame in SAVE/labels/")
    p.add_argument("--save-conf", action="store_true", help="with --save-txt: each label line ends with its score")
    p.add_argument("--save-json", type=Path, default=None, help="every frame's detections as one JSON file")
    p.add_argument("--json", action="store_true", help="one JSON line per frame")
    p.add_argument("--events", type=Path, default=None, help="append runtime fallback events to this JSONL file")
    p.add_argument("--drop-policy", choices=DROP_POLICIES, default="drop-oldest", help="live sources when behind")
    p.add_argument("--max-fps", type=positive_float, default=None, help="live sources: keep at most this many frames/s")
    p.add_argument(
        "--open-timeout-s",
        type=positive_float,
        default=30.0,
        help="live sources: give up on one that has not opened after this long (default 30)",
    )
    p.add_argument("--max-age-ms", type=positive_float, default=None, help="live sources: drop frames older than this")
    p.add_argument(
        "--in-flight",
        type=int,
        default=None,
        help="frames in the pipeline at once (default: one per stage worker, times its batch, +1)",
    )
    _batch_arguments(p)
    p.add_argument("--sequential", action="store_true", help="run the units in turn instead of pipelined")
    p.add_argument(
        "--emulate-latency", action="store_true", help="simulated accelerators take their modelled time (sleeping)"
    )
    p.add_argument("--video-format", choices=("avi", "mp4"), default="avi", help="annotated videos: MJPG .avi or .mp4")
    p.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus metrics on 127.0.0.1:PORT")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def _batch_arguments(p: argparse.ArgumentParser) -> None:
    """``--batch`` and how long a batch waits to fill."""
    p.add_argument(
        "--batch",
        type=int,
        default=None,
        help="frames a call of an accelerator unit takes (default: the batch deploy planned, deploy --batch; 1); more "
        "than its memory holds runs as sub-batches of the largest that fits (a memory event says so)",
    )
    p.add_argument(
        "--batch-timeout-ms",
        type=positive_float,
        default=1000.0,
        help="with --batch: how long a batch waits to fill before what it has runs a frame a call (default 1000)",
    )


@dataclass
class Sinks:
    """What ``run`` does with each result: a JSON or text line on stdout, the annotated output (``--save``),
    YOLO-format labels (``--save-txt``), the JSON file of every frame (``--save-json``), a progress bar on a
    terminal."""

    json: bool
    output: AnnotatedOutput | None
    progress: bool = False
    labels: Path | None = None
    save_conf: bool = False
    results: JsonArrayWriter | None = None
    many: bool = False  # several sources: each label file's name starts with its stream's index
    audits: Callable[[], dict[str, dict[str, object]]] | None = None  # the precision audit's figures so far
    bar: Any = None

    def __post_init__(self) -> None:
        if self.progress and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(desc="frames", unit="frame", file=sys.stderr, leave=False, dynamic_ncols=True)

    def __call__(self, r: StreamResult) -> None:
        if self.output is not None:  # first: a printed line means the frame is in the video too
            self.output.write(r)
        speed = speed_of(r.timing)
        if self.labels is not None:
            base, _, frame = r.name.partition("#")  # a video's frame: "<video>#<index>", labelled <video>_<index>.txt
            stem = f"{r.stream}_" * self.many + re.sub(r"\W+", "_", Path(base).stem) + (f"_{frame}" if frame else "")
            self.labels.mkdir(parents=True, exist_ok=True)
            Results(r.name, r.image, r.detections, speed).save_txt(self.labels / f"{stem}.txt", self.save_conf)
        record = {
            "stream": r.stream,
            "frame": r.index,
            "source": r.name,
            "captured_at": r.captured_at,
            "detections": r.detections.to_list(),
            "speed_ms": speed,
            "ready_ms": r.ready_ms,
            "age_ms": r.age_ms,
            "unit_ms": r.timing.unit_ms,
            "transfer_ms": r.timing.transfer_ms,
            "modelled_units": list(r.modelled),  # their unit_ms is a simulated board's model
            "devices": r.timing.unit_device,
        }
        if self.audits is not None and (audits := self.audits()):  # per audited unit: cosine so far, audits, failed
            record["audit"] = audits
        if self.results is not None:
            self.results.add(record)
        if self.bar is not None:
            self.bar.update(1)
        if self.json:
            print(dumps(record, indent=None), flush=True)
        else:
            d = r.detections
            summary = ", ".join(f"{n} {c:.2f}" for n, c in zip(d.class_names, d.confidence)) or "nothing"
            print(
                f"{printable(r.name, 1000)}: {len(d)} {'detection' if len(d) == 1 else 'detections'} ({summary}); "
                f"{speed['preprocess']:.1f}ms preprocess, {speed['inference']:.1f}ms inference"
                f"{_how(r)}, {speed['postprocess']:.1f}ms postprocess; ready {r.ready_ms:.1f} ms after capture",
                flush=True,
            )

    def close(self) -> None:
        """Finalise the videos and the JSON file: they are whole after a normal end, Ctrl-C or SIGTERM alike."""
        if self.output is not None:
            self.output.close()
        if self.results is not None:
            self.results.close()
        if self.bar is not None:
            self.bar.close()


def _how(r: StreamResult) -> str:
    """How the inference time was obtained, where any of it was not measured here: on a simulated board every
    phase is the board model's (a profile without a board CPU model: its accelerator units')."""
    if r.timing.board or (r.modelled and len(r.modelled) == len(r.timing.unit_ms)):
        return " modelled (board)"
    return f" ({', '.join(r.modelled)} modelled (board))" if r.modelled else ""


def _report(outcome: RunOutcome, quiet_stdout: bool) -> None:
    """One summary line per stream, the precision audit's per unit, then the fallback events (on stderr with
    --json: stdout is the JSONL; or when stdout's reader has gone)."""
    out = sys.stderr if quiet_stdout else sys.stdout
    for s in outcome.streams:
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(s.dropped.items())) or "none"
        line = f"{printable(s.source, 1000)}: {s.read} read, {s.delivered} delivered, dropped: {dropped}"
        if s.latency_ms is not None:
            lat = s.latency_ms
            line += f"; capture->output p50 {lat.p50:.1f} p95 {lat.p95:.1f} p99 {lat.p99:.1f} ms"
        if s.age_ms is not None:
            line += f", frame age p99 {s.age_ms.p99:.1f} ms"
        if s.event_counts:
            line += "; source events: " + ", ".join(f"{k} {v}" for k, v in sorted(s.event_counts.items()))
            redirect = next((e for e in s.events if e["event"] == "redirected"), None)
            if redirect is not None:  # FFmpeg followed it: said, with where it went
                line += f" (redirected to {printable(redirect['to'])}, another host)"
        print(line, file=out)
    for unit, a in outcome.audits.items():
        print(_audit_line(unit, a), file=out)
    if len(outcome.streams) > 1 and outcome.aggregate_fps is not None:
        print(
            f"{len(outcome.streams)} streams: {outcome.delivered} frames delivered, {outcome.aggregate_fps:.1f} FPS "
            "in all (measured)",
            file=out,
        )
    if outcome.batch.asked > 1:  # what the batch did: calls of the batch, and the frames that ran a frame a call
        calls = ", ".join(f"{n} of {b} frames" for b, n in sorted(outcome.batch_calls.items(), reverse=True))
        print(
            f"batch {outcome.batch.asked} asked, {outcome.batch.runs_at} run: accelerator calls {calls or 'none'}",
            file=out,
        )
    ev = outcome.events
    print(f"{ev.total} fallback events" + (f": {ev.by_trigger}" if ev.total else ""), file=out)


def _audit_line(unit: str, a: dict[str, Any]) -> str:
    """The precision audit of one unit (or of the frames: the FP32 boxes kept and added)."""
    line = f"precision audit of {unit}: {a['audits']} audits, {a['failed']} failed" + coverage(a)
    if unit == FRAMES:
        b, p = a["boxes_kept"], a["proven"]
        share = "" if b["share"] is None else f" ({b['share']:.1%})"
        line += f"; FP32 boxes kept {b['kept']}/{b['of']}{share}, deploy proved {p['kept']}/{p['of']}"
        added = a.get("boxes_added") or {}
        if added.get("of"):
            line += f"; boxes added {added['added']}/{added['of']}" + (
                f", deploy proved {p['added']}/{p['boxes']}" if "added" in p else ""
            )
        if a["unseen"]:
            line += f"; {a['unseen']} of {a['frames']} frames lit unlike any the deploy proved (audited more often)"
        return line + ("; on the CPU since a precision event" if a["on_cpu"] else "")
    line += f" (floor {a['floor']:.5f})"
    if a["min_cosine"] is not None:
        line += f", cosine with the FP32 twin min {a['min_cosine']:.4f} last {a['last_cosine']:.4f}"
    skipped = f", {a['skipped']} skipped (the audit worker was busy)" if a["skipped"] else ""
    return line + skipped + ("; on the CPU since a precision event" if a["on_cpu"] else "")


def source_names(args: argparse.Namespace) -> list[str]:
    """The sources as positional arguments, ultralytics' ``source=X`` or ``--source X``; none is a one-line error
    naming the command the user typed (``predict`` or ``run``)."""
    named = [s.removeprefix("source=") for s in args.sources] + (args.source or [])
    if not named:
        raise YoloEdgeError(
            f"no source: yolo-edge {args.command} BUNDLE SOURCE (or source=SOURCE, or --source SOURCE): an image, a "
            "folder, a video, a camera index or a stream URL"
        )
    return named


def check_args(args: argparse.Namespace) -> None:
    """``run``'s arguments that are wrong before anything is read: a one-line error saying how to fix each."""
    if args.events is not None:
        check_can_write(args.events, "--events")
    if args.in_flight is not None and args.in_flight < 1:
        raise YoloEdgeError(f"--in-flight must be >= 1, got {args.in_flight}")
    if args.batch is not None and not 1 <= args.batch <= MAX_BATCH:
        raise YoloEdgeError(f"--batch must be a whole number of frames from 1 to {MAX_BATCH}, got {args.batch}")
    if args.save_txt and args.save is None:
        raise YoloEdgeError("--save-txt writes the labels into SAVE/labels/: give --save DIR too")
    if args.save_json is not None:
        check_can_write(args.save_json, "--save-json")


def request_of(args: argparse.Namespace) -> RunRequest:
    """``run``'s arguments as a request (checked: a one-line error for each that is wrong before anything is read)."""
    check_args(args)
    options = StreamOptions(
        SourceOptions(
            drop_policy=args.drop_policy,
            max_fps=args.max_fps,
            max_age_s=args.max_age_ms / 1e3 if args.max_age_ms is not None else None,
            open_timeout_s=args.open_timeout_s,
        ),
        in_flight=args.in_flight,
        pipelined=not args.sequential,
        emulate_latency=args.emulate_latency,
        batch_timeout_s=args.batch_timeout_ms / 1e3,
    )
    classes = tuple(args.classes) if args.classes is not None else None
    nms = NmsOverrides(args.conf, args.iou, classes, args.max_det)
    names = tuple(source_names(args))
    return RunRequest(Path(args.bundle), names, options, args.batch, nms, args.events, args.metrics_port)


def run(args: argparse.Namespace) -> int:
    request = request_of(args)
    # a --save that cannot hold the outputs is an error before the bundle is compiled
    save = save_dirs(args.save, [parse_source(s) for s in request.sources]) if args.save else None
    with StreamRun(request) as flow:
        output = AnnotatedOutput(flow.sources, save, args.video_format) if save is not None else None
        labels = args.save / "labels" if args.save_txt else None
        results = JsonArrayWriter(args.save_json) if args.save_json is not None else None
        many = len(flow.sources) > 1
        sinks = Sinks(args.json, output, not args.quiet, labels, args.save_conf, results, many, flow.audits)
        warn_placement(flow.placement_problems, "run")
        if flow.batch_note:
            print(f"yolo-edge run: {flow.batch_note}", file=sys.stderr)
        if flow.metrics_url is not None:
            print(f"yolo-edge run: metrics at {flow.metrics_url}", file=sys.stderr)
        gone = False
        try:
            flow.run(sinks)
        except BrokenPipeError:  # the reader of stdout left (`| head`): the stream stopped; exit 141 (cli.main)
            gone = True
            raise
        finally:  # after Ctrl-C or SIGTERM too: the videos finalised, the accounting printed
            sinks.close()
            outcome = flow.finish()
            _report(outcome, args.json or gone)
            problems = list(outcome.problems)
            if results is not None and results.error is not None:
                problems.append(f"--save-json {results.error}")
    for line in problems:
        print(f"yolo-edge run: {printable(line, 1000)}", file=sys.stderr)
    if problems:
        print(
            f"yolo-edge run: {outcome.delivered} frames done, {len(problems)} problem(s) above: exit 1", file=sys.stderr
        )
    return 1 if problems else 0
