"""The verdict on a user's own model and data: which data scores it, agreement without labels, one
status rule, the INT8 activation scheme chosen per machine, the end-to-end precision criterion, and a
bundle that carries what it was proven with.

The foreign model is ``tests/data/coins_sparks_yolov8n.pt`` (2 classes, trained weights; see
scripts/train_second_model.py), not the demo.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from tests.second_model import SECOND_CLASSES
from yolo_edge.backends import cpu_backend
from yolo_edge.backends.base import CalibSet, Executable
from yolo_edge.backends.builder import Builder
from yolo_edge.backends.openvino.backend import OpenVinoBackend
from yolo_edge.bundle import load_bundle
from yolo_edge.cli.main import main
from yolo_edge.core.config import DeployConfig, Variant, load_deploy_config, load_profile
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.host import THREADS_ENV
from yolo_edge.core.progress import progress_bar
from yolo_edge.core.stats import Percentiles
from yolo_edge.data.dataset import Dataset, load_dataset
from yolo_edge.data.resolve import EvalData, apply_class_map, parse_class_map, resolve_data, resolve_eval_data
from yolo_edge.demo import CLASS_NAMES
from yolo_edge.demo.shapes import write_dataset
from yolo_edge.flows.deploy import DeployRequest, DeployResult, deploy
from yolo_edge.model.export import export_model
from yolo_edge.model.meta import ExportedModel
from yolo_edge.model.split import SplitModel, split_model
from yolo_edge.pipeline.detector import Detector
from yolo_edge.pipeline.postprocess import Detections
from yolo_edge.pipeline.preprocess import PAD_VALUE, default_calib_dir, load_calibration
from yolo_edge.plan.checks import Checker, int8_variants
from yolo_edge.plan.placement import PlacementPlan, boundary_tensors
from yolo_edge.plan.planner import Planner, plan_space
from yolo_edge.plan.results import Precision
from yolo_edge.runtime.build import build_units, whole_graph_unit
from yolo_edge.runtime.events import EventLog
from yolo_edge.runtime.executor import SplitExecutor
from yolo_edge.validate.accuracy import (
    Accuracy,
    Interval,
    Kept,
    MapResult,
    Scorer,
    boxes_kept,
    coco_map,
    coco_rows,
    detect_all,
    gt_coco,
)
from yolo_edge.validate.bootstrap import Evaluation, Resamples
from yolo_edge.validate.latency import LatencyResult
from yolo_edge.validate.verdict import Limits, PlanRun, choose, explain, failures, kept_text, more_images, status

NO_BAR = progress_bar(False)


@pytest.fixture(scope="module")
def second(second_model: Path, tmp_path_factory: pytest.TempPathFactory) -> ExportedModel:
    return export_model(second_model, imgsz=256, out_dir=tmp_path_factory.mktemp("second"))


@pytest.fixture(scope="module")
def shapes_val(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """30 labelled images with the demo's six shape classes (not the second model's names)."""
    return write_dataset(tmp_path_factory.mktemp("shapes"), seed=5, sizes={"val": 30})


def _cpu_detector(model: ExportedModel, cfg: DeployConfig, fuse: bool = True) -> Detector:
    """All-CPU FP32: the four subgraphs fused into one unit (the monolithic model) or run in sequence."""
    split = split_model(model)
    sample = boundary_tensors(split, load_calibration(default_calib_dir(), model.meta.imgsz, 1))
    units = build_units(
        split, PlacementPlan.manual(split, {}, "cpu"), Builder(load_profile("cpu")), sample, EventLog(), fuse=fuse
    )
    return Detector(SplitExecutor(units, cfg.runtime), model.meta, cfg.nms)


# ---------------------------------------------------------------- which data scores a model


def test_labels_of_other_classes_are_refused_with_both_name_lists(shapes_val: Path) -> None:
    with pytest.raises(YoloEdgeError) as err:
        resolve_eval_data(shapes_val, ("coin", "spark"))
    msg = str(err.value)
    assert "circle" in msg and "coin" in msg and "--class-map" in msg and "\n" not in msg
    with pytest.raises(
        YoloEdgeError,
        match="--class-map circle=circle,rectangle=rectangle,.*ring=ring \\(the same names in another order\\)",
    ):
        resolve_eval_data(shapes_val, tuple(reversed(CLASS_NAMES)))


def test_deploy_refuses_labels_of_other_classes(
    second_model: Path, shapes_val: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bundle"
    argv = [
        "deploy",
        "--model",
        str(second_model),
        "--imgsz",
        "256",
        "--data",
        str(shapes_val),
        "--out",
        str(out),
        "--quiet",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("yolo-edge deploy: error:") and "\n" not in err
    assert "[0=circle, 1=rectangle" in err and "[0=coin, 1=spark] (2)" in err
    assert not out.exists() and not list(tmp_path.iterdir())


def test_calibration_and_evaluation_images_are_disjoint(tmp_path: Path) -> None:
    """The user's images calibrate a foreign model (evenly spread, at most half) and the rest judge it; --calib
    images that are also in --data are left out of the judging; the shipped set calibrates the demo only."""
    folder = tmp_path / "photos"
    write_dataset(folder, seed=9, sizes={"val": 30}, classes=SECOND_CLASSES)
    images = folder / "images" / "val"
    ev, calib = resolve_data(images, None, ("coin", "spark"), 40)
    judged = {r.path for r in ev.dataset.records}
    assert len(calib.files) == 15 and len(judged) == 15 and not judged & set(calib.files)
    assert calib.warning and "fewer than the 40" in calib.warning and ev.kind == "agreement"
    assert ev.excluded == tuple(sorted(p.name for p in calib.files))
    ev, calib = resolve_data(images, images, ("coin", "spark"), 8)  # --calib equal to --data
    assert len(calib.files) == 8 and len(ev.dataset) == 22 and calib.warning is None
    assert not {r.path.name for r in ev.dataset.records} & {p.name for p in calib.files}
    demo, shipped = resolve_data(None, None, CLASS_NAMES, 40)
    assert demo.kind == "labels" and len(demo.dataset) == 300 and shipped.files[0].parent == default_calib_dir()
    with pytest.raises(YoloEdgeError, match="pass --data with its own images"):
        resolve_data(None, None, ("coin", "spark"), 40)  # the shipped shapes are not another model's data
    two = tmp_path / "two"
    two.mkdir()
    for p in sorted(images.glob("*.jpg"))[:2]:
        shutil.copy(p, two)
    with pytest.raises(YoloEdgeError, match="at least 3"):
        resolve_data(two, None, ("coin", "spark"), 40)


def test_class_map_by_name_and_by_index(shapes_val: Path) -> None:
    ds = load_dataset(shapes_val)
    mapped, by_name = apply_class_map(ds, ("coin", "spark"), parse_class_map("circle=coin,3=1"))
    assert by_name == {"circle": "coin", "star": "spark"} and mapped.names == ("coin", "spark")
    for before, after in zip(ds.records, mapped.records):  # circles -> 0, stars -> 1, every other shape dropped
        assert np.array_equal(after.classes, np.where(before.classes == 0, 0, 1)[np.isin(before.classes, (0, 3))])
    for bad, message in (
        ("circle", "is not DATA=MODEL"),
        ("hexagon=coin", "'hexagon' is not a data class"),
        ("circle=7", "'7' is not a model class"),
        ("circle=coin,circle=spark", "mapped twice"),
    ):
        with pytest.raises(YoloEdgeError, match=message):
            apply_class_map(ds, ("coin", "spark"), parse_class_map(bad))


def test_class_map_scores_the_second_model_on_relabelled_shapes(
    second: ExportedModel, shapes_val: Path, fast_cfg: DeployConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real weights on real labels: mapped right, the coin/spark model scores well; mapped wrong, it scores nothing."""
    detector = _cpu_detector(second, fast_cfg)
    ds = load_dataset(shapes_val)
    dets = detect_all(detector, ds, fast_cfg.val_nms, NO_BAR, "")
    right, _ = apply_class_map(ds, second.meta.names, {"circle": "coin", "star": "spark"})
    wrong, _ = apply_class_map(ds, second.meta.names, {"circle": "spark", "star": "coin"})
    assert coco_map(right, dets).map50 > 0.5 and coco_map(wrong, dets).map50 < 0.1
    assert coco_map(right, dets) == _pycocotools_map(right, dets)  # faster-coco-eval: pycocotools' figures
    # the bootstrap re-accumulates the same per-image matches: every image once is COCOeval's figure exactly
    gt = gt_coco(right, [r.boxes for r in right.records], [r.classes for r in right.records])
    with contextlib.redirect_stdout(io.StringIO()):
        ev = Evaluation(gt, gt.loadRes(coco_rows(dets)))
    assert MapResult(*ev.map) == coco_map(right, dets)
    assert np.allclose(ev.resampled(np.arange(len(right))[None]), [ev.map])
    resamples = Resamples.draw(50, len(right), 1).images
    spread = ev.resampled(resamples)
    assert spread.std(axis=0).min() > 0.005  # resampling the images moves mAP: the figure has an uncertainty
    monkeypatch.setenv(THREADS_ENV, "1")  # the replicates one after the other: the same as on a thread per core
    alone = ev.resampled(resamples)
    monkeypatch.setenv(THREADS_ENV, str(min(2, os.cpu_count() or 1)))
    assert np.array_equal(ev.resampled(resamples), alone)


