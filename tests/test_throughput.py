"""Many cameras, one board: the multi-core model reproduces the published figures it was fitted to, the event
simulation serves what the stages allow (no more), the plan picks the way of running the cores that serves the
streams, and deploy's verdict judges the streams it was asked for."""

from __future__ import annotations

import json
import threading
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from yolo_edge.core.config import Multicore, load_profile
from yolo_edge.devices.throughput import (
    CoreMode,
    Stage,
    arrivals,
    on_cores,
    plan_throughput,
    simulate,
    stages,
    sustained,
)


def _fps(stage_list: list[Stage], mode: CoreMode, cores: int, frames: int = 600) -> float:
    latencies, _, _ = simulate(stage_list, mode, cores, [0.0] * frames)
    return sustained(latencies)


def test_the_rk3588_profile_reproduces_the_published_multi_core_figures() -> None:
    """YOLOv5s on RK3588 (benchmarks/throughput.py's sources): with the profile's fitted call gap and tri-core share,
    one context a core gives 173.57 FPS, two 177.10, three and four no more (held out), and one context on all three
    cores 9.86 ms a frame where three single-core contexts take 18.84 ms each."""
    profile = load_profile("rk3588")
    gap = profile.multicore.call_gap_us * 1e-6
    core_s = 3 / 177.10
    npu = [Stage("yolov5s", "npu", core_s, gap)]
    assert _fps(npu, CoreMode(1), 3) == pytest.approx(173.57, rel=0.005)
    for contexts in (2, 3, 4):
        assert _fps(npu, CoreMode(contexts), 3) == pytest.approx(177.10, rel=0.005)
    single = [Stage("yolov5s", "npu", 18.84e-3 - gap, gap)]
    tri = CoreMode(1, all_cores=True)
    assert 1e3 / _fps(on_cores(single, tri, profile), tri, 3) == pytest.approx(9.86, rel=0.005)
    assert 3e3 / _fps(single, CoreMode(1), 3) == pytest.approx(18.84, rel=0.005)


def test_a_cpu_stage_bounds_the_aggregate_and_every_frame_comes_out() -> None:
    """However many cores the accelerator has, a 10 ms CPU stage (one worker) sustains 100 FPS; every captured
    frame is delivered, in a simulation as long as the capture."""
    run = [Stage("preprocess", "cpu", 0.010), Stage("unit", "npu", 0.005), Stage("decode+nms", "cpu", 0.002)]
    assert _fps(run, CoreMode(1), 3) == pytest.approx(100.0, rel=0.01)
    captured = arrivals(3, 30.0, 2.0)
    latencies, busy, _ = simulate(run, CoreMode(1), 3, captured)
    assert len(latencies) == len(captured) == 180 and all(0.017 - 1e-9 <= s < 0.1 for s in latencies)
    assert busy["preprocess"] == pytest.approx(180 * 0.010)


def test_the_plan_picks_the_mode_that_serves_and_fails_past_the_bottleneck() -> None:
    """On a three-core board, 6 streams of 30 FPS of a 13 ms accelerator unit need its three cores (one context
    on all of them sustains less); 20 streams exceed every mode and fail, naming the bottleneck; the most streams
    served is where the capacity ends."""
    profile = load_profile("rk3588")
    run = stages({"preprocess": 1.0, "b+n+h": 13.0, "transfers": 0.5, "decode+nms": 2.0}, ["b+n+h"], profile)
    assert [s.device for s in run] == ["cpu", "npu", "cpu"] and run[1].gap_s == pytest.approx(0.000845)
    six = plan_throughput(run, profile, (6, 30.0), 100.0, asked=True)
    assert six.status == "ok" and six.chosen is not None and not six.chosen.mode.all_cores, six.reason
    tri = next(o for o in six.options if o.mode.all_cores)
    assert tri.capacity_fps < 180 <= six.chosen.capacity_fps
    assert 6 <= six.max_streams <= six.chosen.capacity_fps / 30
    many = plan_throughput(run, profile, (20, 30.0), 100.0, asked=True)
    assert many.status == "fails" and "the most any mode sustains" in many.reason and "npu core" in many.reason
    assert many.max_streams == six.max_streams
    one_core = replace(profile, npu_cores=1, multicore=Multicore())
    alone = plan_throughput(run, one_core, (6, 30.0), 100.0, asked=True)
    assert [o.mode for o in alone.options] == [CoreMode(1)] and alone.status == "fails"


