"""Rockchip's toolchain for real: rknn-toolkit2 2.5.0 in its own pinned environment (`yolo-edge toolchain
install rknn`: the README's test command and .ci/run install it), driven through its worker process.

Compile and simulate, the compiler's refusals and the op-level fallback around them, Rockchip's per-layer
accuracy analysis on a precision failure, a worker killed mid-stream (the frame re-runs on the CPU, nothing is
lost), and the board path: a bundle's .rknn files on RKNNLite, which is FAKED here (tests/fakes/rknnlite: no
board), without torch and without the toolchain."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from yolo_edge.backends import cpu_backend
from yolo_edge.backends.base import OpQuery, UnsupportedOperator
from yolo_edge.backends.rknn.backend import RknnBackend, RknnExecutable, parse_error_analysis
from yolo_edge.backends.rknn.spec import TOOLCHAIN as RKNN
from yolo_edge.bundle import StoredUnit, load_bundle
from yolo_edge.core.config import DeployConfig, Variant, load_profile
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.model.meta import ExportedModel, load_onnx
from yolo_edge.model.split import SplitModel, split_model
from yolo_edge.plan.placement import PlacementPlan
from yolo_edge.plan.planner import plan_model
from yolo_edge.plan.results import Precision
from yolo_edge.runtime.events import EventLog
from yolo_edge.runtime.executor import SplitExecutor
from yolo_edge.runtime.units import Unit
from yolo_edge.toolchains import install_toolchain, toolchain_status
from yolo_edge.toolchains.wire import receive, send

FAKES = Path(__file__).parent / "fakes"


@pytest.fixture(scope="module")
def rknn() -> Iterator[RknnBackend]:
    status = toolchain_status(RKNN)
    assert status.usable, f"{status.detail} (the README's test command installs it)"
    with RknnBackend("rk3588") as backend:
        yield backend  # type: ignore[misc]  (Backend.__enter__ is typed as the base class)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _feeds(model: onnx.ModelProto, tensors: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    names = [i.name for i in model.graph.input]
    return [{n: t[n] for n in names} for t in tensors]


def test_wire_carries_arrays_exactly(tmp_path: Path) -> None:
    arrays = {
        "f": np.random.default_rng(0).random((2, 3, 4), dtype=np.float32),
        "i": np.arange(-5, 5, dtype=np.int64),
        "u": np.frombuffer(b"RKNN", dtype=np.uint8),
        "scalar": np.array(3.5),
        "empty": np.zeros((0, 4), np.float32),
    }
    r, w = os.pipe()
    with os.fdopen(w, "wb") as out:
        send(out, {"op": "x", "args": {"k": [1, 2]}}, arrays)
    with os.fdopen(r, "rb") as inp:
        header, got = receive(inp)
    assert header == {"op": "x", "args": {"k": [1, 2]}}
    assert list(got) == list(arrays)
    for k, v in arrays.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape and np.array_equal(got[k], v)


def test_int8_and_fp16_on_rockchips_simulator(rknn: RknnBackend, demo_split: SplitModel, tensors: list) -> None:  # type: ignore[type-arg]
    """The backbone quantized by Rockchip's quantizer on its own FP32 inputs, run on the simulator: close to
    onnxruntime FP32 on an image it was not calibrated on; the neck at FP16 closer still; a real .rknn file."""
    backbone, neck = demo_split["backbone"].model, demo_split["neck"].model
    int8 = rknn.compile(backbone, "int8/w8a8", _feeds(backbone, tensors[:8]))
    fp16 = rknn.compile(neck, "fp16")
    for model, exe, floor in ((backbone, int8, 0.99), (neck, fp16, 0.999)):
        feeds = _feeds(model, tensors[12:13])[0]
        ref = cpu_backend().compile(model, "fp32").run(feeds)
        got = exe.run(feeds)
        assert [o.name for o in exe.outputs] == list(ref)
        for name in ref:
            assert got[name].shape == ref[name].shape and cosine(got[name], ref[name]) >= floor, name
    assert isinstance(int8, RknnExecutable) and int8.build_s > 0
    assert int8.artifact_files()[".rknn"].startswith(b"RKNN")
    assert int8.device == "rknn-sim:rk3588"
    for exe in (int8, fp16):
        exe.close()


def _one_op(tmp: Path, op: str, extra_inputs: tuple[onnx.TensorProto, ...] = (), **attrs: object) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])
    w = onnx.numpy_helper.from_array(np.random.default_rng(0).random((8, 8, 1, 1), dtype=np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv0"),
        helper.make_node(op, ["c", *(t.name for t in extra_inputs)], ["o"], name=f"{op.lower()}0", **attrs),
    ]
    if op == "NonZero":
        nodes.append(helper.make_node("Cast", ["o"], ["y"], name="cast0", to=TensorProto.FLOAT))
    else:
        nodes.append(helper.make_node("Relu", ["o"], ["y"], name="relu0"))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, op, [x], [y], [w, *extra_inputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def test_the_compilers_refusals_name_the_nodes(rknn: RknnBackend, tmp_path: Path) -> None:
    """A build that fails (a data-dependent NonZero) and an op with no NPU lowering (Trilu, which the board's
    runtime would quietly run on its CPU) are both refusals that name the node, in the compiler's words."""
    with pytest.raises(UnsupportedOperator, match=r"nonzero0 \(NonZero\).*need to be constant"):
        rknn.compile(_one_op(tmp_path, "NonZero"), "fp16")
    trilu = _one_op(tmp_path, "Trilu", (onnx.numpy_helper.from_array(np.array(-99, np.int64), "k"),), upper=1)
    with pytest.raises(UnsupportedOperator, match=r"trilu0 \(Trilu\).*no NPU lowering"):
        rknn.compile(trilu, "fp16")
    assert rknn.query(trilu) == OpQuery(3, ("trilu0",), "compiler")
    assert rknn.query(_one_op(tmp_path, "Sigmoid")) == OpQuery(3, (), "compiler")