def test_a_drift_carries_a_paired_bootstrap_interval(
    second: ExportedModel, shapes_val: Path, fast_cfg: DeployConfig
) -> None:
    """A plan whose boxes are a few pixels off: its drift's bootstrap interval holds the figure,
    is far narrower than the two mAPs' own intervals (paired: what both get alike cancels), is zero for the
    reference against itself, and fails a plan whose whole interval is beyond the limit."""
    detector = _cpu_detector(second, fast_cfg)
    ds, _ = apply_class_map(load_dataset(shapes_val), second.meta.names, {"circle": "coin", "star": "spark"})
    ref = detect_all(detector, ds, fast_cfg.val_nms, NO_BAR, "")
    rng = np.random.default_rng(1)  # a plan whose boxes are off by a few pixels, as low precision moves them
    worse = [replace(d, xyxy=d.xyxy + rng.normal(0, 3, d.xyxy.shape).astype(np.float32)) for d in ref]

    scorer = Scorer(EvalData(ds, "shapes", "shapes", True), ref, fast_cfg.validate, fast_cfg.nms)
    own = scorer.score(ref)
    full = scorer.score(worse).minus(own)
    assert own.minus(own).interval == Interval(MapResult(0.0, 0.0), MapResult(0.0, 0.0), 0.9, len(ds))
    i = full.interval
    assert i is not None and i.images == len(ds) and full.labels is not None
    assert i.lo.map50 <= full.labels.map50 <= i.hi.map50 and i.hi.map50 < 0  # it lost detections: a real drop
    own_i = own.interval
    assert own_i is not None and (i.hi.map50 - i.lo.map50) < (own_i.hi.map50 - own_i.lo.map50)
    assert status(failures(full.map, 10.0, Limits(0.01, 50.0), interval=i)) == "fails drift"  # all of it beyond


