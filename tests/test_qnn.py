"""Qualcomm's HTP through ONNX Runtime's QNN execution provider (onnxruntime-qnn: Qualcomm's compiler and its HTP
simulator on x86-64, in the main environment): compile, numerics, op support from Qualcomm's validation, Qualcomm's
own refusals, and EPContext units that load without recompiling."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.conftest import CALIB_IMAGES
from yolo_edge.backends import create_backend, device_status
from yolo_edge.backends.base import NpuOutOfMemory, OpQuery, UnsupportedOperator, cosine
from yolo_edge.backends.qnn import backend as qnn_module
from yolo_edge.backends.qnn.backend import CONTEXT_SUFFIX, QnnBackend, backend_for, htp_session
from yolo_edge.backends.simulated import SimulatedNpu
from yolo_edge.core.config import DeployConfig, Variant, load_profile
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.devices.cost import npu_time
from yolo_edge.model.graph import GraphInfo
from yolo_edge.model.split import SplitModel
from yolo_edge.plan.placement import PlacementPlan


@pytest.fixture(scope="module")
def htp() -> QnnBackend:
    backend = backend_for(load_profile("qcs6490"))
    assert isinstance(backend, QnnBackend)
    return backend


def _feeds(sg_inputs: list[str], tensors: list, k: int) -> dict[str, np.ndarray]:  # type: ignore[type-arg]
    return {n: tensors[k][n] for n in sg_inputs}


def test_the_qualcomm_profiles_are_usable_and_simulated() -> None:
    for name in ("qcs6490", "qcs8550"):
        ok, why, usable = device_status(load_profile(name))
        assert ok and usable == ("int8",), why
        assert why.startswith("simulated: numerics on qnn HTP v") and "latency modelled" in why
        backend = create_backend(load_profile(name))
        assert isinstance(backend, SimulatedNpu) and backend.int8_schemes == ("w8a8", "w8a16")
        backend.close()


def test_backbone_int8_on_the_htp_simulator_and_its_context_loads_without_recompiling(
    htp: QnnBackend,
    demo_split: SplitModel,
    tensors: list,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[type-arg]
) -> None:
    """w8a8 by Qualcomm's QDQ recipe, compiled by Qualcomm's compiler, run on its simulator: the backbone's outputs
    stay close to FP32. Its EPContext (the binary embedded) loads again with no quantizer call, to the same bits."""
    sg = demo_split["backbone"]
    names = [t.name for t in sg.inputs]
    calib = [_feeds(names, tensors, k) for k in range(CALIB_IMAGES)]
    exe = htp.compile(sg.model, Variant("int8", "w8a8"), calib)
    feeds = _feeds(names, tensors, CALIB_IMAGES)  # the first image it was not calibrated on
    got = exe.run(feeds)
    assert min(cosine(got[t.name], tensors[CALIB_IMAGES][t.name]) for t in sg.outputs) > 0.98
    stored = exe.artifact_files()
    assert set(stored) == {CONTEXT_SUFFIX}
    context = onnx.load_from_string(stored[CONTEXT_SUFFIX])
    assert [n.op_type for n in context.graph.node] == ["EPContext"]

    calls: Counter[str] = Counter()
    monkeypatch.setattr(qnn_module, "quantize_qnn", lambda *a, **k: calls.update(["quantize"]))
    again = htp.compile(sg.model, Variant("int8", "w8a8"), None, stored)
    assert calls == Counter()
    assert all(np.array_equal(again.run(feeds)[n], got[n]) for n in got)


def test_op_support_is_qualcomms_validation_and_a_refused_node_is_named(htp: QnnBackend, tmp_path: Path) -> None:
    """ONNX Runtime's own partition: the node the QNN EP's validation refuses (it lists the nodes it passes the same
    way) is the one the query names, and with CPU fallback disabled a compile refuses the graph naming it (the
    op-level fallback cuts around it)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8])
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"], name="sig0"),
        helper.make_node("Trilu", ["s"], ["t"], name="trilu0"),
        helper.make_node("Relu", ["t"], ["y"], name="relu0"),
    ]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    assert htp.query(model) == OpQuery(3, ("trilu0",), "validation")
    with pytest.raises(UnsupportedOperator, match=r"QNN HTP refuses .*trilu0 \(Trilu\)") as refused:
        htp_session(model.SerializeToString(), htp.options, fallback=False)
    assert "trilu0" in refused.value.nodes