def _with_refused_op(demo: ExportedModel, out: Path) -> ExportedModel:
    """The demo model with an identity Trilu (upper, k far below the diagonal) inside the neck: numerically
    nothing, but an op Rockchip's compiler has no NPU lowering for."""
    model = onnx.load(str(demo.path))
    target = "/model.12/cv1/act/Mul_output_0"
    at = next(i for i, n in enumerate(model.graph.node) if target in n.output)
    for node in model.graph.node[at + 1 :]:
        node.input[:] = [f"{target}_t" if i == target else i for i in node.input]
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array(-100000, np.int64), "trilu_k"))
    trilu = helper.make_node("Trilu", [target, "trilu_k"], [f"{target}_t"], name="/model.12/refused", upper=1)
    model.graph.node.insert(at + 1, trilu)
    onnx.save(model, str(out))
    return load_onnx(out)


def test_a_refused_op_runs_on_the_cpu_and_the_rest_on_the_npu(
    rknn: RknnBackend, demo: ExportedModel, fast_cfg: DeployConfig, calib_images: list, tmp_path: Path
) -> None:  # type: ignore[type-arg]
    split = split_model(_with_refused_op(demo, tmp_path / "refused.onnx"))
    assert any(n.op_type == "Trilu" for n in split["neck"].model.graph.node)
    plan = plan_model(split, load_profile("rk3588"), fast_cfg, calib_images)
    neck = plan["neck"]
    assert neck.checks["op_support"].passed is False and "/model.12/refused" in neck.checks["op_support"].reason
    assert (neck.device, neck.granularity, neck.cpu_nodes) == ("npu", "op", ("/model.12/refused",))
    assert neck.checks["precision"].passed and neck.variant == Variant("int8", "w8a8", "rknn")
    assert plan["backbone"].device == "npu" and plan["backbone"].checks["op_support"].reason.endswith("(rknn compiler)")


def test_whole_graph_precision_failure_carries_rockchips_layer_analysis(
    rknn: RknnBackend, demo_split: SplitModel, fast_cfg: DeployConfig, calib_images: list
) -> None:  # type: ignore[type-arg]
    """The whole demo model at INT8 on Rockchip's simulator loses the class scores (they share one INT8
    output with the pixel-scale boxes): precision fails, and the check carries the worst layers of
    Rockchip's own per-layer analysis."""
    plan = plan_model(demo_split, load_profile("rk3588"), fast_cfg, calib_images)
    whole = plan.whole_graph_npu
    assert whole.failed_check == "precision"
    check = whole.checks["precision"]
    assert isinstance(check.measured, Precision)
    assert "worst layers by rknn's per-layer error" in check.reason and check.measured.worst_layers
    assert plan["backbone"].device == "npu" and plan["backbone"].variant.label == "int8/w8a8/rknn"