def test_phases_measured_on_all_cores_are_one_cores_time_again_before_the_modes_apply() -> None:
    """A profile that runs one context on all cores measured its accelerator phases at the Amdahl share of a core's
    time: the stages take them back to one core's, so each way of running the cores models the same as it does from
    a one-core profile (counted twice, one context on all cores served more than three contexts did)."""
    base = load_profile("rk3588")
    tri = replace(base, multicore=replace(base.multicore, all_cores=True))
    share = tri.multicore.share(3)
    phases = {"preprocess": 1.0, "u": 13.0, "decode+nms": 2.0}
    from_tri = stages({**phases, "u": 13.0 * share}, ["u"], tri)
    assert from_tri[1].busy_s == pytest.approx(0.013)
    for mode in (CoreMode(1), CoreMode(1, all_cores=True)):
        assert _fps(on_cores(from_tri, mode, tri), mode, 3) == pytest.approx(
            _fps(on_cores(stages(phases, ["u"], base), mode, base), mode, 3)
        )


def test_a_mode_whose_contexts_do_not_fit_the_memory_is_not_one() -> None:
    """The memory check counts every context: on a budget that holds one context of the unit, only one context on
    all cores is a way of running it."""
    from yolo_edge.devices.limits import MemoryUse

    profile = replace(load_profile("rk3588"), memory_mb=6.0)
    use = MemoryUse(
        peak_activation_bytes=2 * 2**20, weight_bytes=3 * 2**20, largest_untiled_bytes=0, largest_untiled_node=""
    )
    run = stages({"preprocess": 1.0, "u": 13.0, "decode+nms": 2.0}, ["u"], profile)
    t = plan_throughput(run, profile, (2, 30.0), 100.0, asked=True, units_memory=[use])
    assert [o.mode for o in t.options] == [CoreMode(1, all_cores=True)] and t.status == "ok", t.reason
    assert t.to_dict()["memory_mb"] == pytest.approx(5.0)


