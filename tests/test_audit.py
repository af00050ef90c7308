"""The precision audit (yolo_edge/runtime/audit.py), driven deterministically by a simulated accelerator whose numerics
silently degrade from a given call on (the ``degrade`` fault: outputs noised, finite, nothing the NaN check sees):
no event while the numerics are those the floors were measured on, a ``precision`` event soon after they degrade,
the unit's frames on the FP32 twin from then on (exactly the CPU's outputs), back on the accelerator once the audits
pass again; ``alert`` only says so. The accelerators are rk3588-approx's simulator over onnxruntime."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.test_runtime import hand_plan
from yolo_edge.backends.builder import Builder
from yolo_edge.backends.onnxruntime.backend import OnnxRuntimeBackend
from yolo_edge.backends.simulated import SimulatedNpu
from yolo_edge.cli.main import main
from yolo_edge.core.config import DeployConfig, Faults, load_profile
from yolo_edge.model.split import SplitModel
from yolo_edge.runtime.audit import audit_floors, outputs_cosine
from yolo_edge.runtime.build import build_units
from yolo_edge.runtime.events import EventLog
from yolo_edge.runtime.executor import SplitExecutor

# each output x (1 + 2 N(0, 1)) while degraded: a cosine of about 1/sqrt(5) with what it was, far under any INT8
# floor's slack on any CPU (an AVX2-only host's INT8 units here sit near 0.9 with their twins, an AVX-512 VNNI one's
# near 0.99: the ``degrade`` fault's default 0.5, a cosine of 0.89, hides inside the first)
DEGRADED = 2.0
AUDITED = {
    "audit_every": 2,
    "audit_every_failed": 1,
    "audit_window": 6,
    "audit_failures": 3,
    "recover_probes": 3,
    "audit_budget": 1.0,  # no rest between audits (the budget's own test below)
}


def _executor(  # type: ignore[no-untyped-def]
    demo_split: SplitModel,
    tensors: list,  # type: ignore[type-arg]
    fast_cfg: DeployConfig,
    faults: Faults,
    log: Path | None = None,
    clock: Callable[[], float] = time.monotonic,
    **runtime: object,
):
    """backbone and neck INT8 on the simulated accelerator, head on the CPU; floors from every image's tensors; the
    ``faults`` counted from the first frame's call on (the floors' calls are not)."""
    profile = replace(load_profile("rk3588-approx"), faults=Faults())
    npu = SimulatedNpu(profile, OnnxRuntimeBackend())
    plan = hand_plan(demo_split, {"backbone": "int8", "neck": "int8"}, "rk3588-approx")
    units = build_units(demo_split, plan, Builder(profile, npu), tensors[:8], EventLog(), fuse=True)
    floors = audit_floors(units, tensors)
    for unit in units:
        unit.audit_floor = floors.get(unit.name)
    npu.injector.faults = replace(faults, burst_start=npu.injector.calls + faults.burst_start)
    cfg = replace(fast_cfg.runtime, slow_ratio=1e6, **{**AUDITED, **runtime})
    events = EventLog(log)
    return SplitExecutor(units, cfg, profile, events, clock=clock), events, floors


def _drain(ex: SplitExecutor) -> None:
    """Wait for the audit worker to finish what it was offered (a frame never waits for it; a test may)."""
    ex.auditor.drain(60)


def test_no_event_while_the_numerics_are_the_proven_ones(demo_split, tensors, fast_cfg) -> None:  # type: ignore[no-untyped-def]
    ex, events, floors = _executor(demo_split, tensors, fast_cfg, Faults())
    assert set(floors) == {"backbone+neck"} and 0.9 < floors["backbone+neck"] <= 1.0
    for i in range(60):
        ex.run({"images": tensors[i % len(tensors)]["images"]}, i)
        _drain(ex)
    figures = ex.auditor.figures()["backbone+neck"]
    ex.close()
    assert figures["audits"] >= 25 and figures["failed"] == 0 and not events.events
    assert figures["min_cosine"] >= floors["backbone+neck"] - 1e-5  # the figures are rounded


@pytest.mark.parametrize("action", ["move_to_cpu", "alert"])
def test_degraded_numerics_raise_a_precision_event_and_the_unit_moves_to_its_twin(
    demo_split,
    tensors,
    fast_cfg,
    action: str,  # type: ignore[no-untyped-def]
) -> None:
    # degraded from the 20th accelerator call for 30 calls (the audits' probes count as calls), then clean again
    faults = Faults(burst_start=20, burst_len=30, burst_kind="degrade", degrade_noise=DEGRADED)
    ex, events, floors = _executor(demo_split, tensors, fast_cfg, faults, audit_action=action)
    unit = ex.units[0]
    devices = []
    for i in range(120):
        t = tensors[i % len(tensors)]
        result = ex.run({"images": t["images"]}, i)
        devices.append(result.units[0].device)
        if result.units[0].device == "cpu":  # on the twin: exactly the FP32 outputs
            cos, err = outputs_cosine(
                {n: result.outputs[n] for n in ex.output_names}, {n: t[n] for n in ex.output_names}
            )
            assert err <= 1e-4 and cos > 0.99999
        _drain(ex)
    ex.close()
    precision = [e for e in events.events if e.trigger == "precision"]
    assert precision and precision[0].frame >= 20 and precision[0].frame <= 20 + 3 * AUDITED["audit_every"] + 4
    assert precision[0].action == action and "the floor's error" in precision[0].detail
    figures = ex.auditor.figures()[unit.name]
    assert figures["failed"] >= 3 and figures["min_cosine"] < floors[unit.name]
    if action == "alert":  # said, and the frames stay on the accelerator
        assert all(d == "npu" for d in devices)
        return
    moved = precision[0].frame
    assert devices[moved + 2] == "cpu"  # the next frames on the twin
    recovered = [e for e in events.events if e.trigger == "recovered" and e.action == "move_to_npu"]
    assert recovered and recovered[0].frame > moved  # the probes passed once the degradation ended
    assert devices[-1] == "npu" and not unit.precision_parked


def test_the_fallback_log_read_back(demo_split, tensors, fast_cfg, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Two runs appended to one log (the second clean), read back by ``yolo-edge events``: each trigger's rate per
    1,000 frames of both runs, the causes by unit, the unit's time on the CPU, its time before and after each move,
    the audits summed over the runs, what to recompile; a plot; a damaged log is a one-line error (exit 2)."""
    log = tmp_path / "events.jsonl"
    runs = []
    for faults in (Faults(burst_start=20, burst_len=30, burst_kind="degrade", degrade_noise=DEGRADED), Faults()):
        ex, events, _ = _executor(demo_split, tensors, fast_cfg, faults, log)
        for i in range(100):
            ex.run({"images": tensors[i % len(tensors)]["images"]}, i)
            _drain(ex)
        ex.close()
        events.finish(100, 1.0, ex.auditor.figures())
        runs.append((events, ex.auditor.figures()[ex.units[0].name]))
    assert main(["events", str(log), "--json", "--plot", str(tmp_path / "events.png")]) == 0
    r = json.loads(capsys.readouterr().out)
    (first, audit1), (second, audit2) = runs
    unit = "backbone+neck"
    assert r["runs"] == 2 and r["frames"] == 200 and not r["unfinished"] and not second.events
    n = first.summary().by_trigger["precision"]
    assert r["rates"]["precision"] == {"events": n, "per_1000_frames": 1000 * n / 200}
    assert r["causes"] == {unit: first.summary().by_trigger}
    moved = [m for m in r["moves"] if m["trigger"] == "precision"]
    assert moved and all(m["before_ms"] > 0 and m["after_ms"] > 0 for m in moved)
    cpu_runs = r["on_cpu"][unit]["cpu_runs"]
    assert 0 < cpu_runs < 200 and r["on_cpu"][unit]["cpu_share"] == cpu_runs / 200
    assert r["audits"][unit]["audits"] == audit1["audits"] + audit2["audits"] and audit2["failed"] == 0
    assert r["audits"][unit]["failed"] == audit1["failed"] > 0
    assert any(a.startswith(f"{unit}: its numerics left what the deploy proved") for a in r["advice"])
    assert (tmp_path / "events.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["events", str(log)]) == 0
    assert "precision: " in capsys.readouterr().out
    bad = len(log.read_text().splitlines()) + 1
    with log.open("a") as f:
        f.write('{"trigger": "precision", "frame": "x"}\n\n')  # a line no run wrote, then a valid end
        f.write(json.dumps({"record": "run", "run": "r", "frames": 1, "seconds": 1}) + "\n")
    assert main(["events", str(log)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"line {bad}:" in err[0] and "'frame'" in err[0]


def _proof(demo_split, tensors, fast_cfg, images) -> tuple[tuple[int, int], tuple[int, int]]:  # type: ignore[no-untyped-def]
    """What a deploy proves of this plan, measured here as deploy does (this CPU's INT8 numerics, clean): the FP32
    chain's boxes kept, of them, and the plan's boxes added, of them, over the images."""
    from yolo_edge.pipeline.detector import Detector
    from yolo_edge.pipeline.postprocess import boxes_kept

    clean, _, _ = _executor(demo_split, tensors, fast_cfg, Faults(), audit_every=0)
    kept = of = matched = boxes = 0
    with Detector(clean, demo_split.exported.meta, fast_cfg.nms) as detector:
        for image in images:
            got = detector.detect(image)[0]
            lb = detector.preprocess(image)
            chained = clean.auditor.twins.chain(detector.feeds(lb), accelerator=False)
            ref = detector.postprocess({n: chained[n] for n in clean.output_names}, lb)
            r, g = [(ref.xyxy, ref.class_id)], [(got.xyxy, got.class_id)]
            kept, of, matched, boxes = (
                kept + boxes_kept(r, g),
                of + len(ref),
                matched + boxes_kept(g, r),
                boxes + len(got),
            )
    return (kept, of), (boxes - matched, boxes)


def test_the_frames_audit_counts_the_fp32_boxes_a_degraded_accelerator_loses(  # type: ignore[no-untyped-def]
    demo_split, tensors, fast_cfg
) -> None:
    """The frames' audit alone (no unit floors): each audited frame's detections against the FP32 chain's, judged
    against a proof of 990 of 1,000 boxes kept. Clean numerics: no event. Degraded ones: a ``precision`` event on
    ``frames``, the accelerator units on their twins (the frame's boxes are then the FP32 chain's), and back once
    the probes' boxes bound the loss rate under the tolerance again."""
    from yolo_edge.pipeline.detector import Detector
    from yolo_edge.pipeline.preprocess import default_calib_dir, read_image
    from yolo_edge.runtime.audit import FRAMES

    images = [read_image(p) for p in sorted(default_calib_dir().glob("*.jpg"))[:16]]
    faults = Faults(burst_start=40, burst_len=40, burst_kind="degrade", degrade_noise=DEGRADED)
    ex, events, _ = _executor(demo_split, tensors, fast_cfg, faults, audit_window=6)
    for unit in ex.units:
        unit.audit_floor = None
    ex.auditor.prove(*_proof(demo_split, tensors, fast_cfg, images), None)
    devices, found = [], []
    with Detector(ex, demo_split.exported.meta, fast_cfg.nms) as detector:
        for i in range(140):
            dets, timing = detector.detect(images[i % len(images)])
            devices.append(timing.unit_device[ex.units[0].name])
            if devices[-1] == "cpu":  # on the twins: the FP32 chain's own boxes
                lb = detector.preprocess(images[i % len(images)])
                chained = ex.auditor.twins.chain(detector.feeds(lb), accelerator=False)
                ref = detector.postprocess({n: chained[n] for n in ex.output_names}, lb)
                found.append(len(ref) == len(dets) and bool(np.allclose(ref.xyxy, dets.xyxy, atol=1e-3)))
            _drain(ex)
        figures = ex.auditor.figures()[FRAMES]
    precision = [e for e in events.events if e.trigger == "precision"]
    assert precision and all(e.unit == FRAMES for e in precision) and precision[0].frame >= 40
    assert precision[0].action == "move_to_cpu" and "over recent audited frames" in precision[0].detail
    assert all(d == "npu" for d in devices[: precision[0].frame])  # clean until the degradation: no event
    assert devices[precision[0].frame + 2] == "cpu" and found and all(found)
    recovered = [e for e in events.events if e.trigger == "recovered" and e.unit == FRAMES]
    assert recovered and devices[-1] == "npu" and not figures["on_cpu"]
    assert figures["audits"] >= 60 and figures["failed"] >= 1 and figures["boxes_kept"]["of"] > 0


def test_the_audit_keeps_within_its_budget(demo_split, tensors, fast_cfg) -> None:  # type: ignore[no-untyped-def]
    """``audit_budget``: on an injected clock where frames come every 10 ms and each audit takes 50 ms of the
    worker's (the clock moves on by 50 ms during a job), a budget of 10 % rests the worker 450 ms after each: over
    2 s of frames, 5 audits (not the 100 that audit_every 2 asks for), the put-off ones taken on the first frame
    after the rest; the worker's busy share is the budget."""
    now = [0.0]

    def clock() -> float:
        if threading.current_thread().name == "yolo-edge-audit":
            now[0] += 0.05  # read at a job's start and end: 50 ms a job
        return now[0]

    ex, events, _ = _executor(demo_split, tensors, fast_cfg, Faults(), clock=clock, audit_budget=0.1)
    ex.auditor.worker.cpu_clock = ex.auditor.twins.clock = clock  # the worker's CPU seconds: the same 50 ms a job
    ex.auditor.twins.of(ex.units[0])  # compiled here: a twin's compile is not charged to the budget
    for i in range(200):
        now[0] = max(now[0], i * 0.01)
        ex.run({"images": tensors[i % len(tensors)]["images"]}, i)
        _drain(ex)
    figures = ex.auditor.figures()["backbone+neck"]
    ex.close()
    assert 4 <= figures["audits"] <= 5 and figures["failed"] == 0 and not events.events, figures
    # the trigger's coverage, said: every audit the schedule called for is counted, done or not
    from yolo_edge.runtime.audit import coverage

    assert figures["due"] == 100 and f"{100 - figures['audits']} of 100 due not done" in coverage(figures)


def test_a_unit_proven_exact_is_not_failed_for_its_arithmetic() -> None:
    """A unit whose floor is 1 (an FP32 graph on the accelerator) differs from its twin by reassociation only: an
    error under NOISE passes, one over it fails (a precision event at audit_failures 1)."""
    from yolo_edge.core.config import load_deploy_config
    from yolo_edge.runtime.audit import NOISE, Auditor, UnitAudit

    events = EventLog()
    auditor = Auditor(replace(load_deploy_config().runtime, audit_window=3, audit_failures=1), events, [])
    unit = SimpleNamespace(name="head", audit_floor=1.0, precision_parked=False)
    auditor.units["head"] = UnitAudit(1.0, 3)
    auditor._judge(0, unit, 1 - NOISE / 2, 0.0)  # type: ignore[arg-type]
    assert not events.events and auditor.figures()["head"]["failed"] == 0
    auditor._judge(1, unit, 1 - 3 * NOISE, 0.0)  # type: ignore[arg-type]
    assert [e.trigger for e in events.events] == ["precision"] and unit.precision_parked


def test_the_frames_audit_sees_a_run_of_losses_the_window_would_dilute() -> None:
    """A proof of 990 of 1,000 boxes kept (loss bound ~1.8 %). Nine clean frames of ten boxes, then one that loses
    all of its three: the window pooled (3 of 93 lost) is likely at the proven rate, the run of the newest audit
    (3 of 3) is not, even counted as one test of each run tried: an event. Coming back needs boxes: ten audited
    frames without a box say nothing, 70 kept bound the loss rate under 3x the proven bound."""
    from yolo_edge.runtime.audit import EVENT_P, FrameAudit, binomial_tail

    f = FrameAudit((990, 1000), 10)
    for _ in range(9):
        f.record(10, 10)
    assert f.scan()[1] == 1.0  # nothing lost: nothing to see
    f.record(0, 3)
    assert binomial_tail(3, 93, f.rate) > 0.05  # pooled: diluted
    p, corrected, shown = f.scan()
    assert corrected < EVENT_P and p < corrected and "3 of the FP32 chain's 3 boxes lost" in shown
    f.parked = True
    for _ in range(10):
        f.record(0, 0)
    assert f.passing() is None and f.scan()[0] == 1.0  # parked: suspect until shown back
    for _ in range(6):
        f.record(10, 10)
    assert f.passing() is None  # 60 of 60 kept bound the loss rate at 6.0 %, over 3x the proven bound (5.5 %)
    f.record(10, 10)
    assert f.passing() == "70 of the FP32 chain's 70 boxes kept, 0 of 0 boxes added, over the last 10 audited frames"


def test_frames_lit_unlike_the_proofs_are_audited_as_often_as_after_a_failed_audit(  # type: ignore[no-untyped-def]
    demo_split, tmp_path: Path, capsys
) -> None:
    """The lighting the proof saw (the calibration images letterboxed): frames like them (x0.85 to x1.15) are not
    unlike it, night (x0.1) is. An auditor whose frames keep every box audits every ``audit_every``-th frame of
    those like the proof's and every ``audit_every_failed``-th of the night's, counting these as unseen; the fallback
    log read back says so."""
    from yolo_edge.core.config import load_deploy_config
    from yolo_edge.pipeline.preprocess import default_calib_dir, letterbox, read_image
    from yolo_edge.runtime.audit import FRAMES, Auditor, Lighting
    from yolo_edge.validate.conditions import CONDITIONS

    imgsz = demo_split.exported.meta.imgsz
    images = [read_image(p) for p in sorted(default_calib_dir().glob("*.jpg"))[:16]]
    lighting = Lighting.of([letterbox(im, imgsz).inside for im in images])
    day, night = [], []
    for i, image in enumerate(images):
        like = np.clip(image.astype(np.float32) * (0.85 if i % 2 else 1.15), 0, 255).astype(np.uint8)
        day.append(letterbox(like, imgsz).inside)
        night.append(letterbox(CONDITIONS["night"](image, i), imgsz).inside)
    assert not any(lighting.unseen(x) for x in day) and all(lighting.unseen(x) for x in night)
    cfg = replace(load_deploy_config().runtime, audit_every=12, audit_every_failed=3, audit_budget=1.0)
    log = tmp_path / "events.jsonl"
    auditor = Auditor(cfg, EventLog(log), [])
    auditor.chain_units = [SimpleNamespace(npu=object())]  # type: ignore[list-item]  # one accelerator unit
    auditor.prove((990, 1000), None, lighting)
    seen = []
    for frame in range(96):
        image = (day if frame < 48 else night)[frame % 16]
        auditor.offer_frame(frame, image, lambda _parked, f=frame: seen.append(f) or (8, 8, 8, 8))  # type: ignore[misc]
        auditor.drain(10)
    figures = auditor.figures()
    auditor.close()
    assert seen[:4] == [11, 23, 35, 47] and seen[4:] == list(range(50, 96, 3)), seen
    assert figures[FRAMES]["unseen"] == 48 and figures[FRAMES]["frames"] == 96 and figures[FRAMES]["failed"] == 0
    auditor.events.finish(96, 1.0, figures)
    assert main(["events", str(log)]) == 0
    assert (
        "FP32 boxes kept 160/160, boxes added 0/160, 48 of 96 frames lit unlike the proof's" in capsys.readouterr().out
    )


def test_a_frames_unit_audit_and_its_frames_audit_share_the_twins_run() -> None:
    """The unit audit of a frame's first accelerator unit and the frame's FP32 chain run its twin on the very same
    arrays: once, not twice (on rk3588 the one unit is the whole network). Other arrays, equal or not, run again."""
    from yolo_edge.runtime.audit import Twins

    calls: list[object] = []

    class Fp32:
        def run(self, ins: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            calls.append(ins)
            return {"y": ins["x"] * 2}

    unit = SimpleNamespace(name="u", npu=object(), input_names=("x",))
    twins = Twins([unit], time.thread_time)  # type: ignore[list-item]
    twins._built["u"] = Fp32()  # type: ignore[assignment]
    x = np.ones(3, np.float32)
    audited = twins.run(unit, {"x": x}, accelerator=False)  # type: ignore[arg-type]
    chained = twins.chain({"x": x}, accelerator=False)
    assert len(calls) == 1 and chained["y"] is audited["y"]
    twins.chain({"x": x.copy()}, accelerator=False)
    assert len(calls) == 2
