"""Batch as a compiled shape: a unit's graph at batch B computes each frame as the batch-1 graph does (the demo's
units, FP32 and INT8, on onnxruntime and OpenVINO), a graph whose batch would mix frames is refused; the runtime
sizes the batch by the accelerator's memory (the design document's batch 32), and its fallback's grain is a row."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from yolo_edge.backends.base import Backend, NpuCompileError
from yolo_edge.backends.builder import Builder
from yolo_edge.backends.onnxruntime.backend import OnnxRuntimeBackend
from yolo_edge.backends.openvino.backend import OpenVinoBackend
from yolo_edge.backends.simulated import SimulatedNpu
from yolo_edge.cli.main import main
from yolo_edge.core.config import DeployConfig, Faults, load_profile
from yolo_edge.devices.limits import Residency, memory_use
from yolo_edge.model.batch import BatchRefused, at_batch
from yolo_edge.model.graph import GraphInfo
from yolo_edge.model.split import SplitModel
from yolo_edge.plan.placement import PlacementPlan
from yolo_edge.runtime.build import batch_units, build_units
from yolo_edge.runtime.events import EventLog
from yolo_edge.runtime.executor import SplitExecutor


def _rows(tensors: list, names: list[str], first: int, batch: int) -> dict[str, np.ndarray]:  # type: ignore[type-arg]
    return {n: np.concatenate([t[n] for t in tensors[first : first + batch]]) for n in names}


@pytest.mark.parametrize(
    ("backend", "variant"),
    [
        (OnnxRuntimeBackend, "fp32"),
        (OnnxRuntimeBackend, "int8"),
        (OpenVinoBackend, "fp32"),
        (OpenVinoBackend, "int8/u8/nncf"),
    ],
)
def test_each_unit_at_batch_4_gives_each_frame_what_batch_1_gives(
    backend: type[Backend],
    variant: str,
    demo_split: SplitModel,
    tensors: list,  # type: ignore[type-arg]
) -> None:
    """Every accelerator unit of the demo (backbone, neck, head) compiled at batch 4 from the graph quantized at
    batch 1: each row of one call equals that frame's batch-1 call. onnxruntime's CPU kernels give the same bits; on
    OpenVINO a batch may take other kernels (its threads split the work by rows), so its rows agree to float rounding:
    a relative 1e-4 of the output's range at FP32, one INT8 step at INT8."""
    with backend() as b:
        for name in ("backbone", "neck", "head"):
            unit = demo_split[name]
            names = [t.name for t in unit.inputs]
            calib = [{n: t[n] for n in names} for t in tensors[:4]]
            one = b.compile(unit.model, variant, calib)
            four = b.compile(unit.model, variant, calib, batch=4)
            assert [t.shape[0] for t in four.inputs] == [4] * len(names), name
            batched = four.run(_rows(tensors, names, 4, 4))
            for row in range(4):
                alone = one.run({n: tensors[4 + row][n] for n in names})
                for out, a in alone.items():
                    got = batched[out][row : row + 1]
                    if backend is OnnxRuntimeBackend:
                        assert np.array_equal(got, a), (name, variant, out, row)
                    else:
                        scale = float(np.abs(a).max()) or 1.0
                        assert np.abs(got - a).max() <= scale * (1e-4 if variant == "fp32" else 1 / 64), (name, out)
            one.close()
            four.close()


def test_a_backend_that_cannot_batch_says_why_before_any_work(demo_split: SplitModel) -> None:
    """A batch above a backend's ``max_batch`` is refused before it lowers anything, with its reason."""

    class OneFrame(OnnxRuntimeBackend):
        max_batch = 1
        batch_refusal = "its compiler takes batch 1 only"

        def _lower(self, *_args: object) -> object:
            raise AssertionError("nothing is lowered for a batch it cannot compile")

    with pytest.raises(NpuCompileError, match="cannot compile batch 8: its compiler takes batch 1 only"):
        OneFrame().compile(demo_split["head"].model, "fp32", batch=8)


def _graph(*nodes: onnx.NodeProto, out_shape: list[int], inits: list[onnx.TensorProto] = ()) -> onnx.ModelProto:  # type: ignore[assignment]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)
    return helper.make_model(
        helper.make_graph(list(nodes), "g", [x], [y], list(inits)), opset_imports=[helper.make_opsetid("", 17)]
    )


def _shape(name: str, values: list[int]) -> onnx.TensorProto:
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


