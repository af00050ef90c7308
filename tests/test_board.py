"""A simulated board's latency is the board's (``yolo_edge/devices/board.py``): every phase of a frame (letterbox,
the NPU units, the CPU units, transfers, NMS) modelled from the profile, so a plan's latency and its SLA verdict
are the same on a fast host and a slow one; a measured profile still measures the host."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from yolo_edge.backends import board_model
from yolo_edge.backends.builder import Builder
from yolo_edge.backends.onnxruntime.backend import OrtExecutable
from yolo_edge.core.config import BOARD, Faults, load_deploy_config, load_profile
from yolo_edge.devices.board import BoardCpu
from yolo_edge.model.graph import GraphInfo
from yolo_edge.pipeline.detector import Detector
from yolo_edge.pipeline.preprocess import default_calib_dir, read_image
from yolo_edge.plan.placement import PlacementPlan
from yolo_edge.runtime.build import build_units, plan_units
from yolo_edge.runtime.events import EventLog
from yolo_edge.runtime.executor import SplitExecutor
from yolo_edge.validate.latency import LatencyResult, measure_latency
from yolo_edge.validate.verdict import Limits, failures

SLOW_S = 0.03  # what a slow host adds to every CPU-side session call


def _images() -> list[np.ndarray]:
    return [read_image(p) for p in sorted(default_calib_dir().glob("*.jpg"))[:3]]


def _timed(  # type: ignore[no-untyped-def]
    demo_split, tensors, device: str, monkeypatch: pytest.MonkeyPatch, rounds: int = 1
) -> tuple[list[LatencyResult], list[LatencyResult]]:
    """The backbone on ``device``'s accelerator in INT8, the rest on the CPU: latency on this host as it is, then
    with every onnxruntime call slowed down by SLOW_S, ``rounds`` times in turn (a shared host's load at one moment
    falls on both)."""
    profile, cfg = load_profile(device), load_deploy_config()
    plan = PlacementPlan.manual(demo_split, {"backbone": "int8"}, device)
    units = build_units(demo_split, plan, Builder(profile), tensors[:2], EventLog())
    images = _images()
    run = OrtExecutable._run

    def slow(self: OrtExecutable, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        time.sleep(SLOW_S)
        return run(self, feeds)

    quick: list[LatencyResult] = []
    slowed: list[LatencyResult] = []
    with Detector(SplitExecutor(units, cfg.runtime, profile), demo_split.exported.meta, cfg.nms) as detector:
        detector.detect(images[0])  # warm-up
        for _ in range(rounds):
            quick.append(measure_latency(detector, images, 0, 3))
            with monkeypatch.context() as patched:
                patched.setattr(OrtExecutable, "_run", slow)
                slowed.append(measure_latency(detector, images, 0, 3))
    return quick, slowed


def test_a_simulated_boards_latency_and_verdict_do_not_depend_on_the_host(demo_split, tensors, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (quick,), (slowed,) = _timed(demo_split, tensors, "rk3588-approx", monkeypatch)
    assert quick.kind == slowed.kind == BOARD
    assert quick.end_to_end == slowed.end_to_end and quick.phases == slowed.phases
    limits = Limits(0.01, quick.end_to_end.p95 + 1.0)  # an SLA the board meets by 1 ms
    assert failures(None, quick.end_to_end.p95, limits) == failures(None, slowed.end_to_end.p95, limits)


def test_a_simulated_boards_cpu_phases_are_its_cpu_models(demo_split, tensors, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    profile = load_profile("rk3588-approx")
    assert profile.cpu is not None
    board = BoardCpu(profile.cpu)
    (quick,), _ = _timed(demo_split, tensors, "rk3588-approx", monkeypatch)
    plan = PlacementPlan.manual(demo_split, {"backbone": "int8"}, "rk3588-approx")
    for unit in plan_units(demo_split, plan, fuse=True)[1:]:  # the units after the backbone: the board's CPU
        assert unit.device == "cpu"
        want_ms = board.graph_s(GraphInfo.of(unit.model)) * 1e3
        assert quick.phases[unit.name].p50 == pytest.approx(want_ms, abs=1e-3)
    # letterbox: the three images' modelled times; none is this host's
    images = _images()
    letterbox_ms = sorted(board.letterbox_s(*i.shape[:2], demo_split.exported.meta.imgsz) * 1e3 for i in images)
    assert letterbox_ms[0] - 1e-3 <= quick.phases["preprocess"].p50 <= letterbox_ms[-1] + 1e-3
    assert quick.phases["decode+nms"].p50 > 0 and quick.phases["transfers"].p50 > 0  # the link is the board's too


def test_a_simulated_boards_frames_are_simulated_once_each_unless_faults_are_injected(demo_split, tensors) -> None:  # type: ignore[no-untyped-def]
    """A board frame's time is a function of the frame: 7 timed frames over 3 images simulate each image once (no
    warm-up), and the 7 samples are those three timings, cycled, equal to timing them again. With injected faults
    a frame's fate is the call's: every warm-up and timed frame runs."""
    cfg, images = load_deploy_config(), _images()
    for faults, calls_wanted in ((Faults(), 3), (Faults(error_rate=0.5, seed=1), 2 + 7)):
        profile = replace(load_profile("rk3588-approx"), faults=faults)
        plan = PlacementPlan.manual(demo_split, {"backbone": "int8"}, "rk3588-approx")
        units = build_units(demo_split, plan, Builder(profile), tensors[:2], EventLog())
        with Detector(SplitExecutor(units, cfg.runtime, profile), demo_split.exported.meta, cfg.nms) as detector:
            calls: list[np.ndarray] = []

            def counted(image: np.ndarray, nms: object = None, detect=detector.detect, calls=calls):  # type: ignore[no-untyped-def]
                calls.append(image)
                return detect(image, nms)

            detector.detect = counted  # type: ignore[method-assign]
            result = measure_latency(detector, images, 2, 7)
            assert len(calls) == calls_wanted and result.runs == len(result.samples_ms) == 7
            if not faults.any:
                again = [detector.detect(image)[1].end_to_end_ms for image in images]
                assert list(result.samples_ms) == [again[i % 3] for i in range(7)]


def test_a_board_detector_replays_the_images_it_remembers(demo_split, tensors) -> None:  # type: ignore[no-untyped-def]
    """``remember(2)``: the first two distinct images are simulated once; seen again they give the same detections
    and timing without an executor run; a third image, and every image of a measured profile, runs each time."""
    cfg, images = load_deploy_config(), _images()
    for device, runs_wanted in (("rk3588-approx", 3 + 1), ("host-lowp", 2 * 3)):
        profile = load_profile(device)
        plan = PlacementPlan.manual(demo_split, {"backbone": "int8"}, device)
        units = build_units(demo_split, plan, Builder(profile), tensors[:2], EventLog())
        executor = SplitExecutor(units, cfg.runtime, profile)
        runs: list[int] = []
        run = executor.run
        executor.run = lambda feeds, frame=0, run=run, runs=runs: runs.append(frame) or run(feeds, frame)  # type: ignore[method-assign]
        with Detector(executor, demo_split.exported.meta, cfg.nms) as detector:
            detector.remember(2)
            first = [detector.detect(image) for image in images]
            again = [detector.detect(image.copy()) for image in images]
        assert len(runs) == runs_wanted, device
        for (d1, t1), (d2, t2) in zip(first, again):
            assert np.array_equal(d1.xyxy, d2.xyxy) and np.array_equal(d1.confidence, d2.confidence)
            if device == "rk3588-approx":
                assert t1 == t2


@pytest.mark.alone  # host latencies, compared: not beside another worker's deploy
def test_a_measured_profile_still_measures_the_host(demo_split, tensors, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The control: on host-lowp (a real device, measured) the slowed host shows in the latency."""
    quick, slowed = _timed(demo_split, tensors, "host-lowp", monkeypatch, rounds=3)
    assert {r.kind for r in quick + slowed} == {"measured"}
    # the fastest frames of runs taken in turn: a busy host slows some frames of either, never the slowdown out of
    # every slowed one
    fastest = [min(s for r in runs for s in r.samples_ms) for runs in (quick, slowed)]
    assert fastest[1] > fastest[0] + SLOW_S * 1e3 * 0.9


def test_the_board_itself_measures(tmp_path: Path) -> None:
    """On the board (the profile's accelerator present) nothing is modelled: ``yolo-edge bench`` there measures,
    and its result can be the baseline. A board-only runtime faked here: an importable ``rknnlite``."""
    fake = tmp_path / "rknnlite"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "api.py").write_text("class RKNNLite:\n    pass\n")
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        assert board_model(load_profile("rk3588")) is None
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.split(".")[0] == "rknnlite"]:
            del sys.modules[name]
    assert isinstance(board_model(load_profile("rk3588-approx")), BoardCpu)
    assert board_model(load_profile("host-lowp")) is None and board_model(load_profile("cpu")) is None