def test_deploy_streams_is_judged_by_the_verdict(
    tiny_cfg: Path, tiny_images: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``deploy --streams 64 --fps 30`` on a simulated board: no plan of the demo serves 1,920 frames a second, so a
    deploy whose plan passes fails on throughput (exit 1, the reason said), with the bundle written and how many cameras
    it does serve in report.json, report.md and deploy's output; out of range is one line (exit 2)."""
    from yolo_edge.cli.main import main

    out = tmp_path / "bundle"
    args = ["deploy", "--device", "sim-edge-npu", "--config", str(tiny_cfg), "--data", str(tiny_images)]
    assert main([*args, "--streams", "64", "--fps", "30", "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    doc = json.loads((out / "report.json").read_text())
    t = doc["throughput"]
    assert (t["streams"], t["fps"], t["asked"], t["status"]) == (64, 30.0, True, "fails"), t
    assert t["capacity_fps"] < 1920 and 1 <= t["max_streams"] < 64 and t["kind"] == "modelled (board)"
    assert doc["verdict"] == "fail" and any(r.startswith("throughput: ") for r in doc["verdict_reasons"])
    assert f"cameras: serves up to {t['max_streams']} streams at 30 FPS" in printed
    assert "64 x 30 FPS asked: fails" in printed
    assert "## Throughput" in (out / "report.md").read_text()
    assert main([*args, "--streams", "0", "--out", str(tmp_path / "b2")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--streams must be a whole number of cameras from 1 to 64, got 0" in err
    assert not (tmp_path / "b2").exists()


def test_a_host_profile_says_its_throughput_is_measured_not_modelled(deployed) -> None:  # type: ignore[no-untyped-def]
    """host-lowp's latency is measured here: its report does not model cameras, and says how to measure them; asked
    for streams, a passing plan is undecided (exit 4), never a pass on a figure nobody measured."""
    from yolo_edge.devices.throughput import not_modelled

    report = deployed.report
    t = report.throughput
    assert t is not None and t.status == "not modelled" and not t.asked and "yolo-edge run" in t.reason
    assert report.passed
    asked = replace(report, throughput=not_modelled((4, 30.0), report.profile, 100.0, asked=True))
    assert not asked.passed and asked.undecided and asked.verdict == "UNDECIDED"


def test_bench_streams_measures_the_aggregate_of_run_s_pipeline(deployed, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    """``bench --streams 2``: the bundle's stream engine on two streams of the same 12 frames against one, every
    frame delivered (or the bench fails), the aggregate in --json and in the printed line; one stream is one line
    (exit 2)."""
    from yolo_edge.cli.main import main

    bundle = str(deployed.bundle)
    assert main(["bench", bundle, "--streams", "2", "--runs", "12", "--json", "--quiet"]) == 0
    s = json.loads(capsys.readouterr().out)["streams"]
    assert (s["streams"], s["frames"], s["kind"]) == (2, 12, "measured") and s["aggregate_fps"] > 0, s
    assert s["ratio"] == pytest.approx(s["aggregate_fps"] / s["one_stream_fps"], rel=1e-3)
    assert main(["bench", bundle, "--streams", "2", "--runs", "12", "--quiet"]) == 0
    assert "2 streams of 12 frames: " in capsys.readouterr().out
    assert main(["bench", bundle, "--streams", "1", "--runs", "12", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--streams must be a whole number of streams from 2 to 64, got 1" in err


def test_a_simulated_board_holds_the_contexts_its_bundle_chose(demo_split, tensors) -> None:  # type: ignore[no-untyped-def]
    """The way deploy --streams chose is the bundle's profile's ``multicore``: a stream of a simulated rk3588 then
    holds two contexts a core (6 calls at once), or one context on all three cores whose call is the Amdahl share of
    a core's; what deploy writes is the chosen way, and only where it was asked for streams."""
    from yolo_edge.backends.builder import Builder
    from yolo_edge.backends.onnxruntime.backend import OnnxRuntimeBackend
    from yolo_edge.backends.simulated import SimulatedNpu
    from yolo_edge.flows.deploy import as_served
    from yolo_edge.plan.placement import PlacementPlan
    from yolo_edge.runtime.build import build_units
    from yolo_edge.runtime.events import EventLog

    base = load_profile("rk3588")
    got = {}
    for per_core, all_cores in ((1, False), (2, False), (1, True)):
        profile = replace(base, multicore=replace(base.multicore, contexts_per_core=per_core, all_cores=all_cores))
        plan = PlacementPlan.manual(demo_split, {"backbone": "int8"}, "rk3588")
        with Builder(profile, SimulatedNpu(profile, OnnxRuntimeBackend())) as builder:
            unit = next(u for u in build_units(demo_split, plan, builder, tensors[:2], EventLog()) if u.npu)
            assert unit.npu is not None and unit.npu.modelled_s is not None
            got[(per_core, all_cores)] = (unit.npu.concurrency, unit.npu.modelled_s)
    assert [c for c, _ in got.values()] == [3, 6, 1]
    one, _, tri = (s for _, s in got.values())
    assert got[(2, False)][1] == one and tri == pytest.approx(one * (1 - 0.728 + 0.728 / 3))
    run = stages({"preprocess": 1.0, "u": 13.0, "decode+nms": 2.0}, ["u"], base)
    asked, not_asked = (plan_throughput(run, base, (6, 30.0), 100.0, asked=a) for a in (True, False))
    assert asked.chosen is not None
    kept = as_served(base, asked).multicore
    assert (kept.contexts_per_core, kept.all_cores) == (
        asked.chosen.mode.contexts_per_core,
        asked.chosen.mode.all_cores,
    )
    assert as_served(base, not_asked) == base


def test_an_emulated_call_holds_its_context_for_the_overhead_then_its_core(demo_split, tensors, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``run --emulate-latency`` on a simulated board runs a call as the board model does: its context off the core
    for the call overhead, then the core of its context (``k`` modulo the cores) held while this host computes the
    numerics and for the rest of the modelled time, so that two contexts of a core take turns on it; one context on
    all the cores holds no core of its own; a call outside an emulating context takes no board time at all. (The
    aggregate this gives against the model's is benchmarks/emulated_streams.py's to measure.)"""
    from yolo_edge.backends import simulated
    from yolo_edge.backends.base import on_context
    from yolo_edge.backends.builder import Builder
    from yolo_edge.backends.onnxruntime.backend import OnnxRuntimeBackend
    from yolo_edge.backends.simulated import SimulatedExecutable, SimulatedNpu
    from yolo_edge.plan.placement import PlacementPlan
    from yolo_edge.runtime.build import build_units
    from yolo_edge.runtime.events import EventLog

    base = load_profile("rk3588")
    slept: list[tuple[int, float, tuple[int, ...]]] = []  # context, seconds, the cores held while sleeping
    cores: list[threading.Lock] = []

    def sleep(seconds: float) -> None:
        slept.append((simulated.context(), seconds, tuple(k for k, c in enumerate(cores) if c.locked())))

    monkeypatch.setattr(simulated.time, "sleep", sleep)
    gap = base.multicore.call_gap_us * 1e-6
    for per_core, all_cores in ((2, False), (1, True)):
        profile = replace(base, multicore=replace(base.multicore, contexts_per_core=per_core, all_cores=all_cores))
        plan = PlacementPlan.manual(demo_split, {"backbone": "int8"}, "rk3588")
        with Builder(profile, SimulatedNpu(profile, OnnxRuntimeBackend())) as builder:
            unit = next(u for u in build_units(demo_split, plan, builder, tensors[:2], EventLog()) if u.npu)
            exe = unit.npu
            assert isinstance(exe, SimulatedExecutable)
            exe.modelled_s, cores[:] = 0.05, exe.core_locks
            feeds = {t.name: tensors[0][t.name] for t in exe.inputs}
            slept.clear()
            for k in range(exe.concurrency):
                on_context(k, emulating=True)
                exe.run(feeds)
            on_context(0)
            exe.run(feeds)  # not emulating: nothing slept
        assert [(k, s == pytest.approx(gap)) for k, s, _ in slept[::2]] == [(k, True) for k in range(exe.concurrency)]
        assert all(held == () for _, _, held in slept[::2])  # the call overhead: off the core
        rest = slept[1::2]
        assert len(rest) == exe.concurrency and all(0.0 <= s <= 0.05 for _, s, _ in rest)
        assert [held for _, _, held in rest] == ([()] if all_cores else [(k % 3,) for k in range(6)])


def test_openvino_serves_several_streams_in_its_throughput_mode(demo_split, tensors, few_images: Path) -> None:  # type: ignore[no-untyped-def]
    """On a host profile the accelerator unit is OpenVINO's: a run of several streams compiles it with the THROUGHPUT
    hint and holds as many requests in flight as the plugin finds best (at most the streams), one stream the LATENCY
    compile with one; every stream's detections are the one-stream run's, frame for frame."""
    from yolo_edge.backends.builder import Builder
    from yolo_edge.backends.openvino.backend import OpenVinoExecutable
    from yolo_edge.core.config import load_deploy_config
    from yolo_edge.pipeline.detector import Detector
    from yolo_edge.pipeline.engine import StreamOptions, StreamRunner
    from yolo_edge.pipeline.sources import parse_source
    from yolo_edge.plan.placement import PlacementPlan
    from yolo_edge.runtime.build import build_units
    from yolo_edge.runtime.events import EventLog
    from yolo_edge.runtime.executor import SplitExecutor

    cfg, profile = load_deploy_config(), load_profile("host-lowp")
    plan = PlacementPlan.manual(demo_split, {"backbone": "int8/u8/nncf", "neck": "int8/u8/nncf"}, "host-lowp")
    builder = Builder(profile)
    units = build_units(demo_split, plan, builder, tensors[:8], EventLog())
    exe = next(u.npu for u in units if u.npu is not None)
    assert isinstance(exe, OpenVinoExecutable)
    seen: list[tuple[str, int]] = []

    def runs(k: int) -> list[list[tuple[int, object]]]:
        with StreamRunner(detector, [parse_source(str(few_images))] * k, StreamOptions()) as runner:
            got: list[list[tuple[int, object]]] = [[] for _ in range(k)]
            for r in runner:
                seen.append((str(exe.compiled.get_property("PERFORMANCE_HINT")), exe.concurrency))
                got[r.stream].append((r.index, r.detections))
            return got

    owned = ExitStack()
    owned.enter_context(builder)
    # as placed: a busy machine does not move the unit to its FP32 twin mid-run (the frames would differ by that)
    executor = SplitExecutor(units, cfg.runtime, profile, owns=owned, as_placed=True)
    with Detector(executor, demo_split.exported.meta, cfg.nms) as detector:
        (alone,) = runs(1)
        assert {s for s in seen} == {("LATENCY", 1)}, seen
        seen.clear()
        three = runs(3)
        optimal = int(exe.compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        assert {s for s in seen} == {("THROUGHPUT", min(3, optimal))}, seen
        first = three[0]
        for stream in three:  # every stream the same, bit for bit, in order
            assert [f for f, _ in stream] == [f for f, _ in alone] and len(alone) == 16
            for (_, d), (_, a) in zip(stream, first):
                assert np.array_equal(d.class_id, a.class_id) and np.array_equal(d.xyxy, a.xyxy), (d, a)
        worst = 0.0
        for (_, d), (_, a) in zip(first, alone):  # against one stream: OpenVINO's two compiles round alike
            assert np.array_equal(d.class_id, a.class_id), (d, a)
            worst = max(worst, float(np.abs(d.xyxy - a.xyxy).max(initial=0.0)))
        assert worst <= 1.0, worst
        seen.clear()
        runs(1)
        assert {s for s in seen} == {("LATENCY", 1)}, seen


def test_a_core_failing_under_load_leaves_the_pool_and_its_probe_brings_it_back(
    demo_split, tensors, few_images: Path
) -> None:  # type: ignore[no-untyped-def]
    """A simulated rk3588's three contexts serving six streams, the faults one core's: its first three calls fail (a
    driver error), then it answers. After three failures in a row that context leaves the pool (its frames re-run on
    the CPU: every frame is delivered) while the other two serve; after the cool-down its worker takes a frame as a
    probe, which answers, and it is back. The events say each step; one core's failures never open the unit's
    breaker (the others' answers come between them)."""
    from yolo_edge.backends.builder import Builder
    from yolo_edge.backends.onnxruntime.backend import OnnxRuntimeBackend
    from yolo_edge.backends.simulated import SimulatedNpu
    from yolo_edge.core.config import Faults, load_deploy_config
    from yolo_edge.pipeline.detector import Detector
    from yolo_edge.pipeline.engine import StreamOptions, StreamRunner
    from yolo_edge.pipeline.sources import parse_source
    from yolo_edge.plan.placement import PlacementPlan
    from yolo_edge.runtime.build import build_units
    from yolo_edge.runtime.events import EventLog
    from yolo_edge.runtime.executor import SplitExecutor

    cfg = load_deploy_config()
    runtime = replace(cfg.runtime, breaker_failures=3, breaker_cooldown_s=0.02)
    profile = replace(load_profile("rk3588"), faults=Faults(core=1, burst_start=0, burst_len=3))
    plan = PlacementPlan.manual(demo_split, {"backbone": "int8"}, "rk3588")
    owned = ExitStack()
    builder = owned.enter_context(Builder(profile, SimulatedNpu(profile, OnnxRuntimeBackend())))
    units = build_units(demo_split, plan, builder, tensors[:4], EventLog())
    assert [u.npu.concurrency for u in units if u.npu is not None] == [3]
    events = EventLog()
    executor = SplitExecutor(units, runtime, profile, events=events, owns=owned, as_placed=True)
    with Detector(executor, demo_split.exported.meta, cfg.nms) as detector:
        with StreamRunner(detector, [parse_source(str(few_images))] * 6, StreamOptions()) as runner:
            runner.run(lambda _r: None)
        assert [(st.read, st.delivered) for st in runner.stats] == [(16, 16)] * 6
    shown = [(e.action, e.trigger) for e in events.events if e.unit == "backbone"]
    assert shown[:4] == [("retry_cpu", "runtime_error")] * 3 + [("shrink_pool", "runtime_error")], shown
    assert shown[4:] == [("restore_pool", "recovered")], shown
    details = [e.detail for e in events.events if e.action in ("shrink_pool", "restore_pool")]
    assert details == [
        "context 1 leaves the pool (it failed 3 calls in a row): 2 of 3 contexts serve; it probes again after 0.02 s",
        "context 1 answered its probe: the pool serves on 3 of 3 contexts",
    ]