@pytest.mark.parametrize(
    ("model", "refusal"),
    [
        (
            _graph(helper.make_node("Softmax", ["x"], ["y"], "sm", axis=0), out_shape=[1, 4, 8]),
            "sm' .Softmax. works along the batch",
        ),
        (
            _graph(helper.make_node("Transpose", ["x"], ["y"], "tr", perm=[1, 0, 2]), out_shape=[4, 1, 8]),
            "tr' .Transpose. moves the batch axis",
        ),
        (
            _graph(helper.make_node("Reshape", ["x", "s"], ["y"], "flat"), out_shape=[32], inits=[_shape("s", [-1])]),
            r"flat' .Reshape.: its target shape \[-1\] does not begin with a batch",
        ),
        (
            _graph(helper.make_node("ReduceMean", ["x"], ["y"], "rm", keepdims=1), out_shape=[1, 1, 1]),
            "rm' .ReduceMean. is not known",
        ),
        (
            _graph(helper.make_node("Identity", ["x"], ["y"], "id"), out_shape=[2, 4, 8]),
            "does not begin with a batch of 1",
        ),
    ],
)
def test_a_graph_whose_batch_would_mix_frames_is_refused_by_name(model: onnx.ModelProto, refusal: str) -> None:
    with pytest.raises(BatchRefused, match=refusal):
        at_batch(model, 4)


def test_a_reshape_that_spells_the_batch_is_respelled_and_the_input_model_untouched() -> None:
    model = _graph(helper.make_node("Reshape", ["x", "s"], ["y"], "r"), out_shape=[1, 32], inits=[_shape("s", [1, 32])])
    before = model.SerializeToString()
    batched = at_batch(model, 3)
    assert model.SerializeToString() == before
    assert [d.dim_value for d in batched.graph.output[0].type.tensor_type.shape.dim] == [3, 32]
    assert [i.name for i in batched.graph.initializer] == ["s__batch3__r"]  # the batch-1 shape is read by nothing


def _sim_units(demo_split: SplitModel, tensors: list, faults: Faults | None = None, memory_mb: float | None = None):  # type: ignore[no-untyped-def, type-arg]
    """The demo's backbone and neck INT8 (one fused unit) on a simulated rk3588 (onnxruntime's numerics) with
    ``faults`` and ``memory_mb``: its units, builder and event log."""
    profile = replace(load_profile("rk3588"), faults=faults or Faults())
    if memory_mb is not None:
        profile = replace(profile, memory_mb=memory_mb)
    builder = Builder(profile, SimulatedNpu(profile, OnnxRuntimeBackend()))
    plan = PlacementPlan.manual(demo_split, {"backbone": "int8", "neck": "int8"}, "rk3588")
    events = EventLog()
    return build_units(demo_split, plan, builder, tensors[:8], events), builder, events


def _budget_for(units: list, builder: Builder, frames: float) -> float:  # type: ignore[type-arg]
    """The accelerator memory (MiB) at which ``frames`` frames a call of ``units`` fit, as the planner counts it."""
    profile = builder.profile
    assert profile is not None
    held = Residency(1, profile.npu_cores, builder.npu.memory)
    uses = [memory_use(GraphInfo.of(u.graph), "int8", u.npu.variant.scheme, held) for u in units if u.npu is not None]
    fixed = sum(u.dram_at(0) for u in uses)
    return (fixed + frames * (sum(u.dram_at(1) for u in uses) - fixed)) / 2**20


def test_the_design_documents_case_batch_32_over_the_budget_runs_as_sub_batches(
    demo_split: SplitModel,
    tensors: list,
    fast_cfg: DeployConfig,  # type: ignore[type-arg]
) -> None:
    """ "Input batch size = 32, the intermediate activations exceed the NPU's largest allocation": on a board whose
    budget holds 5 frames a call, batch 32 runs as sub-batches of 5, one memory event says so, no frame leaves the
    accelerator for it, and every frame's outputs are the batch-1 outputs, bit for bit (onnxruntime's INT8)."""
    probe, builder, _ = _sim_units(demo_split, tensors)
    budget = _budget_for(probe, builder, 5.5)
    builder.close()
    units, builder, events = _sim_units(demo_split, tensors, memory_mb=budget)
    chosen = batch_units(units, builder, 32, events)
    assert (chosen.asked, chosen.runs_at, chosen.memory) == (32, 5, True), chosen
    assert "runs as sub-batches of 5" in chosen.why and f"> the accelerator's {budget:.1f} MiB" in chosen.why
    memory = [e for e in events.events if e.trigger == "memory"]
    assert [(e.action, e.detail) for e in memory] == [("sub_batch", chosen.why)]
    ex = SplitExecutor(units, fast_cfg.runtime, builder.profile, events)
    unit = next(u for u in ex.units if u.npu is not None)
    assert unit.batch == 5
    frames = [dict(tensors[i % 16]) for i in range(32)]
    got: list[dict[str, np.ndarray]] = []
    for first in range(0, 32, 5):  # as the stream's batcher hands them over: 5 a call, the last 2 a frame a call
        rows = frames[first : first + 5]
        done = ex.run_rows(
            unit, [{n: r[n] for n in unit.input_names} for r in rows], list(range(first, first + 5))[: len(rows)]
        )
        assert all(run.device == "npu" for _, run in done)
        got += [outs for outs, _ in done]
    for i, outs in enumerate(got):
        alone, _ = ex.run_unit(unit, {n: frames[i][n] for n in unit.input_names}, 100 + i)
        assert all(np.array_equal(outs[n], alone[n]) for n in alone), i
    assert not [e for e in events.events if e.action == "retry_cpu"]
    ex.close()
    builder.close()