def test_boxes_kept_counts_the_references_boxes_a_user_sees_in_the_plans_output(
    second: ExportedModel, shapes_val: Path, fast_cfg: DeployConfig
) -> None:
    """The reference keeps all its boxes at the operating confidence; a plan whose best box in some images falls
    under it loses exactly those (though its mAP, scored down to conf 0.001, barely moves); a box of another class
    or at IoU under 0.5 keeps nothing."""
    box = np.array([[0.0, 0.0, 10.0, 10.0]], np.float32)
    half = np.array([[5.0, 0.0, 15.0, 10.0]], np.float32)  # IoU 1/3 with ``box``
    one, two = np.array([1]), np.array([2])
    assert boxes_kept([(box, one)], [(box + 1, one)]) == 1  # IoU 0.68: kept
    assert boxes_kept([(box, one)], [(box, two)]) == 0 and boxes_kept([(box, one)], [(half, one)]) == 0
    assert boxes_kept([(box, one), (box[:0], one[:0])], [(box[:0], one[:0]), (box, one)]) == 0  # per image

    detector = _cpu_detector(second, fast_cfg)
    ds, _ = apply_class_map(load_dataset(shapes_val), second.meta.names, {"circle": "coin", "star": "spark"})
    ref = detect_all(detector, ds, fast_cfg.val_nms, NO_BAR, "")
    conf = fast_cfg.nms.conf
    data = EvalData(ds, "shapes", "shapes", True)
    scorer = Scorer(data, ref, fast_cfg.validate, fast_cfg.nms)
    shown = sum(int((d.confidence >= conf).sum()) for d in ref)
    # the reference against itself: every box kept, none added (the other direction, boxes, counted too)
    assert shown > 10 and scorer.score(ref).kept == Kept(shown, shown, conf, None, 0, shown)
    # a user who keeps only class 0 (``nms.classes``) sees only its boxes: only those are counted
    coins = sum(int(((d.confidence >= conf) & (d.class_id == 0)).sum()) for d in ref)
    only = Scorer(data, ref, fast_cfg.validate, replace(fast_cfg.nms, classes=(0,)))
    assert 0 < coins < shown and only.score(ref).kept == Kept(coins, coins, conf, (0,), 0, coins)
    assert "boxes of classes [0] at conf" in kept_text(Kept(coins, coins, conf, (0,)))

    def dimmed(d: Detections) -> Detections:  # the image's best box scored just under the operating confidence
        c = d.confidence.copy()
        if len(c) and c.max() >= conf:
            c[c.argmax()] = conf * 0.99
        return replace(d, confidence=c)

    lost = [dimmed(d) if i % 2 else d for i, d in enumerate(ref)]
    dropped = sum(1 for i, d in enumerate(ref) if i % 2 and len(d.confidence) and d.confidence.max() >= conf)
    worse = scorer.score(lost)
    # boxes dimmed under the threshold are lost, none added: the plan shows that many fewer
    assert dropped >= 3 and worse.kept == Kept(shown - dropped, shown, conf, None, 0, shown - dropped)
    assert worse.minus(scorer.score(ref)).kept == worse.kept  # a drift carries the plan's count


def test_an_interval_across_the_limit_is_undecided_and_says_how_many_images_decide_it() -> None:
    limits = Limits(max_drift=0.01, sla_ms=50.0)

    def interval(lo: float, hi: float, images: int = 5) -> Interval:
        return Interval(MapResult(lo, lo), MapResult(hi, hi), 0.9, images)

    near = MapResult(-0.0092, -0.0092)
    straddles = interval(-0.03, 0.01)
    assert failures(near, 10.0, limits) == []  # judged on the figure alone it passes
    assert status(failures(near, 10.0, limits, interval=straddles)) == "undecided drift"
    assert failures(MapResult(-0.02, -0.02), 10.0, limits, interval=interval(-0.03, -0.012)) == ["drift"]
    assert failures(near, 10.0, limits, interval=interval(-0.0099, -0.008)) == []  # all of it within the limit
    assert status(failures(near, 60.0, limits, interval=straddles)) == "fails SLA, drift undecided"
    # the interval's low side reaches 0.0208 below the figure; 0.0008 is the margin: (0.0208 / 0.0008)^2 x 5 images
    more = more_images(near, straddles, -0.01)
    assert more is not None and abs(more - (5 * (0.0208 / 0.0008) ** 2 - 5)) < 2
    assert more_images(MapResult(-0.01, -0.01), straddles, -0.01) is None  # at the limit: no number decides
    (line,) = explain(["undecided drift"], near, 10.0, limits, straddles)
    assert "undecided" in line and f"about {more} more judging images" in line and "over 5 images" in line
    run = PlanRun("split", latency=_latency(10.0), accuracy_drift=Accuracy(near, None))
    run.judge(limits)
    assert run.ok  # no replicates: the figure alone decides, as before