def test_hybrid_quantization_keeps_the_sensitive_layer_in_float16(
    rknn: RknnBackend, demo: ExportedModel, fast_cfg: DeployConfig, calib_images: list, tmp_path: Path
) -> None:  # type: ignore[type-arg]
    """The demo with one neck layer made sensitive to INT8 (tests/test_search.py): at Rockchip's INT8 the neck
    fails precision; ranked by Rockchip's accuracy analysis, that convolution comes first, and kept in float16
    by Rockchip's hybrid quantization the neck passes."""
    from tests.test_search import SENSITIVE, _with_an_outlier_channel

    path = tmp_path / "sensitive.onnx"
    onnx.save(_with_an_outlier_channel(demo.load(), SENSITIVE), str(path))
    split = split_model(load_onnx(path))
    plan = plan_model(split, load_profile("rk3588"), fast_cfg, calib_images)
    neck = plan["neck"]
    kept = (f"{SENSITIVE}_output_0",)  # by its output: what hybrid quantization names
    assert neck.device == "npu" and neck.variant == Variant("int8", "w8a8", "rknn", kept), neck.reason
    assert "rknn's per-layer measurement, at fp16" in neck.kept_why and "failed precision" in neck.kept_why
    assert plan["backbone"].variant.kept == ()


def test_error_analysis_rows_parse() -> None:
    text = (
        "[Conv] /model.0/conv/Conv_output_0                        0.99998 | 5.88337   0.99991 | 5.88337\n"
        "[Concat] /model.22/Concat_1_output_0-rs \n"
        "[exSwish] /model.0/act/Mul_output_0                       0.99994 | 5.64520   0.99996 | 4.30055\n"
    )
    rows = parse_error_analysis(text)
    assert [(r.op, r.tensor, r.entire_cos, r.single_cos) for r in rows] == [
        ("Conv", "/model.0/conv/Conv_output_0", 0.99998, 0.99991),
        ("exSwish", "/model.0/act/Mul_output_0", 0.99994, 0.99996),
    ]


def test_a_killed_worker_costs_one_frame_on_the_cpu(
    rknn: RknnBackend, demo_split: SplitModel, tensors: list, fast_cfg: DeployConfig
) -> None:  # type: ignore[type-arg]
    """The toolchain worker SIGKILLed between frames: that frame re-runs on the CPU (an event), the next one
    starts a fresh worker, rebuilds the unit in it and is back on the NPU; every frame has its output."""
    model = demo_split["backbone"].model
    npu = rknn.compile(model, "int8", _feeds(model, tensors[:8]))
    cpu = cpu_backend().compile(model, "fp32")
    events = EventLog()
    worker = rknn.worker  # the backend's own
    runtime = replace(fast_cfg.runtime, unit_timeout_s=120.0)  # the rebuild in the fresh worker takes a second or two
    with SplitExecutor([Unit("backbone", ("backbone",), cpu, npu, 0.05)], runtime, None, events) as ex:
        devices, outputs = [], []
        for frame in range(6):
            if frame == 2:
                generation = worker.generation
                assert worker.pid is not None
                os.kill(worker.pid, signal.SIGKILL)
            result = ex.run({"images": tensors[frame]["images"]}, frame)
            devices.append(result.units[0].device)
            outputs.append(result.outputs)
    assert devices == ["npu", "npu", "cpu", "npu", "npu", "npu"]
    assert worker.generation == generation + 1
    crash = [e for e in events.events if e.frame == 2]
    assert [(e.trigger, e.action) for e in crash] == [("runtime_error", "retry_cpu")] and "exited" in crash[0].detail
    for frame in (2, 3):
        ref = cpu.run({"images": tensors[frame]["images"]})
        assert outputs[frame] and set(outputs[frame]) <= set(ref)
        for k, v in outputs[frame].items():  # frame 2 is the CPU's own result; frame 3 the rebuilt NPU unit's
            assert np.array_equal(v, ref[k]) if frame == 2 else cosine(v, ref[k]) > 0.99


