"""The split executor: exactness, INT8 units, fusion, a 1000-frame fault test, the breaker and the hysteresis
(on an injected clock)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.conftest import CALIB_IMAGES, output0
from yolo_edge.backends import cpu_backend
from yolo_edge.backends.base import Executable, NpuError
from yolo_edge.backends.builder import Builder
from yolo_edge.backends.onnxruntime.backend import OnnxRuntimeBackend
from yolo_edge.backends.simulated import SimulatedNpu
from yolo_edge.core.config import DeployConfig, Faults, Variant, load_deploy_config, load_profile
from yolo_edge.model.meta import ExportedModel
from yolo_edge.model.split import SplitModel
from yolo_edge.plan.checks import cosine
from yolo_edge.plan.placement import PlacementPlan, boundary_tensors
from yolo_edge.runtime.build import build_units, plan_units
from yolo_edge.runtime.events import EventLog
from yolo_edge.runtime.executor import SplitExecutor
from yolo_edge.runtime.units import CircuitBreaker, Unit


def hand_plan(split: SplitModel, npu: dict[str, str], device: str = "hand") -> PlacementPlan:
    return PlacementPlan.manual(split, npu, device)


def spins_within_a_run_only(exe: Executable) -> bool:
    """Whether this CPU executable's onnxruntime threads spin between ops (the default) and stop when a Run
    returns (read back from its session's options)."""
    options = exe.session.get_session_options()  # type: ignore[attr-defined]
    return bool(options.get_session_config_entry("session.force_spinning_stop") == "1")


def test_all_cpu_split_execution_equals_monolithic(
    demo: ExportedModel, demo_split: SplitModel, calib_images: list, fast_cfg: DeployConfig
) -> None:  # type: ignore[type-arg]
    full = cpu_backend().compile(demo.load(), "fp32")
    for fuse, names in ((False, ["backbone", "neck", "head"]), (True, ["backbone+neck+head"])):
        units = build_units(
            demo_split,
            hand_plan(demo_split, {}),
            Builder(load_profile("cpu")),
            boundary_tensors(demo_split, calib_images[:2]),
            EventLog(),
            fuse=fuse,
        )
        ex = SplitExecutor(units, fast_cfg.runtime)
        # spinning between ops, never after a Run: four sessions in turn would spin through each other's
        assert all(spins_within_a_run_only(u.cpu) for u in units)
        for i, image in enumerate(calib_images[:4]):
            got = ex.run({"images": image}, i)
            assert np.abs(output0(demo_split, got.outputs) - full.run({"images": image})["output0"]).max() <= 1e-4
            assert (
                [s.unit for s in got.units] == names
                and {s.device for s in got.units} == {"cpu"}
                and got.transfer_bytes == 0
            )
        ex.close()


def test_int8_backbone_neck_on_host_lowp_keeps_output(
    demo_split: SplitModel, tensors: list, fast_cfg: DeployConfig
) -> None:  # type: ignore[type-arg]
    """Backbone+neck INT8 on OpenVINO (VNNI/AMX), head+decode FP32 on the CPU: output cosine >= 0.99."""
    profile = load_profile("host-lowp")
    plan = hand_plan(demo_split, {"backbone": "int8", "neck": "int8"}, "host-lowp")
    for fuse in (True, False):
        units = build_units(demo_split, plan, Builder(profile), tensors[:CALIB_IMAGES], EventLog(), fuse=fuse)
        ex = SplitExecutor(units, fast_cfg.runtime, profile)
        assert all(spins_within_a_run_only(u.cpu) for u in ex.units)  # not through OpenVINO's turn
        for t in tensors[CALIB_IMAGES:]:  # the images it was not calibrated on
            got = ex.run({"images": t["images"]})
            out, ref = output0(demo_split, got.outputs), t["output0"]
            assert cosine(out[:, :4], ref[:, :4]) >= 0.99 and cosine(out[:, 4:], ref[:, 4:]) >= 0.99
            units = (
                [("backbone+neck", "npu"), ("head", "cpu")]
                if fuse
                else [("backbone", "npu"), ("neck", "npu"), ("head", "cpu")]
            )
            assert [(s.unit, s.device) for s in got.units] == units
            by_boundary = {x.boundary: x.bytes for x in got.transfers}
            last_npu, first_cpu = ("backbone+neck", "head") if fuse else ("neck", "head")
            assert by_boundary == {
                f"input->{units[0][0]}": t["images"].nbytes,
                f"{last_npu}->{first_cpu}": sum(t[x.name].nbytes for x in demo_split["head"].inputs),
            }
            assert got.transfer_bytes == sum(by_boundary.values()) and got.transfer_modelled_ms > 0
        ex.close()


AVX2_CHECK = """
import json, sys
from yolo_edge.backends.openvino.nncf_int8 import overflow_fix
from yolo_edge.backends import cpu_backend
from yolo_edge.backends.base import cosine
from yolo_edge.core.config import load_deploy_config, load_profile
from yolo_edge.model.export import export_model
from yolo_edge.model.meta import demo_model_path
from yolo_edge.pipeline.preprocess import default_calib_dir, load_calibration
from yolo_edge.plan.placement import PlacementPlan, boundary_tensors
from yolo_edge.runtime.executor import SplitExecutor
from yolo_edge.runtime.events import EventLog
from yolo_edge.backends.builder import Builder
from yolo_edge.runtime.build import build_units
from yolo_edge.model.split import split_model
split = split_model(export_model(demo_model_path(), imgsz=320, out_dir=sys.argv[1]))
tensors = boundary_tensors(split, load_calibration(default_calib_dir(), (320, 320), 16))
profile = load_profile("host-lowp")
plan = PlacementPlan.manual(split, {"backbone": "int8", "neck": "int8"}, "host-lowp")
units = build_units(split, plan, Builder(profile), tensors[:12], EventLog())
ex = SplitExecutor(units, load_deploy_config().runtime, profile)
decode = cpu_backend().compile(split["decode"].model, "fp32")  # the head's outputs -> output0
worst = 1.0
for t in tensors[12:]:
    head = ex.run({"images": t["images"]}).outputs
    out, ref = decode.run({x.name: head[x.name] for x in decode.inputs})["output0"], t["output0"]
    worst = min(worst, cosine(out[:, :4], ref[:, :4]), cosine(out[:, 4:], ref[:, 4:]))
from yolo_edge.backends.openvino.backend import OpenVinoBackend
print(json.dumps({"fix": overflow_fix(), "cosine": worst, "precisions": OpenVinoBackend().precisions}))
"""


def test_int8_backbone_neck_keeps_output_with_avx2_only_kernels(tmp_path: Path) -> None:
    """The same units with OpenVINO's INT8 kernels capped at AVX2 (oneDNN's ONEDNN_MAX_CPU_ISA: u8 x s8 products
    summed in int16, as on a CPU without VNNI): NNCF's overflow fix (7-bit first-layer weights) is on and the
    detector output stays at cosine >= 0.99 (without it, 0.983 here, as on the AVX2-only EPYC); the OpenVINO backend
    offers no BF16 or FP16 variant there, which the capped kernels could not compile."""
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2", "YOLO_EDGE_CACHE": str(tmp_path / "cache")}
    run = subprocess.run(
        [sys.executable, "-c", AVX2_CHECK, str(tmp_path)], capture_output=True, text=True, env=env, timeout=600
    )
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    if platform.machine() in ("x86_64", "AMD64"):
        assert got["fix"] == "first_layer_only"
        assert "bf16" not in got["precisions"] and "fp16" not in got["precisions"]  # none under AVX2, whatever the CPU
    assert got["cosine"] >= 0.99, got


def test_fused_units_and_the_unfused_retry_when_the_npu_refuses_one_graph(
    demo_split: SplitModel, tensors: list
) -> None:  # type: ignore[type-arg]
    from yolo_edge.devices.limits import memory_use
    from yolo_edge.model.graph import GraphInfo

    plan = hand_plan(demo_split, {"backbone": "int8", "neck": "int8"}, "rk3588")
    units = plan_units(demo_split, plan)
    assert [(u.name, u.device, u.precision) for u in units] == [
        ("backbone+neck", "npu", "int8"),
        ("head", "cpu", "fp32"),
    ]
    assert [u.name for u in plan_units(demo_split, plan, fuse=False)] == ["backbone", "neck", "head"]
    assert [u.name for u in plan_units(demo_split, hand_plan(demo_split, {"backbone": "int8", "neck": "fp16"}))] == [
        "backbone",
        "neck",
        "head",
    ]
    assert [u.name for u in plan_units(demo_split, hand_plan(demo_split, {"neck": "int8"}))] == [
        "backbone",
        "neck",
        "head",
    ]
    # two INT8 activation schemes are two graphs: no fusion across them
    assert [
        u.name for u in plan_units(demo_split, hand_plan(demo_split, {"backbone": "int8/s8", "neck": "int8/u8"}))
    ] == ["backbone", "neck", "head"]

    def need_mb(model: onnx.ModelProto) -> float:
        return memory_use(GraphInfo.of(model), "int8").dram_bytes / 2**20

    parts, fused = (
        max(need_mb(demo_split["backbone"].model), need_mb(demo_split["neck"].model)),
        need_mb(units[0].model),
    )
    assert parts < fused
    profile = replace(load_profile("rk3588"), memory_mb=(parts + fused) / 2)  # each fits, the two as one graph do not
    events = EventLog()
    npu = SimulatedNpu(profile, OnnxRuntimeBackend())
    units = build_units(demo_split, plan, Builder(profile, npu), tensors[:4], events)
    assert [(s.name, s.npu is not None) for s in units] == [("backbone", True), ("neck", True), ("head", False)]
    assert not events.events


@pytest.mark.slow
@pytest.mark.alone  # real unit timeouts: under xdist a frame the other worker starves reads as a hang
def test_fault_injection_1000_frames(demo_split: SplitModel, tensors: list, fast_cfg: DeployConfig) -> None:  # type: ignore[type-arg]
    """10 % errors, 2 % NaN, 0.5 % hangs, plus a burst of 12 errors: every frame answered, breaker opens and
    closes, events match what was injected."""
    faults = Faults(error_rate=0.10, nan_rate=0.02, hang_rate=0.005, hang_s=2.0, seed=7, burst_start=300, burst_len=12)
    profile = replace(load_profile("rk3588"), faults=faults)
    npu = SimulatedNpu(profile, OnnxRuntimeBackend())
    cfg = replace(fast_cfg.runtime, unit_timeout_s=1.0, breaker_failures=5, breaker_cooldown_s=0.05, slow_ratio=50.0)
    plan = hand_plan(demo_split, {"backbone": "int8", "neck": "int8"}, "rk3588")
    events = EventLog()
    ex = SplitExecutor(build_units(demo_split, plan, Builder(profile, npu), tensors[:8], events), cfg, profile, events)
    refs = tensors[8:12]
    npu_only = []
    for t in refs:  # the pure-NPU result of each image, for the tolerance
        x = dict(t)
        for st in ex.units:
            x.update(
                (st.npu or st.cpu).__class__.run(getattr(st.npu, "inner", st.cpu), {n: x[n] for n in st.input_names})
            )
        npu_only.append(output0(demo_split, {n: x[n] for n in ex.output_names}))
    results = [ex.run({"images": refs[i % 4]["images"]}, i) for i in range(1000)]
    accelerated = {u.name for u in ex.units if u.npu is not None}
    ex.close()
    assert len(results) == 1000
    # the INT8 path's own error on this CPU (its kernels decide it: AVX2 saturates u8 x s8 products), measured
    worst = min(
        min(cosine(n[:, 4:], r["output0"][:, 4:]), cosine(n[:, :4], r["output0"][:, :4]))
        for n, r in zip(npu_only, refs)
    )
    for i, r in enumerate(results):
        out, cpu_ref = output0(demo_split, r.outputs), refs[i % 4]["output0"]
        assert np.isfinite(out).all()
        if all(s.device == "cpu" for s in r.units):
            assert np.abs(out - cpu_ref).max() <= 1e-4
        elif all(s.device == "npu" for s in r.units if s.unit in accelerated):
            assert np.abs(out - npu_only[i % 4]).max() <= 1e-4  # no fault this frame: exactly the INT8 result
        else:  # one unit re-run on the CPU: no further from FP32 than the INT8 path itself
            assert min(cosine(out[:, 4:], cpu_ref[:, 4:]), cosine(out[:, :4], cpu_ref[:, :4])) >= worst - 0.01
    retries = [e for e in events.events if e.action == "retry_cpu"]
    by_trigger = {k: sum(1 for e in retries if e.trigger == k) for k in ("runtime_error", "nan", "timeout")}
    inj = npu.injector.injected
    assert by_trigger == {"runtime_error": inj["error"], "nan": inj["nan"], "timeout": inj["hang"]}
    assert inj["error"] > 50 and inj["nan"] > 5 and inj["hang"] >= 1
    actions = [e.action for e in events.events]
    assert "open_breaker" in actions and "close_breaker" in actions
    assert actions.index("open_breaker") < len(actions) - 1 - actions[::-1].index("close_breaker")
    assert ex.breaker.state == "closed"
    summary = events.summary()
    assert summary.total == len(events.events) and summary.by_action["retry_cpu"] == len(retries)


class _Clock:
    """A fake monotonic clock, advanced by the fake accelerator below: no sleeping, no wall-clock noise."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _TimedNpu(Executable):
    """Test double for an accelerator: the real FP32 graph's results, taking ``durations[i]`` fake seconds on call i."""

    def __init__(self, inner: Executable, clock: _Clock, durations: list[float]) -> None:
        super().__init__(inner.inputs, inner.outputs, "int8", "fake-npu", inner.model)
        self.inner, self.clock, self.durations, self.calls = inner, clock, durations, 0

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.clock.now += self.durations[min(self.calls, len(self.durations) - 1)]
        self.calls += 1
        return self.inner.run(feeds)


def test_performance_hysteresis_moves_and_returns(
    demo_split: SplitModel, tensors: list, fast_cfg: DeployConfig, tmp_path
) -> None:  # type: ignore[type-arg, no-untyped-def]
    """Ten slow accelerator calls in a row (0.3 s against a 10 ms CPU estimate, on an injected clock): the
    unit moves to the CPU after N=5, then returns after M=3 good probes; no flapping in between."""
    clock = _Clock()
    cpu = cpu_backend().compile(demo_split["backbone"].model, "fp32")
    npu = _TimedNpu(cpu_backend().compile(demo_split["backbone"].model, "fp32"), clock, [0.3] * 10 + [0.002])
    cfg = replace(fast_cfg.runtime, slow_frames=5, recover_probes=3, probe_every=2, slow_ratio=5.0)
    events = EventLog(tmp_path / "events.jsonl")
    ex = SplitExecutor([Unit("backbone", ("backbone",), cpu, npu, cpu_estimate_s=0.01)], cfg, None, events, clock=clock)
    devices = [ex.run({"images": tensors[i % 8]["images"]}, i).units[0].device for i in range(40)]
    ex.close()
    moves = [(e.frame, e.action) for e in events.events if e.unit == "backbone"]
    assert [a for _, a in moves] == ["move_to_cpu", "move_to_npu"]
    (park, _), (back, _) = moves
    assert park == 4  # the fifth slow frame in a row
    assert back == park + 2 * (5 + 3)  # probes every 2nd frame: 5 still slow, then 3 good ones
    assert set(devices[park + 1 : back + 1 : 2]) == {"cpu"} and set(devices[park + 2 : back + 1 : 2]) == {"npu"}
    assert set(devices[back:]) == {"npu"}
    assert npu.calls == 5 + 8 + (40 - back - 1)  # no call to the accelerator while parked, except the probes
    lines = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    logged = [e for e in lines if "record" not in e]  # the events (an "after" line follows each move)
    # its time before each move (the slow accelerator's), and after the first (30 runs later: the CPU twin's)
    assert logged[0]["before_ms"] == 300.0 and logged[1]["before_ms"] < 300.0
    after = [e for e in lines if e.get("record") == "after"]
    assert [(e["frame"], e["trigger"]) for e in after] == [(park, "performance")] and after[0]["after_ms"] < 300.0
    assert [(e["frame"], e["unit"], e["trigger"], e["action"]) for e in logged] == [
        (park, "backbone", "performance", "move_to_cpu"),
        (back, "backbone", "recovered", "move_to_npu"),
    ]


def test_a_detector_as_placed_keeps_a_slow_accelerators_unit_where_the_plan_put_it(
    demo_split: SplitModel, tensors: list, fast_cfg: DeployConfig
) -> None:  # type: ignore[type-arg]
    """What val and the gate measure: the same slow accelerator as above moves nothing (a busy machine changes no
    figure of theirs), while a failing one still falls back (the gate counts that)."""
    clock = _Clock()
    cpu = cpu_backend().compile(demo_split["backbone"].model, "fp32")
    npu = _TimedNpu(cpu_backend().compile(demo_split["backbone"].model, "fp32"), clock, [0.3])
    cfg = replace(fast_cfg.runtime, slow_frames=2, slow_ratio=5.0)
    events = EventLog()
    units = [Unit("backbone", ("backbone",), cpu, npu, cpu_estimate_s=0.01)]
    ex = SplitExecutor(units, cfg, None, events, clock=clock, as_placed=True)
    devices = {ex.run({"images": tensors[i % 8]["images"]}, i).units[0].device for i in range(8)}
    ex.close()
    assert devices == {"npu"} and not events.events and npu.calls == 8


class _FailingNpu(Executable):
    """Test double for an accelerator whose runtime raises ``error`` on every call."""

    def __init__(self, inner: Executable, error: Exception) -> None:
        super().__init__(inner.inputs, inner.outputs, Variant("int8"), "fake-npu", inner.model)
        self.error = error

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise self.error


def test_the_accelerators_failure_falls_back_and_a_bug_propagates(demo_split: SplitModel, tensors: list) -> None:  # type: ignore[type-arg]
    """An :class:`NpuError` (a vendor failure, wrapped) re-runs the frame on the CPU and is an event; anything else
    raised by a backend is a bug in it, and reaches the caller instead of hiding as a fallback."""
    cpu = cpu_backend().compile(demo_split["backbone"].model, "fp32")
    feeds = {"images": tensors[0]["images"]}
    cfg = load_deploy_config().runtime
    events = EventLog()
    failing = _FailingNpu(cpu, NpuError("device lost"))
    with SplitExecutor([Unit("backbone", ("backbone",), cpu, failing, None)], cfg, None, events) as ex:
        assert ex.run(feeds).units[0].device == "cpu"
    assert [(e.trigger, e.action, e.detail) for e in events.events] == [
        ("runtime_error", "retry_cpu", "NpuError: device lost")
    ]
    buggy = _FailingNpu(cpu, TypeError("unsupported operand"))
    with SplitExecutor([Unit("backbone", ("backbone",), cpu, buggy, None)], cfg, None, EventLog()) as ex:
        with pytest.raises(TypeError, match="unsupported operand"):
            ex.run(feeds)


def test_circuit_breaker_on_an_injected_clock() -> None:
    """closed -> K failures -> open; no probe before the cool-down; a failed half-open probe re-opens, a good one
    closes; a success in between resets the count."""
    clock = _Clock()
    events = EventLog()
    b = CircuitBreaker(failures=3, cooldown_s=1.0, events=events, clock=clock)
    b.record(False, 0, "u", "nan")
    b.record(False, 1, "u", "nan")
    b.record(True, 2, "u", "")  # resets
    b.record(False, 3, "u", "nan")
    b.record(False, 4, "u", "nan")
    assert b.state == "closed" and b.allow()
    b.record(False, 5, "u", "timeout")
    assert b.state == "open" and not b.allow()
    clock.now = 0.999
    assert not b.allow()
    clock.now = 1.0
    assert b.allow() and b.state == "half_open"
    b.record(False, 6, "u", "runtime_error")
    assert b.state == "open" and not b.allow()
    clock.now = 2.0
    assert b.allow()
    b.record(True, 7, "u", "")
    assert b.state == "closed"
    assert [(e.frame, e.action) for e in events.events] == [
        (5, "open_breaker"),
        (6, "reopen_breaker"),
        (7, "close_breaker"),
    ]


@pytest.mark.alone  # a real 0.1 s unit timeout: see test_fault_injection_1000_frames
def test_a_slow_simulator_is_not_a_hung_board_but_an_injected_hang_is(
    demo_split: SplitModel,
    tensors: list,
    fast_cfg: DeployConfig,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[type-arg]
) -> None:
    """A simulated unit's time on this host (Qualcomm's HTP simulator: seconds on a loaded host) is not held against
    the unit timeout; a hang injected on top of it still times out and the frame re-runs on the CPU."""
    import time

    from yolo_edge.backends.onnxruntime.backend import OrtExecutable

    run = OrtExecutable._run

    def slow(self: OrtExecutable, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.variant.precision == "int8":  # the simulated unit's numerics only: a slow simulator
            time.sleep(0.25)
        return run(self, feeds)

    monkeypatch.setattr(OrtExecutable, "_run", slow)
    cfg = replace(fast_cfg.runtime, unit_timeout_s=0.1, slow_ratio=1000.0)
    for faults, want in ((Faults(), []), (Faults(burst_start=1, burst_len=1, burst_kind="hang", hang_s=3.0), [1])):
        profile = replace(load_profile("rk3588-approx"), faults=faults)
        plan = hand_plan(demo_split, {"backbone": "int8"}, profile.name)
        events = EventLog()
        npu = SimulatedNpu(profile, OnnxRuntimeBackend())
        units = build_units(demo_split, plan, Builder(profile, npu), tensors[:2], events)
        with SplitExecutor(units, cfg, profile, events) as ex:
            runs = [ex.run({"images": tensors[0]["images"]}, i) for i in range(3)]
        assert [e.frame for e in events.events if e.trigger == "timeout"] == want
        assert [r.units[0].device for r in runs] == ["cpu" if i in want else "npu" for i in range(3)]


def test_openvino_waits_for_its_own_call_and_a_frame_past_the_deadline_reruns_on_the_cpu(
    demo_split: SplitModel,
    tensors: list,  # type: ignore[type-arg]
    fast_cfg: DeployConfig,
) -> None:
    """OpenVINO's call is bounded by OpenVINO itself (``wait_for`` with the unit timeout, no pool thread): a frame
    whose call cannot answer in time (a 0 ms deadline) is cancelled and re-run on the CPU; the next frame, with a
    reachable deadline, runs on the accelerator again on a fresh request."""
    profile = load_profile("host-lowp")
    events, plan = EventLog(), hand_plan(demo_split, {"backbone": "fp32"}, profile.name)
    cfg = replace(fast_cfg.runtime, unit_timeout_s=0.0, slow_ratio=1000.0)
    with Builder(profile) as builder:
        units = build_units(demo_split, plan, builder, tensors[:2], events)
        assert units[0].npu is not None and units[0].npu.bounded and not units[0].cpu.bounded
        with SplitExecutor(units, cfg, profile, events, borrowed=True) as ex:
            late = ex.run({"images": tensors[0]["images"]}, 0)
            ex.cfg = replace(cfg, unit_timeout_s=30.0)
            answered = ex.run({"images": tensors[0]["images"]}, 1)
    assert [(e.frame, e.trigger, e.action) for e in events.events] == [(0, "timeout", "retry_cpu")]
    assert [late.units[0].device, answered.units[0].device] == ["cpu", "npu"]
    assert all(cosine(late.outputs[n], answered.outputs[n]) >= 0.999 for n in late.outputs)


def test_an_accelerator_call_that_never_returns_does_not_keep_the_process_from_exiting() -> None:
    """A hung driver call times out for the frame (the CPU re-runs it) and must not hold the exit: the interpreter
    joins a ThreadPoolExecutor's threads at exit, so a 100 s hang kept a finished ``run`` alive for 100 s. In a
    process of its own, timed by the test's wall clock (the hang is 120 s; the limit 60 s)."""
    import subprocess
    import sys
    import time

    code = (
        "import time\nfrom concurrent.futures import TimeoutError\nfrom yolo_edge.runtime.calls import DaemonPool\n"
        "pool = DaemonPool(2, 'npu')\nhung = pool.submit(time.sleep, 120)\n"
        "try:\n    hung.result(timeout=0.2)\nexcept TimeoutError:\n    print('timed out')\n"
        "print(pool.submit(sum, [1, 2]).result(timeout=5))\npool.shutdown()\n"
    )
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100)
    assert out.returncode == 0 and out.stdout.split() == ["timed", "out", "3"], out
    assert time.monotonic() - t0 < 60


def test_a_simulated_call_that_never_answers_spends_the_first_call_slack_once(
    demo_split: SplitModel,
    tensors: list,  # type: ignore[type-arg]
) -> None:
    """A loaded bundle's simulated unit (no warm-up) whose calls hang: the first gets the first-call slack, every later
    one none until a call answers, so each frame times out after unit_timeout_s (it was 32 s a frame)."""
    import threading

    from yolo_edge.backends.simulated import FIRST_CALL_SLACK_S

    profile = replace(load_profile("rk3588-approx"), faults=Faults(hang_rate=1.0, hang_s=0.5))
    neck = demo_split["neck"]
    calib = [{t.name: x[t.name] for t in neck.inputs} for x in tensors[:1]]
    exe = SimulatedNpu(profile, OnnxRuntimeBackend()).compile(neck.model, "int8", calib)
    assert exe.host_slack_s == FIRST_CALL_SLACK_S
    call = threading.Thread(target=exe.run, args=(calib[0],))
    call.start()
    while call.is_alive() and exe.host_slack_s:
        pass
    assert exe.host_slack_s == 0.0 and call.is_alive()  # hanging: the next call is not given 30 s more
    call.join()
    assert 0.0 < exe.host_slack_s < 1.0  # answered: three times its numerics on this host


def test_a_unit_failing_on_the_cpu_is_one_line_not_a_bug(
    demo_split: SplitModel, tensors: list, fast_cfg: DeployConfig
) -> None:  # type: ignore[type-arg]
    """The CPU is the last resort: its runtime failing (a damaged graph that allocates what no machine has) ends the
    frame with a user-facing error (exit 2), not an NpuError traceback (exit 3)."""
    from yolo_edge.core.errors import YoloEdgeError

    cpu = cpu_backend().compile(demo_split["backbone"].model, "fp32")
    failing = _FailingNpu(cpu, NpuError("Failed to allocate memory for requested buffer of size 4398046511104"))
    ex = SplitExecutor([Unit("backbone", ("backbone",), failing, None, 0.01)], fast_cfg.runtime, None, EventLog())
    with pytest.raises(YoloEdgeError, match="unit backbone failed on the CPU, where nothing can take it over"):
        ex.run({"images": tensors[0]["images"]}, 0)
    ex.close()
