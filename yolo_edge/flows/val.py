"""A bundle re-measured: ``val_bundle`` (mAP or agreement of its plan and of the FP32 reference),
``bench_spread`` (its latency, and its spread where measured), on the data deploy judged it on
(``bundle_eval_data``) or the user's."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from yolo_edge.bundle import Bundle, load_bundle
from yolo_edge.core.cluster import ray_session
from yolo_edge.core.codec import plain
from yolo_edge.core.config import MAX_STREAMS, Condition
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.progress import Bar, progress_bar, ticks
from yolo_edge.data.resolve import DEMO, EvalData, resolve_eval_data
from yolo_edge.pipeline.detector import Detector
from yolo_edge.pipeline.engine import StreamOptions, StreamRunner
from yolo_edge.pipeline.postprocess import Detections
from yolo_edge.pipeline.preprocess import read_image
from yolo_edge.pipeline.sources import parse_source
from yolo_edge.runtime.events import EventLog, EventSummary
from yolo_edge.validate.accuracy import Scorer, detect_all
from yolo_edge.validate.conditions import Judged, judge_under
from yolo_edge.validate.latency import LATENCY_IMAGES, LatencyResult, measure_latency
from yolo_edge.validate.noise import Frames, Spread, time_beside_reference


def bundle_eval_data(
    bundle: Bundle, data: str | Path | EvalData | None = None, class_map: str | None = None
) -> EvalData:
    """``data`` if given (an already resolved :class:`EvalData` as it is), else what deploy validated the bundle
    on: the demo val split, or the user's data set where it still is, without the images that calibrated. Given
    ``data`` leaves out the bundle's calibration images too."""
    if isinstance(data, EvalData):
        return data
    names = bundle.meta.model.names
    if data is not None:
        return resolve_eval_data(data, names, class_map, bundle.meta.calib)
    if class_map:
        raise YoloEdgeError("--class-map maps the classes of --data's data set: pass --data with it, or drop it")
    recorded = bundle.meta.data
    origin = recorded.origin
    if origin == DEMO:
        return resolve_eval_data(None, names)
    if not Path(origin).exists():
        raise YoloEdgeError(
            f"{bundle.path} was validated on {origin}, which is not on this machine; pass --data "
            "(the same data set, or a folder of images for agreement with the FP32 reference)"
        )
    print(
        f"yolo-edge: judging on {origin}, the data {bundle.path} was deployed with (--data to choose)", file=sys.stderr
    )
    return resolve_eval_data(origin, names, recorded.class_map, recorded.excluded)


@dataclass(frozen=True)
class ValResult(Judged):
    """The deployed plan against the FP32 reference on the data as given (:class:`Judged`'s figures), and under
    each condition asked for."""

    conditions: dict[str, Judged] = field(default_factory=dict)  # the same, each on the images changed so
    unjudged: tuple[str, ...] = ()  # conditions under which the reference found nothing to agree with (no labels)

    def to_dict(self) -> dict[str, Any]:
        return plain(
            {
                **super().to_dict(),
                "conditions": {name: c.to_dict() for name, c in self.conditions.items()},
                "conditions_unjudged": list(self.unjudged),
            }
        )


@dataclass(frozen=True)
class ValRequest:
    """What ``val`` measures a bundle on: ``data`` (default: what deploy used) with its ``class_map``, and under each
    of ``conditions`` (names in :data:`~yolo_edge.validate.conditions.CONDITIONS`: the plan and its reference both
    see the changed images). ``shards`` (or ``ray_address``, then one shard per CPU of the cluster): the images
    detected in that many shards on Ray, one compiled detector per Ray actor, their detections merged in order and
    scored once: the same mAP as unsharded."""

    data: str | Path | EvalData | None = None
    class_map: str | None = None
    conditions: Sequence[str] = ()
    shards: int | None = None
    ray_address: str | None = None


