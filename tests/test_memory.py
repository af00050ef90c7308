"""The memory check by batch and by context (issue 68): activations x batch by liveness at the variant's width,
weights once per context unless the runtime shares them, the largest batch that fits, and a batch larger than fits
planned as sub-batches, never refused; report.json's ``memory`` and deploy's ``--batch``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from yolo_edge.core.config import MAX_BATCH, load_profile
from yolo_edge.devices.limits import (
    Residency,
    ResidentMemory,
    RuntimeMemory,
    batch_fit,
    memory_use,
    memory_violation,
)
from yolo_edge.model.graph import GraphInfo
from yolo_edge.plan.checks import memory_check
from yolo_edge.plan.results import Memory


def _graph() -> GraphInfo:
    """x (1x3x32x32) -> Conv 8x3x3x3 -> Relu -> Transpose (untiled): a frame's activations and weights known."""
    import numpy as np

    w = numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 3, 1], name="transpose"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 32, 8])],
        [w],
    )
    return GraphInfo.of(onnx.shape_inference.infer_shapes(helper.make_model(graph)))


def test_activations_scale_with_the_batch_weights_with_the_contexts() -> None:
    info = _graph()
    one = memory_use(info, "fp32")
    assert one.weight_bytes == 8 * 3 * 3 * 3 * 4
    frame = one.peak_activation_bytes  # by liveness: the largest two tensors live at once (conv out + relu out)
    assert frame == 2 * 8 * 32 * 32 * 4
    three = memory_use(info, "fp32", residency=Residency(batch=8, contexts=3))
    assert three.dram_bytes == 3 * one.weight_bytes + 8 * 3 * frame
    shared = memory_use(info, "fp32", residency=Residency(batch=8, contexts=3, runtime=RuntimeMemory(True)))
    assert shared.dram_bytes == one.weight_bytes + 8 * 3 * frame
    # a runtime's own memory per context, and activations beyond the liveness peak
    own = memory_use(info, "fp32", residency=Residency(batch=8, contexts=3, runtime=RuntimeMemory(True, 2.0, 1.5)))
    assert own.dram_bytes == one.weight_bytes + 3 * 2 * 2**20 + 8 * 3 * int(1.5 * frame)
    # INT8: weights a byte; w8a16's activations two bytes, not one (Qualcomm's uint16 activations)
    a8, a16 = memory_use(info, "int8", "u8"), memory_use(info, "int8", "w8a16")
    assert a8.weight_bytes == a16.weight_bytes == 8 * 27
    assert a16.peak_activation_bytes == 2 * a8.peak_activation_bytes == frame // 2
    assert a16.largest_untiled_node == "transpose" and a16.largest_untiled_bytes == 2 * a8.largest_untiled_bytes


def test_the_largest_batch_that_fits_and_a_larger_one_runs_as_sub_batches() -> None:
    info = _graph()
    held = Residency(batch=32, contexts=3)
    use = memory_use(info, "int8", "u8", held)
    budget = use.dram_at(5) + use.dram_at(1) // 2  # between batch 5 and 6
    profile = replace(load_profile("rk3588"), memory_mb=budget / 2**20)
    assert use.batch_fit(profile) == 5 and use.dram_at(5) <= budget < use.dram_at(6)
    assert memory_violation(use, profile) is None  # batch 32 does not fit, one frame does: not refused
    check = memory_check(profile, use)
    assert check.passed is True and "batch 32 needs" in check.reason and "runs as sub-batches of 5" in check.reason
    assert isinstance(check.measured, Memory) and (check.measured.batch, check.measured.batch_fit) == (32, 5)
    assert check.measured.contexts == 3
    # SRAM bounds it too: the untiled transpose's working set of the whole batch at once
    sram = replace(profile, memory_mb=4096.0, sram_kb=use.largest_untiled_bytes * 3.5 / 1024)
    assert use.batch_fit(sram) == 3
    # not one frame: refused, and it says the contexts it counted
    tight = replace(profile, memory_mb=use.dram_at(1) * 0.9 / 2**20)
    assert use.batch_fit(tight) == 0
    why = memory_violation(use, tight)
    assert why is not None and "(3 contexts)" in why and memory_check(tight, use).passed is False
    # nothing to hold per frame: the cap
    assert batch_fit([], profile) == MAX_BATCH


def test_units_held_together_fit_a_smaller_batch_than_each() -> None:
    info = _graph()
    use = memory_use(info, "int8", "u8", Residency(batch=16))
    profile = replace(load_profile("rk3588"), memory_mb=use.dram_at(10) / 2**20)
    together = ResidentMemory.of([("a", use), ("b", use)], profile)
    assert together.unit_fits == (10, 10) and together.batch_fit == 4 and together.runs_at == 4
    d = together.to_dict()
    assert d["batch"] == 16 and d["batch_fit"] == 4 and set(d["need_mb_by_batch"]) == {"1", "2", "4", "8", "16", "32"}
    assert d["units"][0]["batch_fit"] == 10 and d["units"][0]["contexts"] == 1


def test_deploy_batch_out_of_range_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from yolo_edge.cli.main import main

    assert main(["deploy", "--batch", "0", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--batch must be a whole number of frames from 1 to 256, got 0" in err
    assert not (tmp_path / "b").exists()


def test_the_report_gives_the_units_memory_by_batch(deployed) -> None:  # type: ignore[no-untyped-def]
    """report.json ``memory``: the split plan's accelerator units held together by batch against the budget
    (host-lowp: OpenVINO shares a unit's weights among its requests, and holds memory of its own), report.md's
    table and deploy's line."""
    import json

    from yolo_edge.backends.openvino.backend import OpenVinoBackend
    from yolo_edge.cli.deploy import memory_line

    report, bundle = deployed.report, deployed.bundle
    m = report.memory
    assert (
        report.split_plan.npu_subgraphs and m is not None
    )  # the split plan holds the demo's backbone there and m.batch == 1 and m.runs_at == 1 and m.batch_fit >= 32
    assert all(u.residency == Residency(1, 1, OpenVinoBackend.memory) for _, u in m.units)
    fixed, frame = m.need_at(0), m.need_at(1) - m.need_at(0)
    assert frame > 0 and all(m.need_at(b) == fixed + b * frame for b in (2, 8, 32))
    r = json.loads((bundle / "report.json").read_text())["memory"]
    assert r["batch_fit"] == m.batch_fit and [u["name"] for u in r["units"]] == [n for n, _ in m.units]
    assert r["need_mb_by_batch"]["32"] == round(m.need_at(32) / 2**20, 3)
    md = (bundle / "report.md").read_text()
    assert "## Memory" in md and f"| all together | | | | {m.batch_fit} |" in md
    assert memory_line(m).startswith(
        f"memory: the split plan's accelerator units need {m.need_at(1) / 2**20:.1f} MiB at batch 1"
    )