def test_deploy_to_rk3588_writes_the_rknn_units(small_deploy) -> None:  # type: ignore[no-untyped-def]
    result = small_deploy("rk3588")
    # the backend that told the deploy rk3588 is usable here is the one it compiled with: one toolchain worker
    assert (result.bundle.parent / "workers_started").read_text() == "1"
    report = result.report.to_dict()
    rows = {p["name"]: p for p in report["plans"]}
    assert "precision" in rows["whole-npu"]["fails"]
    assert rows["split"]["status"] == "ok" and rows["split"]["latency"]["kind"] == "modelled (board)"
    split = PlacementPlan.from_dict(report["split_plan"])
    assert [(split[s].device, split[s].variant.label) for s in ("backbone", "neck")] == [("npu", "int8/w8a8/rknn")] * 2
    assert "worst layers by rknn's per-layer error" in split.whole_graph_npu.reason
    stored = [StoredUnit.from_dict(u) for u in json.loads((result.bundle / "units.json").read_text())]
    npu = next(u for u in stored if u.device == "npu")
    assert (result.bundle / "units" / f"{npu.name}.rknn").read_bytes().startswith(b"RKNN")
    # the head where the checks and the verdict put it; the design card's layout (head FP32 on the CPU) judged beside
    search = report["search"]
    card = search["trials"][search["card_layout"] - 1]
    assert "head=cpu/fp32" in card["placement"] and search["card_line"]
    assert card["latency_kind"] == "modelled (board)"  # its p95 is the board's, as the plans' rows say
    assert ("head on the accelerator" in search["card_line"]) is (split["head"].device == "npu")
    # Rockchip's model zoo recipe (backbone, neck and head INT8 by the normal algorithm, the decode on the CPU), judged
    recipe = search["recipe"]
    assert recipe["what"].startswith("Rockchip's model zoo") and recipe["candidate"], recipe
    placed = search["trials"][recipe["candidate"] - 1]["placement"]
    assert all(f"{s}=npu/int8/w8a8/rknn" in placed for s in ("backbone", "neck", "head")) and "decode=cpu" in placed
    md = (result.bundle / "report.md").read_text()
    assert recipe["line"].startswith("the vendor's recipe") and recipe["line"] in md


def _record_simulator(bundle_path: Path, images: list[Path], out: Path) -> list[dict[str, object]]:
    """Run the bundle on the host (Rockchip's simulator) and record each NPU call's inputs and outputs for
    the fake board runtime; returns the host's detections per image."""
    import importlib.util

    # the fake's key function, loaded by path: importing it as `rknnlite` would make this host look like a board
    spec = importlib.util.spec_from_file_location("fake_rknnlite_api", FAKES / "rknnlite" / "api.py")
    assert spec is not None and spec.loader is not None
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    inputs_key = fake.inputs_key
    recordings: dict[str, np.ndarray] = {}
    found = []
    with load_bundle(bundle_path).detector() as detector:
        unit = next(u for u in detector.executor.units if u.npu is not None)
        exe = unit.npu
        real_run = exe.run

        def recording_run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            outs = real_run(feeds)
            key = inputs_key([feeds[t.name] for t in exe.inputs])
            recordings.update({f"{key}/{i}": outs[t.name] for i, t in enumerate(exe.outputs)})
            return outs

        exe.run = recording_run  # type: ignore[method-assign]
        for path in images:
            detections, _ = detector.detect(cv2.imread(str(path)))
            found.append(detections)
    np.savez(out, **recordings)
    return found


def _board_env(tmp_path: Path, log: Path) -> dict[str, str]:
    """The environment of a board run: the FAKED RKNNLite (its recordings in ``tmp_path``, its calls logged to
    ``log``) on the path, and no toolchain."""
    return {
        **os.environ,
        "PYTHONPATH": str(FAKES),
        "FAKE_RKNNLITE_RECORDINGS": str(tmp_path / "recordings.npz"),
        "FAKE_RKNNLITE_LOG": str(log),
        "YOLO_EDGE_TOOLCHAINS": str(tmp_path / "no-toolchains"),
    }