def test_a_graph_qualcomms_compiler_cannot_finalize_is_its_memory_refusal(
    htp: QnnBackend, demo_split: SplitModel
) -> None:
    """The demo's neck in float does not fit when Qualcomm's compiler finalizes it: the refusal is Qualcomm's own
    error code, a memory refusal, not a crash (and not an op refusal: in Qualcomm's QDQ form no node of it is
    refused, the INT8 compile decides)."""
    for fallback in (True, False):
        with pytest.raises(NpuOutOfMemory, match="QNN_COMMON_ERROR_MEM_ALLOC"):
            htp_session(demo_split["neck"].model.SerializeToString(), htp.options, fallback=fallback)
    assert htp.query(demo_split["neck"].model).refused == ()


def test_a_stored_context_that_names_an_external_binary_is_refused(htp: QnnBackend, demo_split: SplitModel) -> None:
    """A bundle is untrusted: an EPContext node pointing at a file (embed_mode 0) would have the EP open a path the
    bundle chose."""
    node = helper.make_node("EPContext", ["images"], ["out"], name="ctx", domain="com.microsoft")
    node.attribute.extend([helper.make_attribute("embed_mode", 0), helper.make_attribute("ep_cache_context", "../x")])
    x = helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 320, 320])
    graph = helper.make_graph([node], "g", [x], [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1])])
    hostile = {CONTEXT_SUFFIX: helper.make_model(graph).SerializeToString()}
    with pytest.raises(YoloEdgeError, match="names an external binary"):
        htp.compile(demo_split["backbone"].model, Variant("int8", "w8a8"), None, hostile)


def test_w8a16_is_modelled_slower_than_w8a8_as_published(demo_split: SplitModel) -> None:
    """Each scheme at its own fitted peak: 16-bit activations cost time on the HTP (benchmarks/qnn_fidelity.py)."""
    info = GraphInfo.of(demo_split.exported.load())
    for name in ("qcs6490", "qcs8550"):
        p = load_profile(name)
        assert npu_time(info, p, "int8", scheme="w8a16").total_s > npu_time(info, p, "int8", scheme="w8a8").total_s
    assert (
        npu_time(info, load_profile("qcs8550"), "int8", scheme="w8a8").total_s
        < npu_time(info, load_profile("qcs6490"), "int8", scheme="w8a8").total_s
    )


def test_a_qualcomm_bundle_loads_its_context_binaries_and_runs_the_deployed_numerics(
    tmp_path: Path,
    demo_split: SplitModel,
    tensors: list,
    fast_cfg: DeployConfig,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[type-arg]
) -> None:
    """A qcs6490 plan written as a bundle holds its accelerator unit as an EPContext model; loading the bundle
    runs that context on the HTP simulator (no quantizer call, no compile from ONNX) and gets what was built."""
    from tests.conftest import output0, plan_bundle
    from yolo_edge.bundle import load_bundle

    plan = PlacementPlan.manual(demo_split, {"backbone": "int8/w8a8", "neck": "int8/w8a8"}, "qcs6490", "modelled")
    path = plan_bundle(tmp_path / "bundle", demo_split, plan, tensors, fast_cfg)
    assert (path / "units" / f"backbone+neck{CONTEXT_SUFFIX}").is_file()
    calls: Counter[str] = Counter()
    monkeypatch.setattr(qnn_module, "quantize_qnn", lambda *a, **k: calls.update(["quantize"]))
    feeds = {"images": tensors[13]["images"]}
    with load_bundle(path).detector() as detector:
        unit = detector.executor.units[0]
        assert unit.name == "backbone+neck" and unit.npu is not None and unit.npu.modelled_s is not None
        got = output0(demo_split, detector.executor.run(feeds).outputs)
    assert calls == Counter()
    with load_bundle(path).detector() as again:  # a second load: the same context, the same bits
        assert np.array_equal(output0(demo_split, again.executor.run(feeds).outputs), got)
    assert cosine(got, tensors[13]["output0"]) > 0.99