def test_a_nan_row_reruns_alone_on_the_cpu_and_an_allocation_failure_halves_the_batch(
    demo_split: SplitModel,
    tensors: list,
    fast_cfg: DeployConfig,  # type: ignore[type-arg]
) -> None:
    """The runtime's grain is a row: NaN in one frame's row of a call re-runs that frame alone on the CPU twin (its
    event names it; the others keep the accelerator's outputs); an allocation failure halves the batch (a memory
    event) and runs that call's frames a frame a call on the accelerator, none on the CPU."""
    faults = Faults(burst_start=0, burst_len=1, burst_kind="nan")
    units, builder, events = _sim_units(demo_split, tensors, faults)
    batch_units(units, builder, 4, events)
    ex = SplitExecutor(units, fast_cfg.runtime, builder.profile, events)
    unit = next(u for u in ex.units if u.npu is not None)
    rows = [{n: tensors[i][n] for n in unit.input_names} for i in range(4)]
    done = ex.run_rows(unit, rows, [10, 11, 12, 13])
    nan = [e for e in events.events if e.trigger == "nan"]
    assert len(nan) == 1 and nan[0].action == "retry_cpu" and "row 1 of a batch of 4" in nan[0].detail
    assert [run.device for _, run in done] == ["npu", "cpu", "npu", "npu"] and nan[0].frame == 11
    assert all(np.isfinite(a).all() for outs, _ in done for a in outs.values())
    twin = unit.cpu.run(rows[1])
    assert all(np.array_equal(done[1][0][n], twin[n]) for n in twin)
    ex.close()
    builder.close()

    units, builder, events = _sim_units(demo_split, tensors, Faults(burst_start=0, burst_len=1, burst_kind="oom"))
    batch_units(units, builder, 4, events)
    ex = SplitExecutor(units, fast_cfg.runtime, builder.profile, events)
    unit = next(u for u in ex.units if u.npu is not None)
    done = ex.run_rows(unit, rows, [0, 1, 2, 3])
    assert [run.device for _, run in done] == ["npu"] * 4 and unit.batch == 2
    shrunk = [e for e in events.events if e.trigger == "memory"]
    assert len(shrunk) == 1 and shrunk[0].action == "shrink_batch" and "runs at batch 2 from now on" in shrunk[0].detail
    assert not [e for e in events.events if e.action == "retry_cpu"]
    assert [run.device for _, run in ex.run_rows(unit, rows[:2], [4, 5])] == ["npu", "npu"]
    ex.close()
    builder.close()


def test_deploy_batch_proves_the_batch_and_run_takes_it_from_the_bundle(
    tiny_cfg: Path, tiny_images: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``deploy --batch 4`` on a simulated board: its report says the batch the units run at (the board's model says
    it pays) and that each batched frame equals its batch-1 call (to float rounding); ``run`` with
    no ``--batch`` takes the bundle's, and its detections are those of ``run --batch 1``."""
    out = tmp_path / "bundle"
    args = ["deploy", "--device", "sim-edge-npu", "--config", str(tiny_cfg), "--data", str(tiny_images)]
    assert main([*args, "--batch", "4", "--out", str(out)]) in (0, 4)
    printed = capsys.readouterr().out
    doc = json.loads((out / "report.json").read_text())
    batch = doc["batch"]
    assert (batch["asked"], batch["runs_at"], batch["why"]) == (4, 4, ""), batch
    # bit for bit on this CPU's kernels; another CPU's may round a batch's sums otherwise: float rounding at most
    assert batch["difference"] and all(d <= 1e-5 for d in batch["difference"].values()), batch
    assert "batch 4: run --batch runs it at 4; batched frames equal batch 1's " in printed
    assert "Batch 4 asked: the accelerator units run at 4." in (out / "report.md").read_text()
    got = []
    for extra in ([], ["--batch", "1"]):
        assert main(["run", str(out), "--source", str(tiny_images), "--json", "--quiet", *extra]) == 0
        captured = capsys.readouterr()
        got.append([json.loads(x)["detections"] for x in captured.out.splitlines()])
        assert ("batch 4 asked, 4 run: accelerator calls 1 of 4 frames, 2 of 1 frames" in captured.err) == (not extra)
    assert len(got[0]) == len(got[1]) == 6
    for four, one in zip(*got):
        assert [d["class_id"] for d in four] == [d["class_id"] for d in one]
        assert all(np.allclose(a["xyxy"], b["xyxy"], atol=0.01) for a, b in zip(four, one))
