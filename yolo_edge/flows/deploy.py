"""``deploy``: export -> split -> plan -> search -> validate -> report -> bundle, in one call.

The planner's four checks leave, per subgraph, the precision variants that pass them; the search
(``yolo_edge.flows.search``) judges the placements they combine into, fastest estimate first, with the verdict
(drift against the FP32 reference, p95 against the SLA) until one passes. Three plans are then compared on
the same images, as in the reference's case study: **whole-npu** (the whole graph on the accelerator at its
first precision), **whole-cpu** (FP32 on the CPU, the reference) and **split** (the search's choice, or
when nothing passed, the fastest whose drift is undecided within the limit, else the first it judged). Each gets a
status (ok, or the check it fails), end-to-end latency percentiles (the plans timed together, frame by frame in
turn, so that a noisy minute on a shared machine does not pick the winner), a memory peak and its mAP drift against
the FP32 reference: on labels of the model's own classes, or, without them, as agreement with the reference
(``validate.accuracy``), both reported where both exist. Calibration images never judge
(``data.resolve``). The chosen plan is the faster (p95) of split and whole-cpu that is ok; whole-npu is
reported for comparison only (the decode must stay FP32 on the CPU). When no plan is ok the verdict is
FAIL (exit 1) with each plan's reason, or UNDECIDED (exit 4, as ``check``) where the chosen plan's only reasons are
intervals that straddle their limits (drift on too few images, a p95 within a busy machine's noise): the bundle is
written either way.

Example:
    >>> result = deploy(out="out/bundle")  # the demo model on `auto`  # doctest: +SKIP
    >>> result.report.passed, result.report.chosen.name  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
import logging
import math
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from yolo_edge.backends import open_backend, resolve_device
from yolo_edge.backends.base import Backend, NpuCompileError
from yolo_edge.backends.builder import Builder
from yolo_edge.bundle.layout import BundleMeta, Contents, DataRecord, bundle_files
from yolo_edge.bundle.write import check_writable, write_bundle
from yolo_edge.core.cluster import probe
from yolo_edge.core.config import (
    BOARD,
    MAX_BATCH,
    MAX_STREAMS,
    DeployConfig,
    DeviceProfile,
    PlanConfig,
    load_deploy_config,
)
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import printable
from yolo_edge.core.host import cpu_name
from yolo_edge.core.progress import Bar, progress_bar
from yolo_edge.core.version import __version__
from yolo_edge.data.resolve import Calibration, DataSource, EvalData, read_data, resolve_data
from yolo_edge.demo import CLASS_NAMES
from yolo_edge.devices.limits import Residency, ResidentMemory, memory_use
from yolo_edge.devices.throughput import CAMERA_FPS, Throughput, not_modelled, plan_throughput, stages
from yolo_edge.flows.report import DeployReport, report_files
from yolo_edge.flows.search import (
    Laps,
    SearchRecord,
    SearchResult,
    Session,
    plan_detector,
    search_plans,
    with_reason,
)
from yolo_edge.flows.trial_shards import TrialShards
from yolo_edge.model.export import export_model
from yolo_edge.model.graph import GraphInfo
from yolo_edge.model.meta import ExportedModel, ImgSize, demo_model_path
from yolo_edge.model.split import SplitModel, split_model
from yolo_edge.pipeline.detector import Detector
from yolo_edge.pipeline.preprocess import (
    Letterboxed,
    default_calib_dir,
    letterbox,
    load_calibration,
    load_images,
    read_image,
)
from yolo_edge.plan.placement import PlacementPlan, PlanSpace, boundary_tensors
from yolo_edge.plan.planner import plan_space
from yolo_edge.plan.results import Memory
from yolo_edge.runtime.audit import Lighting, audit_floors
from yolo_edge.runtime.build import BatchProof, build_units, plan_units, prove_batch, unit_sample, whole_graph_unit
from yolo_edge.runtime.events import EventLog
from yolo_edge.runtime.executor import SplitExecutor
from yolo_edge.runtime.units import Unit
from yolo_edge.toolchains.worker import LOG as TOOLCHAIN_LOG
from yolo_edge.validate.accuracy import detect_all
from yolo_edge.validate.conditions import CONDITIONS, Judged, first_images, judge_under
from yolo_edge.validate.latency import LATENCY_IMAGES
from yolo_edge.validate.noise import Frames, time_in_rounds
from yolo_edge.validate.verdict import UNDECIDED_EXIT, Limits, PlanRun, choose, explain

Log = Callable[[str], None]
DEMO_IMGSZ = 320


PLANNER = ("nncf", "openvino", "matplotlib", "onnxslim")  # the [deploy] extra: what a board install leaves out


def require_planner() -> None:
    """A one-line error, before any work, where the planner's packages are not installed (a board install runs,
    benches and checks bundles; planning and deploying are the ``deploy`` extra)."""
    missing = []
    for name in PLANNER:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    if missing:
        raise YoloEdgeError(
            f"planning and deploying need {', '.join(missing)}, which this install leaves out (a board install runs, "
            "benches and checks bundles): pip install 'yolo-edge[deploy]'"
        )


def demo_imgsz(model: str | Path) -> int | None:
    """320 for the demo model however it is named (default, relative or absolute path): the size it was trained and
    is deployed at; None (the exporter's 640) for any other."""
    try:
        return DEMO_IMGSZ if Path(str(model)).resolve() == demo_model_path().resolve() else None
    except OSError:
        return None


def _memory(plan: PlacementPlan, split: SplitModel, which: str) -> int:
    if which == "whole-cpu":
        info = GraphInfo.of(split.exported.load())
        return info.peak_activation_bytes() + info.weight_bytes()
    if which == "whole-npu":
        return plan.whole_graph_npu.required_bytes
    placed = [s.checks["memory"].measured for s in plan.subgraphs if s.device == "npu"]
    return max((m.required_bytes for m in placed if isinstance(m, Memory)), default=0)


@dataclass
class DeployResult:
    report: DeployReport  # report.json is ``report.to_dict()``
    bundle: Path
    exit_code: int


@dataclass
class _Plans:
    """The three plans compared by one deploy: their runs, their detectors, and the split's compiled units."""

    whole: PlanRun
    reference: PlanRun
    split: PlanRun
    detectors: dict[str, Detector]
    split_units: list[Unit]
    events: EventLog  # the split's fallback events

    @property
    def runs(self) -> list[PlanRun]:
        return [self.whole, self.reference, self.split]


def open_device(stack: ExitStack, device: str) -> tuple[DeviceProfile, Backend]:
    """``device``'s profile and its accelerator backend, open in ``stack`` (the one a deploy checks is the one it
    compiles with: a vendor's toolchain worker starts once), after a one-line error where it cannot run here or the
    planner is not installed."""
    profile = resolve_device(device)
    npu = stack.enter_context(open_backend(profile))
    require_planner()
    return profile, npu


@dataclass
class Searched:
    """What planning and the search found for one model on one profile (``plan_deployment``)."""

    split: SplitModel
    evaldata: EvalData
    calibration: Calibration
    calib_tensors: list[dict[str, np.ndarray]]  # boundary tensors of the images units calibrate on
    space: PlanSpace  # what the four checks left
    builder: Builder  # every graph of this deploy is compiled by it, once (the checks', the trials', the bundle's)
    search: SearchResult
    plan: PlacementPlan  # the split plan: the search's choice, else its fallback, else the first it judged
    calibrated_conditions: tuple[str, ...] = ()  # conditions some calibration images were changed by


def plan_deployment(
    session: Session, exported: ExportedModel, source: DataSource | None, request: DeployRequest
) -> Searched:
    """Resolve the data (``source``, read from the request's; evaluation and disjoint calibration images), plan
    ``exported`` on the session's profile and search the plan space with the verdict. What it opens (the builder,
    the reference's and the chosen plan's detectors) is closed with the session's stack, the builder last."""
    profile, cfg, stack, say = session.profile, session.cfg, session.stack, session.say
    n_calib = cfg.calib_images + cfg.checks.precision.images
    names = exported.meta.names
    evaldata, calibration = resolve_data(source, request.calib, names, n_calib, request.class_map)
    for warning in (evaldata.warning, calibration.warning):
        if warning:
            say(f"warning: {warning}")
    used = len(calibration.files)
    cal = min(cfg.calib_images, used - 1)  # as the planner splits them (plan/planner.py)
    precision = min(cfg.checks.precision.images, used - cal)
    say(
        f"calibrating on {cal} images and checking precision on {precision} more (calib_images, "
        f"checks.precision.images; {calibration.source}); judging on {len(evaldata.dataset)} others "
        f"({evaldata.source})"
    )
    split = split_model(exported)
    images = load_images(calibration.files, exported.meta.imgsz)
    changed = _calibrate_conditions(cfg, calibration, images, cal, exported.meta.imgsz)
    if changed:
        say(f"calibrating with every other image changed by {', '.join(changed)} (validate.calibrate_conditions)")
    say(f"planning on {profile.name} ({profile.kind}, latency {profile.latency})")
    builder = stack.enter_context(Builder(profile, session.npu))
    session.laps.lap("data")
    space, planner = plan_space(split, builder, cfg, images, request.strict, say)
    session.laps.lap("checks")
    calib_tensors = boundary_tensors(split, images[: cfg.calib_images], planner.fp32)
    say("whole-cpu: the FP32 reference")
    all_cpu = space.placement(space.cpu_plans()).all_cpu()
    units = build_units(split, all_cpu, builder, calib_tensors, EventLog(), fuse=cfg.runtime.fuse_units)
    executor = SplitExecutor(units, cfg.runtime, profile, borrowed=True)
    reference = stack.enter_context(Detector(executor, exported.meta, cfg.nms))
    reference.remember(LATENCY_IMAGES)
    if request.shards is not None or request.ray_address is not None:
        shards = TrialShards(exported, profile, cfg, calib_tensors, request.shards, request.ray_address)
        session = replace(session, shards=stack.enter_context(shards))
        say(f"judging the trials' images in {shards.count} shards on Ray (their latency here)")
    found = search_plans(space, planner, session, calib_tensors, evaldata, reference)
    if found.detector is not None:
        stack.enter_context(found.detector)
    shown = found.record.shown
    plan = with_reason(shown.plan if shown else space.candidates()[0], found.record)
    return Searched(split, evaldata, calibration, calib_tensors, space, builder, found, plan, changed)


def _calibrate_conditions(
    cfg: DeployConfig, calibration: Calibration, images: list[np.ndarray], cal: int, imgsz: ImgSize
) -> tuple[str, ...]:
    """With ``validate.calibrate_conditions``: every other of the ``cal`` calibration images (in ``images``, in
    place) changed by the conditions in turn; the conditions used."""
    names = cfg.validate.conditions if cfg.validate.calibrate_conditions else ()
    for k, i in enumerate(range(1, cal, 2) if names else ()):
        images[i] = letterbox(CONDITIONS[names[k % len(names)]](read_image(calibration.files[i]), i), imgsz).tensor
    return tuple(names[: max(0, cal // 2)])


@dataclass
class PlanResult:
    """What ``yolo-edge plan`` shows: the plan, the space the four checks left, the search (None: not judged)."""

    plan: PlacementPlan
    space: PlanSpace
    search: SearchRecord | None
    warning: str | None = None  # what the figures cannot show (a foreign model checked on the demo's shapes)


@dataclass(frozen=True)
class DeployRequest:
    """What a deploy (or a plan) is asked: the model and its input size, the device, the images it is judged and
    calibrated on, and the settings. The CLI's argument groups build one (``yolo_edge.cli.common.deploy_request``),
    and so does the sweep for each point of its grid."""

    model: str | Path | None = None  # .pt, .yaml or .onnx; default: the shipped demo
    device: str = "auto"  # a profile's name or YAML; auto: the best real accelerator present
    imgsz: int | str | None = None  # default: the demo's 320, else the model's own
    data: str | Path | None = None  # judging images (labelled, or a folder: agreement); default: the demo's
    calib: str | Path | None = None  # calibration images; default: the demo's, else some of ``data``'s
    class_map: str | None = None  # the data set's classes to the model's: DATA=MODEL,...
    config: str | Path | DeployConfig | None = None  # a deploy config (YAML or loaded); default: the shipped one
    sla_ms: float | None = None  # overrides the config's validate.sla_ms
    max_drift: float | None = None  # overrides the config's validate.max_drift
    batch: int | None = None  # overrides the config's plan.batch: frames a call of an accelerator unit
    streams: tuple[int, float | None] | None = None  # overrides plan.streams and plan.fps: cameras, and each one's rate
    strict: bool = False  # fail instead of falling back to the CPU
    shards: int | None = None  # the trials' judging images detected in this many shards on a local Ray
    ray_address: str | None = None  # or on this Ray cluster, one shard per CPU


@dataclass
class _Opened:
    """A request's device and data opened, its model exported (in ``stack``): what deploy and plan start from."""

    session: Session
    source: DataSource | None
    exported: ExportedModel


def _open(request: DeployRequest, stack: ExitStack, say: Log, bar: Bar) -> _Opened:
    """The request's settings, device (its backend open: a one-line error where it cannot run here), data (a bad
    one fails before the export) and its model exported into a folder of ``stack``'s."""
    laps = Laps()
    _say_progress(stack, say)
    cfg = deploy_settings(request.config, request.sla_ms, request.max_drift, request.batch, request.streams)
    profile, npu = open_device(stack, request.device)
    source = None if request.data is None else read_data(request.data)
    model = request.model or demo_model_path()
    imgsz = request.imgsz if request.imgsz is not None else demo_imgsz(model)
    tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="yolo-edge-deploy-"))
    say(f"exporting {model}")
    exported = export_model(model, imgsz=imgsz, out_dir=tmp)
    laps.lap("export")  # the device opened (a toolchain worker started) and the model exported
    return _Opened(Session(profile, cfg, stack, say, bar, npu, laps=laps), source, exported)


class _Said(logging.Handler):
    """What the toolchains' logger says (a long vendor step's heartbeat), said as the deploy's progress."""

    def __init__(self, say: Log) -> None:
        super().__init__(logging.INFO)
        self.say = say

    def emit(self, record: logging.LogRecord) -> None:
        self.say(record.getMessage())


def _say_progress(stack: ExitStack, say: Log) -> None:
    """The toolchains' progress said through ``say`` for as long as ``stack`` is open."""
    handler = _Said(say)
    TOOLCHAIN_LOG.addHandler(handler)
    if TOOLCHAIN_LOG.level == logging.NOTSET or TOOLCHAIN_LOG.level > logging.INFO:
        TOOLCHAIN_LOG.setLevel(logging.INFO)
    stack.callback(TOOLCHAIN_LOG.removeHandler, handler)


def search_plan(request: DeployRequest, log: Log | None = None, bar: Bar | None = None) -> PlanResult:
    """Plan the request's model on its device and, with images to judge on (``data``, or the demo's own for the
    demo's classes), search the candidates with the verdict: deploy without the bundle. Without them only the four
    checks run and the candidates are listed by estimate (``search`` is None)."""
    with ExitStack() as stack:
        opened = _open(request, stack, log or (lambda _m: None), bar or progress_bar(False))
        session, exported = opened.session, opened.exported
        if opened.source is not None or exported.meta.names == CLASS_NAMES:
            found = plan_deployment(session, exported, opened.source, request)
            return PlanResult(found.plan, found.space, found.search.record)
        warning = None
        if request.calib is None:  # the demo's synthetic shapes say little of another model's inputs: said, loudly
            names = exported.meta.names
            shown = printable(", ".join(names[:4]) + (", ..." if len(names) > 4 else ""), 80)
            warning = (
                f"the model's {len(names)} classes ({shown}) are not the demo's, and no --data or --calib was given: "
                "its INT8 calibration and precision check ran on the demo's synthetic shapes, which say little of its "
                "inputs; pass --calib (or --data) with its own images"
            )
        session.say("no --data: the candidates are not judged (pass --data with the model's own images to search them)")
        cfg = session.cfg
        n = cfg.calib_images + cfg.checks.precision.images
        images = load_calibration(request.calib or default_calib_dir(), exported.meta.imgsz, n)
        builder = stack.enter_context(Builder(session.profile, session.npu))
        split = split_model(exported)
        space, _ = plan_space(split, builder, cfg, images, request.strict, session.say)
        return PlanResult(space.candidates()[0], space, None, warning)


def deploy(
    request: DeployRequest | None = None, out: str | Path = "out/bundle", quiet: bool = False, log: Log | None = None
) -> DeployResult:
    """Deploy the ``request``'s model (default: the shipped demo on ``auto``) and prove it, the bundle written to
    ``out``; see the module docstring."""
    say: Log = log or ((lambda _m: None) if quiet else (lambda m: print(m, file=sys.stderr)))
    request = request or DeployRequest()
    out = Path(out)
    check_writable(out)
    if request.ray_address is not None:  # a cluster that is not there (or not Ray) is said now, not after the work
        probe(request.ray_address)
    t0 = time.perf_counter()
    with ExitStack() as stack:
        opened = _open(request, stack, say, progress_bar(not quiet))
        session, exported = opened.session, opened.exported
        cfg = session.cfg
        found = plan_deployment(session, exported, opened.source, request)
        plans = _compare(session, found)
        session.laps.lap("three plans")
        under, unjudged = _conditions(session, found, plans)
        session.laps.lap("conditions")
        # whole-npu is a comparison row, never the deployment: decode must stay FP32 on the CPU
        chosen, none_ok = choose([plans.reference, plans.split], cfg.plan.tie_margin)  # FP32 first: wins a tie
        chosen_plan = found.plan if chosen.name == "split" else found.plan.all_cpu()
        report = _report(
            session, str(request.model or demo_model_path()), found, chosen_plan, plans, (chosen, none_ok), t0
        )
        memory = resident(session, found, found.plan)  # the split plan's: what the planner sized
        served = _throughput(session, found, chosen, chosen_plan, memory if chosen.name == "split" else None)
        report = replace(
            report,
            reasons=report.reasons
            + ((f"throughput: {served.reason}",) if served.asked and served.status != "ok" else ()),
            conditions=under,
            conditions_not_judged=unjudged,
            memory=memory,
            batch=_batch_proof(session, found, plans, exported.meta.imgsz),
            throughput=served,
            calibrated_conditions=found.calibrated_conditions,
            timings_s=session.laps.s,
        )
        files = _bundle_files(session, exported, found, plans, chosen_plan, report)
    bundle = write_bundle(out, files)
    return DeployResult(report, bundle, 0 if report.passed else UNDECIDED_EXIT if report.undecided else 1)


def _bundle_files(
    session: Session,
    exported: ExportedModel,
    found: Searched,
    plans: _Plans,
    chosen_plan: PlacementPlan,
    report: DeployReport,
) -> dict[str, bytes]:
    """Everything the bundle holds, by relative path: the chosen plan's units and events, and what proved it."""
    profile, cfg = session.profile, session.cfg
    on_split = report.chosen.name == "split"
    evaldata, calib_files = found.evaldata, list(found.calibration.files)
    data = DataRecord(evaldata.origin, evaldata.kind, evaldata.class_map, evaldata.excluded)
    meta = BundleMeta(
        __version__,
        exported.meta,
        profile.name,
        report.chosen.name,
        data,
        cfg.validate.sla_ms,
        cfg.runtime.fuse_units,
        tuple(p.name for p in calib_files),
        None if report.chosen.kept is None else (report.chosen.kept.kept, report.chosen.kept.of),
        added=None if report.chosen.kept is None else (report.chosen.kept.added, report.chosen.kept.boxes),
    )
    units = plans.split_units if on_split else []
    events = plans.events if on_split else EventLog()
    planned = plan_units(found.split, chosen_plan, cfg.runtime.fuse_units)
    if units:  # the runtime audit's floors (each accelerator unit's worst agreement with its twin) and lighting
        images = _proof_images(found, exported.meta.imgsz)
        floors = audit_floors(units, [{found.split.input.name: lb.tensor} for lb in images])
        planned = [replace(u, audit_floor=floors.get(u.name)) for u in planned]
        meta = replace(meta, lighting=Lighting.of([lb.inside for lb in images]))
    sample = unit_sample(planned, found.calib_tensors[0], found.builder)
    contents = Contents(
        meta=meta,
        exported=exported,
        split=found.split,
        plan=chosen_plan,
        profile=as_served(profile, report.throughput),
        config=cfg,
        planned=planned,
        units=units,
        sample=sample,
        calib_files=calib_files,
        events=events,
    )
    return bundle_files(contents, report_files(report))


def as_served(profile: DeviceProfile, served: Throughput | None) -> DeviceProfile:
    """The profile a bundle keeps: where deploy was asked for streams, with the way it chose to run the
    accelerator's cores (``multicore.contexts_per_core``, ``all_cores``), which ``run`` then holds."""
    if served is None or not served.asked or served.chosen is None:
        return profile
    mode = served.chosen.mode
    chosen = replace(profile.multicore, contexts_per_core=mode.contexts_per_core, all_cores=mode.all_cores)
    return replace(profile, multicore=chosen)


FLOOR_JUDGING = 64  # judging images the audit floors are measured on, beside the calibration source's


def _proof_images(found: Searched, imgsz: ImgSize) -> list[Letterboxed]:
    """The images the audit's floors and lighting come from: the calibration source's (calibration and precision
    check) and the first judging images, letterboxed."""
    paths = [*found.calibration.files, *(r.path for r in found.evaldata.dataset.records[:FLOOR_JUDGING])]
    return [letterbox(read_image(p), imgsz) for p in paths]


def _streams(plan: PlanConfig, streams: int, fps: float | None) -> PlanConfig:
    """``plan`` with deploy's ``--streams`` and ``--fps`` (a one-line error out of range)."""
    if not 1 <= streams <= MAX_STREAMS:
        raise YoloEdgeError(f"--streams must be a whole number of cameras from 1 to {MAX_STREAMS}, got {streams}")
    if fps is not None and not (math.isfinite(fps) and 0 < fps <= 1000):
        raise YoloEdgeError(f"--fps must be a rate a camera captures at, above 0 and at most 1000, got {fps}")
    return replace(plan, streams=streams, fps=plan.fps if fps is None else float(fps))


def deploy_settings(
    config: str | Path | DeployConfig | None,
    sla_ms: float | None,
    max_drift: float | None = None,
    batch: int | None = None,
    streams: tuple[int, float | None] | None = None,
) -> DeployConfig:
    """The deploy settings (a YAML path, which sets only what it changes, or a :class:`DeployConfig`; default: the
    shipped ones) with ``sla_ms``, ``max_drift``, ``batch`` and ``streams`` (cameras, each one's FPS or None) if given
    (a one-line error out of range)."""
    cfg = config if isinstance(config, DeployConfig) else load_deploy_config(config)
    v = cfg.validate
    if streams is not None:
        cfg = replace(cfg, plan=_streams(cfg.plan, *streams))
    if batch is not None and not 1 <= batch <= MAX_BATCH:
        raise YoloEdgeError(f"--batch must be a whole number of frames from 1 to {MAX_BATCH}, got {batch}")
    if batch is not None:
        cfg = replace(cfg, plan=replace(cfg.plan, batch=batch))
    if sla_ms is not None and not (math.isfinite(sla_ms) and sla_ms > 0):
        raise YoloEdgeError(f"--sla-ms must be positive, got {sla_ms}")
    if max_drift is not None and not (math.isfinite(max_drift) and 0 <= max_drift <= 1):
        raise YoloEdgeError(f"--max-drift must be between 0 and 1 (a share of mAP), got {max_drift}")
    sla = v.sla_ms if sla_ms is None else float(sla_ms)
    drift = v.max_drift if max_drift is None else float(max_drift)
    return replace(cfg, validate=replace(v, sla_ms=sla, max_drift=drift))


def _compare(session: Session, found: Searched) -> _Plans:
    """whole-npu, whole-cpu and the split: detections and accuracy (the split's and the reference's from the
    search), latency measured together frame by frame in turn, status judged."""
    cfg, stack, bar, say = session.cfg, session.stack, session.bar, session.say
    search, split, plan = found.search, found.split, found.plan
    reference = search.reference
    reference.memory_peak_bytes = _memory(plan, split, "whole-cpu")
    shown = search.record.shown
    split_run = replace(shown.run, name="split") if shown is not None else PlanRun("split", same_as_cpu=True)
    split_run.memory_peak_bytes = _memory(plan, split, "split")  # a copy: the trial keeps what the search measured
    detectors = {"whole-cpu": search.reference_detector, "split": search.detector or search.reference_detector}
    whole, whole_detector = _whole_npu(session, plan, found)
    if whole_detector is not None:
        detectors["whole-npu"] = stack.enter_context(whole_detector)
        whole.detections = detect_all(whole_detector, found.evaldata.dataset, cfg.val_nms, bar, "whole-npu: validate")
        whole.accuracy = search.scorer.score(whole.detections)
        assert reference.accuracy is not None
        whole.accuracy_drift = whole.accuracy.minus(reference.accuracy)
    say(f"latency: {', '.join(detectors)}, frame by frame in turn")
    bench_images = [read_image(r.path) for r in found.evaldata.dataset.records[:LATENCY_IMAGES]]
    frames = Frames(bench_images, cfg.validate.latency_warmup, cfg.validate.latency_runs)
    latencies, spreads = time_in_rounds(detectors, "whole-cpu", frames, bar=bar)
    limits = Limits(cfg.validate.max_drift, cfg.validate.sla_ms)
    for run in (whole, reference, split_run):
        run.latency, run.spread = latencies.get(run.name), spreads.get(run.name)
        run.judge(limits)
    return _Plans(whole, reference, split_run, detectors, search.units, search.events)


def _conditions(session: Session, found: Searched, plans: _Plans) -> tuple[dict[str, dict[str, Judged]], str]:
    """The split and the design card's layout (where it is another plan) under ``validate.conditions``, each against
    the FP32 reference under the same one, on the first ``conditions_images`` judging images; with
    ``conditions_verdict``, a condition whose drift fails the split (or leaves it undecided) is in its verdict.
    Judged only where they can change the answer or describe the plan deployed (:func:`unjudged`); else none, and
    why not (the second of the pair)."""
    v, cfg = session.cfg.validate, session.cfg
    why_not = unjudged(plans.split, v.conditions_verdict) if v.conditions else ""
    if not v.conditions or why_not:
        if why_not:
            session.say(f"conditions: not judged: {why_not}")
        return {}, why_not
    detectors = {"split": plans.detectors["split"]}
    card = found.search.record.card
    if card is not None and card.plan != found.plan:
        built, _ = plan_detector(found.split, card.plan, found.builder, cfg, found.calib_tensors, EventLog())
        detectors["design card"] = session.stack.enter_context(built)
    ev = first_images(found.evaldata, v.conditions_images)
    session.say(f"conditions: {', '.join(v.conditions)} on {len(ev.dataset)} judging images, {', '.join(detectors)}")
    judged = judge_under(plans.detectors["whole-cpu"], detectors, ev, cfg, session.bar)  # with looks
    if v.conditions_verdict:
        for name, by in judged.items():
            plans.split.fails += [f"{f} under {name}" for f in by["split"].verdict(v.max_drift)] if by else []
    return judged, ""


def resident(session: Session, found: Searched, plan: PlacementPlan) -> ResidentMemory | None:
    """``plan``'s accelerator units (the split plan's: what the planner sized, deployed or not) as the runtime holds
    them together (``plan.batch`` frames a call, a context per NPU core, the backend's ``RuntimeMemory``) against the
    profile's budget; None: no unit on the accelerator."""
    cfg, profile = session.cfg, session.profile
    units = [u for u in plan_units(found.split, plan, cfg.runtime.fuse_units) if u.device == "npu"]
    if not units:
        return None
    held = Residency(cfg.plan.batch, profile.npu_cores, found.builder.npu.memory)
    uses = [(u.name, memory_use(GraphInfo.of(u.model), u.variant.precision, u.variant.scheme, held)) for u in units]
    return ResidentMemory.of(uses, profile)


def _throughput(
    session: Session, found: Searched, chosen: PlanRun, plan: PlacementPlan, memory: ResidentMemory | None
) -> Throughput:
    """How many cameras the deployed plan serves on the board (``deploy --streams N --fps F``: whether it serves N at
    F each, which the verdict then judges): its modelled phases through the stream engine's stages, on the profile's
    cores as its ``multicore`` model says (devices/throughput.py), its accelerator units' ``memory`` counted for every
    context; a profile measured here is not modelled."""
    cfg, profile = session.cfg, session.profile
    load, sla = (cfg.plan.streams, cfg.plan.fps or CAMERA_FPS), cfg.validate.sla_ms
    asked = cfg.plan.streams > 1 or cfg.plan.fps is not None
    if chosen.latency is None or chosen.latency.kind != BOARD:
        return not_modelled(load, profile, sla, asked)
    npu = [u.name for u in plan_units(found.split, plan, cfg.runtime.fuse_units) if u.device == "npu"]
    phases = {name: p.p50 for name, p in chosen.latency.phases.items()}
    held = [] if memory is None else [u for _, u in memory.units]
    return plan_throughput(stages(phases, npu, profile), profile, load, sla, asked, held)


def _batch_proof(session: Session, found: Searched, plans: _Plans, imgsz: ImgSize) -> BatchProof | None:
    """``deploy --batch N`` (N > 1) on the split plan's accelerator units, as ``run`` would take it: the batch they run
    at and why, and each batched frame against its batch-1 call on the first N proof images (None: batch 1, or
    nothing on the accelerator)."""
    batch = session.cfg.plan.batch
    if batch == 1 or not any(u.npu is not None for u in plans.split_units):
        return None
    images = [lb.tensor for lb in _proof_images(found, imgsz)[:batch]]
    frames = boundary_tensors(found.split, images)
    return prove_batch(plans.split_units, found.builder, batch, frames)


def unjudged(split: PlanRun, in_verdict: bool) -> str:
    """Why the conditions are not judged for ``split`` ('' where they are): they judge a split that can be deployed
    (it passed: they describe it, and with ``in_verdict`` may fail it) or, with ``in_verdict``, an undecided one
    (a condition's failed drift makes it fail). A split that already fails, or is undecided while they are no part
    of its verdict, is not deployed whatever they say: judging it there (minutes on a real model) changes nothing."""
    if split.same_as_cpu:
        return "the split puts nothing on the accelerator"
    if split.ok or (in_verdict and split.undecided):
        return ""
    part = "" if in_verdict else " and they are no part of it (validate.conditions_verdict: false)"
    return f"the split's verdict is not a pass ({split.status}){part}: nothing they say would change the plan deployed"


def _report(
    session: Session,
    model: str,
    found: Searched,
    chosen_plan: PlacementPlan,
    plans: _Plans,
    choice: tuple[PlanRun, list[str]],
    t0: float,
) -> DeployReport:
    """The plans, the verdict (``choice``: the chosen run, and why none passed) and why, the data it was proven
    on, both placements, the search, fallback events."""
    (chosen, none_ok), profile, cfg = choice, session.profile, session.cfg
    assert chosen.latency is not None
    limits = Limits(cfg.validate.max_drift, cfg.validate.sla_ms)
    reasons = (["no plan passes: " + "; ".join(none_ok)] if none_ok else []) + explain(
        chosen.fails, chosen.drift, chosen.latency.end_to_end.p95, limits, chosen.drift_interval, chosen.spread
    )
    return DeployReport(
        model=model,
        model_names=found.evaldata.dataset.names,
        profile=profile,
        host_cpu=cpu_name(),
        imgsz=found.plan.imgsz,
        limits=limits,
        plans=tuple(plans.runs),
        chosen=chosen,
        reasons=tuple(reasons),
        data=found.evaldata,
        calibration=found.calibration,
        placement=chosen_plan,
        split_plan=found.plan,
        search=found.search.record,
        fallback_events=plans.events.summary(),
        wall_s=round(time.perf_counter() - t0, 1),
    )


def _whole_npu(session: Session, plan: PlacementPlan, found: Searched) -> tuple[PlanRun, Detector | None]:
    """The whole-graph plan, and its detector for accuracy and the joint latency run (None if it cannot run)."""
    profile, cfg, say = session.profile, session.cfg, session.say
    w, split = plan.whole_graph_npu, found.split
    run = PlanRun("whole-npu", planned=w.failed_checks, memory_peak_bytes=_memory(plan, split, "whole-npu"))
    if w.failed_check in ("op_support", "memory") or w.variant is None:
        return run, None
    say(f"whole-npu: the whole graph at {w.variant.label}")
    name = split.input.name
    try:
        calib = [{name: c[name]} for c in found.calib_tensors]
        unit = whole_graph_unit(split.exported.load(), found.builder, w.variant, calib)
    except NpuCompileError:
        run.planned = ("to compile",)
        return run, None
    executor = SplitExecutor([unit], cfg.runtime, profile, as_placed=True, borrowed=True)
    detector = Detector(executor, split.exported.meta, cfg.nms)
    detector.remember(LATENCY_IMAGES)
    return run, detector