def _pycocotools_map(dataset: Dataset, detections: list) -> MapResult:  # type: ignore[type-arg]
    """mAP50 and mAP50-95 by pycocotools itself, on the same ground truth and results rows."""
    import contextlib
    import io

    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    gt = COCO()
    gt.dataset = gt_coco(dataset, [r.boxes for r in dataset.records], [r.classes for r in dataset.records]).dataset
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
        ev = COCOeval(gt, gt.loadRes(coco_rows(detections)), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return MapResult(float(ev.stats[1]), float(ev.stats[0]))


# ---------------------------------------------------------------- agreement


def test_agreement_of_the_fp32_split_with_the_monolithic_model(
    second: ExportedModel, fast_cfg: DeployConfig, tmp_path: Path
) -> None:
    """Four FP32 subgraphs in sequence vs the one-graph model on an unlabelled folder: no drift on the
    pseudo-labels; the reference's own figure is a labelled-scale mAP (below 1), the same every time (seeded
    draws); detections of other images drift far; an empty reference is refused."""
    folder = tmp_path / "photos"
    write_dataset(folder, seed=9, sizes={"val": 20}, classes=SECOND_CLASSES)
    ev = resolve_eval_data(folder / "images" / "val", second.meta.names)
    assert ev.kind == "agreement" and ev.dataset.names == second.meta.names
    sample = [{"images": load_calibration(default_calib_dir(), second.meta.imgsz, 1)[0]}]
    whole = Detector(
        SplitExecutor(
            [whole_graph_unit(second.load(), Builder(None, cpu_backend()), Variant("fp32"), sample)], fast_cfg.runtime
        ),
        second.meta,
        fast_cfg.nms,
    )
    ref = detect_all(whole, ev.dataset, fast_cfg.val_nms, NO_BAR, "")
    four = detect_all(_cpu_detector(second, fast_cfg, fuse=False), ev.dataset, fast_cfg.val_nms, NO_BAR, "")
    assert sum(int((d.confidence >= fast_cfg.nms.conf).sum()) for d in ref) >= 20  # the reference sees coins and sparks
    scorer = Scorer(ev, ref, fast_cfg.validate, fast_cfg.nms)
    own = scorer.score(ref)
    assert own.labels is None and own.agreement is not None and 0.3 < own.agreement.map50_95 < own.agreement.map50 < 1
    assert Scorer(ev, ref, fast_cfg.validate, fast_cfg.nms).score(ref) == own
    split = scorer.score(four).minus(own).map
    assert split.map50 >= -0.002 and split.map50_95 >= -0.002
    shuffled = scorer.score(ref[1:] + ref[:1]).minus(own).map  # detections of other images
    assert shuffled.map50 < -0.3
    assert scorer.score(ref) == own  # the scores before left nothing behind in the draws
    empty = [replace(d, confidence=d.confidence * 0) for d in ref]
    with pytest.raises(YoloEdgeError, match="detects nothing"):
        Scorer(ev, empty, fast_cfg.validate, fast_cfg.nms)


# ---------------------------------------------------------------- one status rule


def _latency(p95: float) -> LatencyResult:
    return LatencyResult(Percentiles(p95 / 2, p95, p95, p95 / 2), {}, "measured", 1, 0.0, 0, (p95,))


def test_status_rule_and_choice() -> None:
    limits = Limits(max_drift=0.01, sla_ms=50.0)
    assert status(failures(MapResult(-0.02, 0.0), 10.0, limits)) == "fails drift"
    assert status(failures(MapResult(0.0, 0.0), 60.0, limits, planned=("precision",))) == "fails precision, SLA"
    assert (
        status(failures(MapResult(float("nan"), 0.0), float("nan"), limits)) == "fails drift, SLA"
    )  # NaN never passes
    assert status(failures(None, 10.0, limits)) == "fails drift"
    assert status(failures(None, None, limits, planned=("op_support",))) == "fails op_support"  # stopped before it ran
    assert status(failures(None, None, limits, planned=("memory", "precision"))) == "fails memory, precision"
    ref = PlanRun("whole-cpu", latency=_latency(40.0), accuracy_drift=Accuracy(MapResult(0.0, 0.0), None))
    fast_but_drifting = PlanRun(
        "split", latency=_latency(10.0), accuracy_drift=Accuracy(MapResult(-0.05, -0.03), MapResult(0.0, 0.0))
    )
    for r in (ref, fast_but_drifting):
        r.judge(limits)
    assert fast_but_drifting.status == "fails drift" and not fast_but_drifting.ok
    assert choose([ref, fast_but_drifting]) == (ref, [])
    slow = PlanRun("whole-cpu", latency=_latency(70.0), accuracy_drift=Accuracy(None, MapResult(0.0, 0.0)))
    slow.judge(limits)
    chosen, why = choose([slow, fast_but_drifting])  # nothing passes: the one within the drift limit, and why
    assert chosen is slow and why == ["whole-cpu fails SLA", "split fails drift"]
    # a near-tie by median goes to the first listed (FP32 whole-cpu): a busy moment must not flip it
    near = PlanRun("split", latency=_latency(38.4), accuracy_drift=Accuracy(MapResult(0.0, 0.0), None))
    clear = PlanRun("split", latency=_latency(30.0), accuracy_drift=Accuracy(MapResult(0.0, 0.0), None))
    for r in (near, clear):
        r.judge(limits)
    assert choose([ref, near], tie_margin=0.05)[0] is ref and choose([ref, near])[0] is near
    assert choose([ref, clear], tie_margin=0.05)[0] is clear
    # paired frame times: 10 % faster by median but far noisier than that is a tie; 20 % faster every round is not
    steady = [40.0 + (i % 2) for i in range(12)]
    noisy = replace(_latency(36.0), samples_ms=tuple(x * (0.5, 0.9, 1.3)[i % 3] for i, x in enumerate(steady)))
    ref_paired = PlanRun("whole-cpu", latency=replace(_latency(40.0), samples_ms=tuple(steady)),
                         accuracy_drift=Accuracy(MapResult(0.0, 0.0), None))  # fmt: skip
    quick = PlanRun("split", latency=replace(_latency(32.0), samples_ms=tuple(0.8 * x for x in steady)),
                    accuracy_drift=Accuracy(MapResult(0.0, 0.0), None))  # fmt: skip
    wobbly = PlanRun("split", latency=noisy, accuracy_drift=Accuracy(MapResult(0.0, 0.0), None))
    for r in (ref_paired, quick, wobbly):
        r.judge(limits)
    assert choose([ref_paired, quick], tie_margin=0.05)[0] is quick
    assert choose([ref_paired, wobbly], tie_margin=0.05)[0] is ref_paired


# ---------------------------------------------------------------- INT8 scheme per machine


class _Tampered(Executable):
    """A test double around a real executable: a fixed delay, or outputs scaled so their numerics fail."""

    def __init__(self, inner: Executable, delay_s: float, scale: float) -> None:
        super().__init__(inner.inputs, inner.outputs, inner.variant, inner.device, inner.model)
        self.inner, self.delay_s, self.scale = inner, delay_s, scale

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import time

        time.sleep(self.delay_s)
        return {k: v * self.scale for k, v in self.inner.run(feeds).items()}


class _OpenVino(OpenVinoBackend):
    """The real OpenVINO backend with one INT8 scheme tampered (test only): ``slow`` or ``broken``."""

    def __init__(self, schemes: tuple[str, ...], slow: str | None = None, broken: str | None = None) -> None:
        super().__init__("CPU", schemes, ("qdq",))
        self.slow, self.broken = slow, broken

    def _build(self, model: onnx.ModelProto, variant: Variant, program: Any) -> Executable:
        exe = super()._build(model, variant, program)
        scheme = exe.variant.scheme
        if exe.precision == "int8" and scheme in (self.slow, self.broken):
            return _Tampered(exe, 0.05 if scheme == self.slow else 0.0, 0.3 if scheme == self.broken else 1.0)
        return exe


def test_int8_schemes_are_ordered_by_measured_speed(demo: ExportedModel, fast_cfg: DeployConfig) -> None:
    images = load_calibration(default_calib_dir(), demo.meta.imgsz, 8)
    planner = Planner(split_model(demo), load_profile("host-lowp"), fast_cfg, images)
    neck = planner.subgraph_candidate("neck")
    for slow, first in (("s8", "u8"), ("u8", "s8")):
        checker = Checker(planner.profile, fast_cfg, Builder(planner.profile, _OpenVino(("u8", "s8"), slow=slow)))
        order, how = int8_variants(checker, neck)
        assert [v.scheme for v in order] == [first, slow] and "by measured speed" in how


def test_int8_scheme_falls_back_when_the_first_fails_its_numerics(demo: ExportedModel, fast_cfg: DeployConfig) -> None:
    """sim-edge-npu (modelled latency: the configured order) with s8 first and s8's numerics broken: the
    planner records s8's failure and places the neck at INT8 u8, the scheme it verified."""
    profile = load_profile("sim-edge-npu")
    from yolo_edge.backends.simulated import SimulatedNpu

    npu = SimulatedNpu(profile, _OpenVino(("s8", "u8"), broken="s8"))
    images = load_calibration(
        default_calib_dir(), demo.meta.imgsz, fast_cfg.calib_images + fast_cfg.checks.precision.images
    )
    space, planner = plan_space(split_model(demo), Builder(profile, npu), fast_cfg, images)
    planner.close()
    neck = space.candidates()[0]["neck"]
    assert (neck.device, neck.variant) == ("npu", Variant("int8", "u8", "qdq"))
    assert "all four checks pass at int8/u8/qdq" in neck.reason
    # the INT8 schemes only: whether OpenVINO offers FP16 here, and how it fares, depends on the CPU (AVX-512 FP16)
    int8 = [r for r in space.rejected["neck"] if r.variant.precision == "int8"]
    assert [r.variant.label for r in int8] == ["int8/s8/qdq"]
    assert "int8/s8/qdq failed precision" in int8[0].reason
    plan = space.candidates()[0]
    assert PlacementPlan.from_dict(json.loads(json.dumps(plan.to_dict())))["neck"].variant.scheme == "u8"


def test_demo_neck_at_int8_accepted_end_to_end_though_its_own_output_drifts(demo: ExportedModel) -> None:
    """With the shipped settings (32 calibration images, 8 check images), one check image's P5 output of the
    demo neck is at cosine ~0.91 at INT8, yet the detections it leads to are at >= 0.99: the end-to-end
    criterion accepts the neck and keeps the local figure as a warning."""
    cfg = load_deploy_config()
    images = load_calibration(default_calib_dir(), demo.meta.imgsz, cfg.calib_images + cfg.checks.precision.images)
    planner = Planner(split_model(demo), load_profile("host-lowp"), cfg, images)
    neck = planner.subgraph_candidate("neck")
    qdq = Builder(planner.profile, OpenVinoBackend("CPU", ("u8",), ("qdq",)))
    result = Checker(planner.profile, cfg, qdq).precision(neck, Variant("int8", "u8", "qdq"))
    n = result.measured
    assert isinstance(n, Precision) and n.local_min_cosine is not None and n.box_cosine and n.score_cosine
    assert n.local_min_cosine < cfg.checks.precision.local_min_cosine
    assert result.passed is True and "warning: own output" in result.reason
    assert min(n.box_cosine, n.score_cosine) >= cfg.checks.precision.min_cosine


# ---------------------------------------------------------------- a foreign model deployed, its bundle copied


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 unlabelled photos of coins and sparks: a user's own images for the second model."""
    folder = tmp_path_factory.mktemp("photos")
    write_dataset(folder, seed=9, sizes={"val": 40}, classes=SECOND_CLASSES)
    return folder / "images" / "val"


@pytest.fixture(scope="module")
def foreign(
    second_model: Path, photos: Path, small_cfg: Path, tmp_path_factory: pytest.TempPathFactory
) -> DeployResult:
    return deploy(
        DeployRequest(model=second_model, device="host-lowp", imgsz=256, data=photos, config=small_cfg),
        quiet=True,
        out=tmp_path_factory.mktemp("foreign") / "bundle",
    )


def test_foreign_model_on_its_own_photos_is_proven_by_agreement(foreign: DeployResult) -> None:
    """No --calib: 16 of the user's 40 photos calibrate (the small config asks 12 + 4), the other 24 judge."""
    r = foreign.report.to_dict()
    assert r["map"]["kind"] == "agreement" and r["data"]["kind"] == "agreement" and r["data"]["warning"] is None
    assert r["calibration"]["images"] == 16 and r["data"]["images"] == 24 and r["data"]["left_out_to_calibrate"] == 16
    ref = r["map"]["reference"]
    assert r["model_names"] == ["coin", "spark"] and 0.3 < ref["map50_95"] < ref["map50"] < 1.0
    plans = {p["name"]: p for p in r["plans"]}
    assert plans["whole-cpu"]["status"] == "ok" and plans["whole-cpu"]["map_drift"] == {"map50": 0.0, "map50_95": 0.0}
    assert plans["whole-npu"]["status"].startswith("fails precision")  # INT8 output0: the scores are gone here too
    kept = plans["whole-cpu"]["boxes_kept"]
    assert kept["kept"] == kept["of"] > 0 and kept["conf"] == 0.25  # the reference keeps its own boxes
    for p in plans.values():  # one rule: the status is what the numbers say
        d = p["map_drift"]
        drift = MapResult(d["map50"], d["map50_95"]) if d else None
        planned = (p["fails"][0],) if p["fails"] and p["fails"][0] not in ("drift", "SLA") else ()
        expected = status(
            failures(drift, (p["latency_ms"] or {}).get("p95"), Limits(r["max_drift"], r["sla_ms"]), planned)
        )
        if p["name"] == "split" and not any(s["device"] == "npu" for s in r["split_plan"]["subgraphs"]):
            expected = "no subgraph on the NPU (= whole-cpu)"  # nothing beat the CPU on this host: the same plan
        assert p["status"] == expected
    md = (foreign.bundle / "report.md").read_text()
    assert (
        "agreement with the FP32 reference" in md
        and "INT8 calibration and the precision check on 16 other images" in md
    )
    assert all(f"| {p['name']} | {p['status']} |" in md for p in r["plans"])
    assert "agreement drift 50-95 | boxes kept |" in md and f"| {kept['kept']}/{kept['of']} |" in md


def test_copied_bundle_passes_check_with_the_settings_it_was_deployed_with(
    foreign: DeployResult, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "elsewhere" / "bundle"
    shutil.copytree(foreign.bundle, copy)
    shutil.rmtree(foreign.bundle)
    plan = json.loads((copy / "plan.json").read_text())
    assert (
        plan["model"] == "model.onnx"
        and (copy / "deploy.yaml").is_file()
        and len(list((copy / "calib").iterdir())) == 16
    )
    assert main(["check", str(copy), "--runs", "5"]) == 0
    out = capsys.readouterr().out
    assert "agreement" in out and "status ok" in out and "over 24 images)" in out  # the photos that did not calibrate
    assert main(["check", str(copy), "--runs", "5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["limits"]["sla_ms"] == 10000.0  # the deploy config's SLA, not the package default


# ---------------------------------------------------------------- agreement on the labelled scale


@pytest.mark.slow
def test_agreement_verdict_equals_the_labelled_verdict_on_the_demo(demo: ExportedModel) -> None:
    """On 150 of the demo's labelled val images, for FP32, BF16 (where this CPU has it), INT8 u8 and s8, the head
    at INT8 and a broken plan (INT8 by onnxruntime's MinMax quantizer calibrated on a blank image), the drift
    verdict from agreement with the FP32 reference (no labels used) is the verdict from the labels. (Calibrated on
    one real image instead, the plan's drift sat just past the limit on a Xeon with AMX when the test ran alone and
    within it in a loaded run of the suite: not a plan that is broken on every CPU.)"""
    cfg = load_deploy_config()
    split = split_model(demo)
    host = load_profile("host-lowp")
    profile = replace(host, runtime_options=replace(host.runtime_options, int8_quantizer="auto"))  # NNCF and QDQ
    images = load_calibration(default_calib_dir(), demo.meta.imgsz, cfg.calib_images)
    calib = boundary_tensors(split, images)
    blank = boundary_tensors(split, [np.full_like(images[0], PAD_VALUE / 255)])  # the letterbox's grey, nothing else
    data = resolve_eval_data(None, demo.meta.names)
    data = replace(data, dataset=data.dataset.subset(150))
    bf16 = ["bf16"] if "bf16" in OpenVinoBackend().precisions else []
    plans: dict[str, tuple[dict[str, str], CalibSet]] = {
        "fp32": ({}, calib),
        **{p: ({"backbone": p, "neck": p}, calib) for p in (*bf16, "int8/u8", "int8/s8")},
        "head int8": ({"backbone": "int8/u8", "neck": "int8/u8", "head": "int8/u8"}, calib),
        "int8 on a blank image": ({"backbone": "int8/u8/qdq", "neck": "int8/u8/qdq", "head": "int8/u8/qdq"}, blank),
    }

    def detections(plan: PlacementPlan, on: CalibSet) -> list[Detections]:
        units = build_units(split, plan, Builder(profile), on, EventLog())
        with Detector(SplitExecutor(units, cfg.runtime, profile), demo.meta, cfg.nms) as d:
            return detect_all(d, data.dataset, cfg.val_nms, NO_BAR, "")

    runs = {name: detections(PlacementPlan.manual(split, npu, "host-lowp"), on) for name, (npu, on) in plans.items()}
    scorer = Scorer(data, runs["fp32"], cfg.validate, cfg.nms)
    reference = scorer.score(runs["fp32"])
    limit = cfg.validate.max_drift
    verdicts = {}
    for name, dets in runs.items():
        drift = scorer.score(dets).minus(reference)
        assert drift.labels is not None and drift.agreement is not None
        verdicts[name] = tuple(min(d.map50, d.map50_95) >= -limit for d in (drift.labels, drift.agreement))
    assert verdicts["fp32"] == (True, True), verdicts
    assert verdicts["int8 on a blank image"] == (False, False), verdicts  # broken by its calibration, not the scale
    assert all(labels == agreement for labels, agreement in verdicts.values()), verdicts


def test_check_fails_a_bundle_whose_accelerator_fails_every_call(
    demo_split: SplitModel,
    tensors: list,  # type: ignore[type-arg]
    fast_cfg: DeployConfig,
    tiny_images: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The runtime falls back to the CPU on every failed accelerator call, so no frame is lost and drift and
    latency alone read fine; the gate must still fail: what it measured is not the deployed plan. (A board's
    runtime that fails every call, faked by making the real OpenVINO executable raise, as a vendor runtime would.)
    The bundle puts backbone and neck on the accelerator by construction: a deploy's own choice depends on how
    busy the machine was while it timed."""
    from tests.conftest import plan_bundle
    from yolo_edge.backends.base import NpuError
    from yolo_edge.backends.openvino.backend import OpenVinoExecutable
    from yolo_edge.flows.gate import GateRequest, check_bundle
    from yolo_edge.plan.placement import PlacementPlan

    plan = PlacementPlan.manual(demo_split, {"backbone": "int8", "neck": "int8"}, "host-lowp")
    bundle = plan_bundle(tmp_path / "bundle", demo_split, plan, tensors, fast_cfg)

    def lost(self: OpenVinoExecutable, feeds: dict[str, np.ndarray], timeout_s: float = 0.0) -> dict[str, np.ndarray]:
        raise NpuError("device lost")

    assert [u.device for u in load_bundle(bundle).units].count("npu") >= 1
    monkeypatch.setattr(OpenVinoExecutable, "_run", lost)
    monkeypatch.setattr(OpenVinoExecutable, "_run_within", lost)  # the executor's call, bounded by OpenVINO
    result = check_bundle(bundle, GateRequest(runs=5, data=tiny_images))
    assert not result.passed and result.status.startswith("fails accelerator"), result.status
    assert "runtime_error" in result.failures[0] and "CPU fallback" in result.failures[0]


def test_val_gives_the_same_figures_when_the_accelerator_runs_slow(
    deployed: DeployResult, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A regression gate needs the same figure for the same bundle and data: an accelerator slowed as a busy machine
    slows it moves no unit to the FP32 CPU while val scores the plan (which would change its detections)."""
    import time

    from yolo_edge.backends.openvino.backend import OpenVinoExecutable
    from yolo_edge.flows.val import val_bundle

    bundle = load_bundle(deployed.bundle)
    quiet = val_bundle(bundle)
    run = OpenVinoExecutable._run_within  # the executor's call, bounded by OpenVINO

    def slow(self: OpenVinoExecutable, feeds: dict[str, np.ndarray], timeout_s: float) -> dict[str, np.ndarray]:
        time.sleep(0.05)  # far over slow_ratio x the CPU's time for the demo's units at 320
        return run(self, feeds, timeout_s)

    monkeypatch.setattr(OpenVinoExecutable, "_run_within", slow)
    busy = val_bundle(bundle)
    assert busy.deployed == quiet.deployed and busy.reference == quiet.reference


class _TopBoxOnly:
    """A plan that keeps only the most confident box of each image: the real FP32 detector under it, its output cut
    (a broken plan whose drift fails by construction)."""

    def __init__(self, detector: Detector) -> None:
        self.detector = detector

    def detect(self, image: np.ndarray, nms: Any) -> tuple[Detections, Any]:
        d, timing = self.detector.detect(image, nms)
        top = np.argsort(-d.confidence)[:1]
        return Detections(d.xyxy[top], d.confidence[top], d.class_id[top], d.names), timing


@pytest.mark.parametrize("threaded_s", [0.5, 2.0])
def test_the_conditions_keep_the_faster_of_one_after_the_other_and_a_thread_each(threaded_s: float) -> None:
    """The first images alternate one after the other (1 s an image, by an injected clock) and a thread each
    (``threaded_s``); after three of each the faster is kept, and the clock is not read again. Every image gets
    each detector's detections, in the detectors' order."""
    from concurrent.futures import ThreadPoolExecutor

    from yolo_edge.validate.conditions import Pace

    class Named:
        def __init__(self, name: str) -> None:
            self.name = name

        def detect(self, image: np.ndarray, nms: object) -> tuple[str, None]:
            return f"{self.name}:{int(image[0])}", None

    ticks: list[float] = []
    for k in range(3):  # one after the other, then a thread each, alternated
        ticks += [10.0 * k, 10.0 * k + 1.0, 10.0 * k + 5.0, 10.0 * k + 5.0 + threaded_s]
    clock = iter(ticks)
    detectors = [Named("a"), Named("b"), Named("c")]
    with ThreadPoolExecutor(2) as pool:
        pace = Pace(pool, None, lambda: next(clock))
        found = [pace.detect(detectors, np.array([i]), None) for i in range(8)]  # type: ignore[arg-type]
    assert pace.threaded is (threaded_s < 1.0)
    assert pace.took == {False: [1.0] * 3, True: [threaded_s] * 3}
    assert found == [[f"a:{i}", f"b:{i}", f"c:{i}"] for i in range(8)]


def test_conditions_judged_look_by_look_decide_as_on_every_image(demo: ExportedModel) -> None:
    """Under night and blur on 120 of the demo's labelled val images, judged look by look (a quarter and half: 30 and
    60 images, then 120): the FP32 model as four units (the same detections as the reference) passes at the first
    look and a plan that keeps only each image's top box fails there; judged on every image instead, both get the
    same verdicts, on 120 images each. The looks judged with an image's detectors on a thread each give the figures
    of one after the other."""
    from yolo_edge.validate.conditions import judge_under

    cfg = load_deploy_config()
    data = resolve_eval_data(None, demo.meta.names)
    data = replace(data, dataset=data.dataset.subset(120))
    with (
        _cpu_detector(demo, cfg) as reference,
        _cpu_detector(demo, cfg, fuse=False) as units,
        _cpu_detector(demo, cfg, fuse=False) as other,  # a detector of its own: each runs an image at a time
    ):
        plans = {"four units": units, "top box only": _TopBoxOnly(other)}
        cfg = replace(cfg, validate=replace(cfg.validate, conditions=("night", "blur")))
        looks = replace(cfg, plan=replace(cfg.plan, search_looks=(0.25, 0.5)))
        every = replace(cfg, plan=replace(cfg.plan, search_looks=()))
        looked = judge_under(reference, plans, data, looks, NO_BAR, True)  # type: ignore[arg-type]
        every = judge_under(reference, plans, data, every, NO_BAR)  # type: ignore[arg-type]
        serial = judge_under(reference, plans, data, looks, NO_BAR, False)  # type: ignore[arg-type]
    assert {c: {p: j.to_dict() for p, j in by.items()} for c, by in looked.items()} == {
        c: {p: j.to_dict() for p, j in by.items()} for c, by in serial.items()
    }
    limit = cfg.validate.max_drift
    for name in ("night", "blur"):
        assert {p: j.images for p, j in looked[name].items()} == {"four units": 30, "top box only": 30}, looked
        assert {p: j.images for p, j in every[name].items()} == {"four units": 120, "top box only": 120}
        assert looked[name]["four units"].verdict(limit) == every[name]["four units"].verdict(limit) == []
        assert looked[name]["top box only"].verdict(limit) == every[name]["top box only"].verdict(limit) == ["drift"]
        interval = looked[name]["top box only"].drift_interval
        assert interval is not None and interval.images == 30 and interval.level > cfg.validate.confidence