def test_the_board_runs_the_bundles_rknn_files_without_torch_or_toolchain(small_deploy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`yolo-edge run` as on an RK3588 board: RKNNLite (FAKED: it returns the simulator's outputs) loads the
    bundle's .rknn unit once per NPU core, the CPU units run on onnxruntime; torch cannot be imported and no
    toolchain is installed. Same detections as the host's simulator run."""
    bundle = small_deploy("rk3588").bundle
    images = sorted(bundle.glob("calib/*.jpg"))[:4]
    source = tmp_path / "frames"
    source.mkdir()
    for p in images:
        (source / p.name).write_bytes(p.read_bytes())
    host = _record_simulator(bundle, sorted(source.iterdir()), tmp_path / "recordings.npz")
    log = tmp_path / "rknnlite.jsonl"
    env = _board_env(tmp_path, log)
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'ultralytics', 'rknn'):\n"
        "            raise ImportError(f'{name} is not on the board')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from yolo_edge.cli.main import main\n"
        f"sys.exit(main(['run', {str(bundle)!r}, '--source', {str(source)!r}, '--json']))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr
    frames = [json.loads(line) for line in run.stdout.splitlines()]
    stored = [StoredUnit.from_dict(u) for u in json.loads((bundle / "units.json").read_text())]
    assert [f["devices"] for f in frames] == [{u.name: u.device for u in stored}] * len(images)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    rknn_file = (bundle / "units" / f"{next(u.name for u in stored if u.device == 'npu')}.rknn").read_bytes()
    import hashlib

    digest = hashlib.sha256(rknn_file).hexdigest()
    # the profile's 3 NPU cores: one context pinned to each (NPU_CORE_0, _1, _2), every one the bundle's file
    assert calls[:6] == [
        c
        for mask in (1, 2, 4)
        for c in ({"call": "load_rknn", "sha256": digest}, {"call": "init_runtime", "core_mask": mask})
    ]
    inference = [c for c in calls if c["call"] == "inference"]
    assert len(inference) >= len(images) and all(c["recorded"] and c["data_format"] == ["nchw"] for c in inference)
    for frame, dets in zip(frames, host):
        assert len(frame["detections"]) == len(dets)
        got = np.array([d["xyxy"] for d in frame["detections"]]).reshape(-1, 4)
        assert np.allclose(got, dets.xyxy, atol=0.05)


@pytest.mark.parametrize(("per_core", "all_cores", "masks"), [(2, False, [1, 2, 4, 1, 2, 4]), (1, True, [7])])
def test_the_board_holds_the_contexts_the_bundle_chose(  # type: ignore[no-untyped-def]
    small_deploy, tmp_path: Path, per_core: int, all_cores: bool, masks: list[int]
) -> None:
    """A bundle whose profile says how its stream runs the cores (deploy --streams writes the way it chose): RKNNLite
    (FAKED: it returns the simulator's outputs) loads the unit as two contexts pinned to each core, or as one context
    on all three (Rockchip's tri-core mode, NPU_CORE_0_1_2)."""
    import shutil

    import yaml

    bundle = tmp_path / "bundle"
    shutil.copytree(small_deploy("rk3588").bundle, bundle)
    profile = yaml.safe_load((bundle / "profile.yaml").read_text())
    profile["multicore"].update(contexts_per_core=per_core, all_cores=all_cores)
    (bundle / "profile.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    source = tmp_path / "frames"
    source.mkdir()
    for p in sorted(bundle.glob("calib/*.jpg"))[:2]:
        (source / p.name).write_bytes(p.read_bytes())
    _record_simulator(bundle, sorted(source.iterdir()), tmp_path / "recordings.npz")
    log = tmp_path / "rknnlite.jsonl"
    env = _board_env(tmp_path, log)
    cmd = [sys.executable, "-m", "yolo_edge.cli.main", "run", str(bundle), "--source", str(source), "--json"]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["core_mask"] for c in calls if c["call"] == "init_runtime"] == masks
    assert len(run.stdout.splitlines()) == 2


def test_without_the_toolchain_rk3588_says_how_to_get_it(tmp_path: Path, few_images: Path) -> None:
    env = {**os.environ, "YOLO_EDGE_TOOLCHAINS": str(tmp_path / "none")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "yolo_edge.cli.main", *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)

    devices = {d["name"]: d for d in json.loads(cli("devices", "--json").stdout)["devices"]}
    assert not devices["rk3588"]["usable"] and "yolo-edge toolchain install rknn" in devices["rk3588"]["why"]
    assert devices["rk3588-approx"]["usable"]
    listed = json.loads(cli("toolchain", "list", "--json").stdout)["toolchains"]
    assert {t["name"]: (t["installed"], t["usable"]) for t in listed}["rknn"] == (False, False)
    deploy = cli("deploy", "--device", "rk3588", "--data", str(few_images), "--out", str(tmp_path / "b"))
    assert deploy.returncode == 2 and len(deploy.stderr.strip().splitlines()) == 1
    assert "yolo-edge toolchain install rknn" in deploy.stderr and not (tmp_path / "b").exists()


def test_install_refuses_an_interpreter_of_another_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rknn-toolkit2's wheels are built for CPython 3.11: another interpreter is a one-line error before
    anything is downloaded, and nothing is left behind."""
    monkeypatch.setenv("YOLO_EDGE_TOOLCHAINS", str(tmp_path / "tc"))
    fake = tmp_path / "python3.9"
    fake.write_text("#!/bin/sh\necho 3.9\n")
    fake.chmod(0o755)
    with pytest.raises(YoloEdgeError, match=r"needs Python 3\.11 .* --python"):
        install_toolchain("rknn", python=str(fake))
    assert not (tmp_path / "tc").exists()