def val_bundle(
    bundle: Bundle, request: ValRequest | None = None, quiet: bool = True, detector: Detector | None = None
) -> ValResult:
    """mAP (or agreement) of the bundle's plan (``detector``, default: built from the bundle) and of the FP32
    reference, as the ``request`` asks (:class:`ValRequest`)."""
    r = request or ValRequest()
    conditions, shards, ray_address = r.conditions, r.shards, r.ray_address
    cfg = bundle.config
    ev = bundle_eval_data(bundle, r.data, r.class_map)
    if conditions and (shards is not None or ray_address is not None):
        raise YoloEdgeError("--conditions runs on this machine only: drop --shards / --ray-address, or --conditions")
    under: dict[str, dict[str, Judged]] = {}
    if shards is not None or ray_address is not None:
        ref, dep = detect_sharded(bundle, ev, shards, ray_address)
    else:
        bar = progress_bar(not quiet)
        with (
            bundle.reference_detector() as reference,
            nullcontext(detector) if detector else bundle.detector(as_placed=True) as deployed,
        ):
            ref = detect_all(reference, ev.dataset, cfg.val_nms, bar, "reference")
            dep = detect_all(deployed, ev.dataset, cfg.val_nms, bar, "deployed")
            asked = tuple(cast(Sequence[Condition], conditions))
            every = replace(
                cfg, plan=replace(cfg.plan, search_looks=()), validate=replace(cfg.validate, conditions=asked)
            )
            under = judge_under(reference, {"deployed": deployed}, ev, every, bar)  # on every image
    scorer = Scorer(ev, ref, cfg.validate, cfg.nms, agreement=False)  # on labels, agreement decides nothing
    ref_acc, dep_acc = scorer.score(ref), scorer.score(dep)
    drift = dep_acc.minus(ref_acc)
    judged = {name: plans["deployed"] for name, plans in under.items() if plans}
    unjudged = tuple(name for name, plans in under.items() if not plans)
    return ValResult(ref_acc.map, dep_acc.map, drift.interval, dep_acc.kept, len(ev.dataset), ev.kind, judged, unjudged)


def bench_spread(
    bundle: Bundle,
    ev: EvalData,
    runs: int | None,
    detector: Detector,
    decided: Callable[[Spread], bool] = lambda _s: True,
    bar: Bar | None = None,
) -> tuple[LatencyResult, Spread | None]:
    """End-to-end and per-phase latency of the bundle's plan (``detector``) on up to 16 images of ``ev`` and,
    where it is measured (not a simulated board's, which is exact), its spread beside the FP32 reference timed in
    turn (:mod:`yolo_edge.validate.noise`); timed again once when ``decided`` says the first pass did not
    decide."""
    cfg = bundle.config
    images = [read_image(r.path) for r in ev.dataset.records[:LATENCY_IMAGES]]
    n = runs or cfg.validate.latency_runs
    bar = bar or progress_bar(False)
    if detector.frame_determined:
        return measure_latency(detector, images, cfg.validate.latency_warmup, n, ticks(bar, n, "latency")), None
    with bundle.reference_detector() as reference:
        return time_beside_reference(detector, reference, Frames(images, cfg.validate.latency_warmup, n), decided, bar)


@dataclass(frozen=True)
class BenchResult:
    """``yolo-edge bench``'s figures: the plan's latency end to end and by phase, its spread beside the FP32 reference
    (None: a simulated board's, exact), the fallback events while timed and the placement problems the bundle has
    here."""

    latency: LatencyResult
    spread: Spread | None
    events: EventSummary
    placement_problems: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.latency.to_dict(),
            "spread": None if self.spread is None else self.spread.to_dict(),
            "fallback_events": self.events.to_dict(),
            "placement_problems": self.placement_problems,
        }


@dataclass(frozen=True)
class StreamsBench:
    """``bench --streams N``: the bundle's pipelined run (``run``'s engine) on N streams of the same frames against
    one stream, timed here one after the other, every frame delivered: frames a second, every stream together (the
    frames are files, read as fast as the pipeline takes them: a camera's capture-to-result latency is ``run``'s)."""

    streams: int
    frames: int  # each stream's
    aggregate_fps: float
    one_stream_fps: float

    @property
    def ratio(self) -> float:
        return self.aggregate_fps / self.one_stream_fps

    def to_dict(self) -> dict[str, Any]:
        return plain({**self.__dict__, "ratio": self.ratio, "kind": "measured"})


def bench_streams(
    bundle: str | Path | Bundle, data: str | Path | None = None, streams: int = 2, runs: int | None = None
) -> StreamsBench:
    """The bundle's stream engine on ``streams`` copies of ``runs`` frames of ``data``'s images (default: what deploy
    judged on; ``runs``: its config's latency runs), after one stream of them on the same compiled detector."""
    check_streams(streams)
    b = bundle if isinstance(bundle, Bundle) else load_bundle(bundle)
    records = bundle_eval_data(b, data).dataset.records
    n = runs or b.config.validate.latency_runs
    with tempfile.TemporaryDirectory(prefix="yolo-edge-streams-") as tmp, b.detector() as detector:
        folder = Path(tmp)
        for i in range(n):  # the images cycled to ``n`` frames: links, not copies
            path = Path(records[i % len(records)].path).resolve()
            (folder / f"{i:06d}{path.suffix}").symlink_to(path)
        one, many = (_streamed(detector, [str(folder)] * k) for k in (1, streams))
    return StreamsBench(streams, n, many, one)


def check_streams(streams: int) -> None:
    """``bench --streams``'s count, before any work: a one-line error out of range."""
    if not 2 <= streams <= MAX_STREAMS:
        raise YoloEdgeError(f"--streams must be a whole number of streams from 2 to {MAX_STREAMS}, got {streams}")


def _streamed(detector: Detector, sources: list[str]) -> float:
    """Aggregate FPS of a pipelined run over ``sources``, every frame delivered."""
    with StreamRunner(detector, [parse_source(s) for s in sources], StreamOptions()) as runner:
        runner.run(lambda _r: None)
        missing = sum(st.read - st.delivered for st in runner.stats)
        if missing or runner.aggregate_fps is None:
            raise YoloEdgeError(f"bench --streams: {missing} frames of {len(sources)} streams were not delivered")
        return runner.aggregate_fps


def bench_bundle(
    bundle: str | Path | Bundle, data: str | Path | None = None, runs: int | None = None, bar: Bar | None = None
) -> BenchResult:
    """Time a bundle's plan as ``yolo-edge bench`` does: on ``data``'s images (default: what deploy judged on),
    ``runs`` frames (default: its config's), in turn with the FP32 reference where the latency is measured."""
    b = bundle if isinstance(bundle, Bundle) else load_bundle(bundle)
    events = EventLog()
    with b.detector(events) as detector:
        problems = list(detector.executor.placement_problems)
        lat, spread = bench_spread(b, bundle_eval_data(b, data), runs, detector, bar=bar)
    return BenchResult(lat, spread, events.summary(), problems)


class ShardWorker:
    """A Ray actor: the bundle's deployed detector and its FP32 reference, compiled once, over its shards."""

    def __init__(self, bundle: str) -> None:
        opened = load_bundle(bundle)
        self.nms = opened.config.val_nms
        self.detectors = {"deployed": opened.detector(as_placed=True), "reference": opened.reference_detector()}

    def detect(self, which: str, paths: list[str]) -> list[Detections]:
        return [self.detectors[which].detect(read_image(p), self.nms)[0] for p in paths]


def detect_sharded(
    bundle: Bundle, ev: EvalData, shards: int | None, ray_address: str | None
) -> tuple[list[Detections], list[Detections]]:
    """The reference's and the deployed plan's detections of every image of ``ev``, in order, computed in
    ``shards`` contiguous shards by as many Ray actors (default, and at most: one per CPU of the Ray cluster)."""
    if shards is not None and shards < 1:
        raise YoloEdgeError(f"--shards must be >= 1, got {shards}")
    paths = [str(r.path) for r in ev.dataset.records]
    with ray_session(ray_address) as ray:  # a local Ray of this machine's CPUs, not one CPU per asked shard
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        # at most one actor (a compiled detector, about 250 MB) per CPU: an actor holds its CPU for life, so more
        # would wait for ever or, on a local Ray sized to the shards, oversubscribe the cores
        n = max(1, min(len(paths), shards or cpus, cpus))
        actor = ray.remote(num_cpus=1)(ShardWorker)
        workers = [actor.remote(str(bundle.path.absolute())) for _ in range(n)]
        size = -(-len(paths) // n)
        parts = [paths[i * size : (i + 1) * size] for i in range(n)]
        merged = {}
        for which in ("reference", "deployed"):
            found = ray.get([w.detect.remote(which, part) for w, part in zip(workers, parts)])
            merged[which] = [d for part in found for d in part]
    return merged["reference"], merged["deployed"]
