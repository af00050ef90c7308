"""Backends: the registry and its errors, execution-provider verification, feed validation, INT8
quantization (calibrated on real subgraph outputs, cached) and the OpenVINO recipes."""

from __future__ import annotations

import importlib
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from yolo_edge.backends import cpu_backend, create_backend, device_status, runtime_backend
from yolo_edge.backends.base import Backend, CalibSet, Executable, Feeds, NpuCompileError, io_infos
from yolo_edge.backends.onnxruntime.backend import OnnxRuntimeBackend
from yolo_edge.backends.quantize import cache_dir, quantize_int8
from yolo_edge.core.config import DeviceProfile, Variant, build, load_profile, profile_names
from yolo_edge.core.errors import InternalError, YoloEdgeError
from yolo_edge.core.registry import BUILTIN, ENTRY_POINTS, QDQ_SUFFIX, BackendSpec, backends, read
from yolo_edge.model.split import SplitModel
from yolo_edge.plan.checks import cosine


def test_missing_execution_provider_is_an_error_not_a_silent_cpu_run() -> None:
    with pytest.raises(YoloEdgeError, match="CUDAExecutionProvider is not available in this build"):
        OnnxRuntimeBackend(["CUDAExecutionProvider", "CPUExecutionProvider"])
    with pytest.raises(YoloEdgeError, match="not available"):
        runtime_backend(load_profile("tensorrt"))


def test_unknown_runtime_lists_the_registered_ones() -> None:
    profile = load_profile("cpu")
    object.__setattr__(profile, "runtime", "tflite")  # bypass the profile's own validation to reach the registry
    with pytest.raises(YoloEdgeError, match=f"must be one of {', '.join(backends())}, got 'tflite'"):
        runtime_backend(profile)


def _usable_profiles(runtime: str) -> list[DeviceProfile]:
    shipped = [load_profile(name) for name in profile_names()]
    return [p for p in shipped if p.runtime == runtime and device_status(p)[0]]


def _count_lowering(backend: Backend) -> list[str]:
    """The variants ``backend`` lowers (quantizes, converts) from now on, by label, as they happen."""
    lowered: list[str] = []
    lower = backend._lower

    def counted(model: onnx.ModelProto, v: Variant, feeds: CalibSet | None) -> Any:
        lowered.append(v.label)
        return lower(model, v, feeds)

    backend._lower = counted  # type: ignore[method-assign]
    return lowered


@pytest.mark.parametrize("runtime", list(backends()))
def test_every_registered_backend_keeps_the_contract(runtime: str, demo_split: SplitModel, tensors: list) -> None:  # type: ignore[type-arg]
    """The same cases for every built-in backend, on each shipped profile of it that runs here (a plug-in's: the
    toy's test below)."""
    profiles = _usable_profiles(runtime)
    assert profiles, f"no shipped profile of {runtime} runs here (the test install has every runtime and toolchain)"
    _keeps_the_contract(backends()[runtime], profiles, demo_split, tensors)


def _keeps_the_contract(
    spec: BackendSpec, profiles: list[DeviceProfile], demo_split: SplitModel, tensors: list
) -> None:  # type: ignore[type-arg]
    """Its options parse from YAML with the strict checks (an unknown key is one line), its module builds it for a
    profile, and on each of ``profiles`` it offers only what its spec registers, compiles the demo's head at each
    precision the profile asks for (calibrated where it quantizes), agrees with the FP32 CPU reference, stores only
    registered suffixes and runs from what it stored as it ran when compiled, loading it without lowering the graph
    again where it can."""
    assert callable(importlib.import_module(spec.module).backend_for)
    assert isinstance(build(spec.options, {}, "runtime_options"), spec.options)
    with pytest.raises(YoloEdgeError, match="unknown key 'colour'"):
        build(spec.options, {"colour": "red"}, "runtime_options")
    head = demo_split["head"].model
    names = [t.name for t in io_infos(head)[0]]
    calib, sample = [{n: t[n] for n in names} for t in tensors[:4]], {n: tensors[4][n] for n in names}
    reference = cpu_backend().compile(head, "fp32").run(sample)
    for profile in profiles:
        with create_backend(profile) as backend:
            assert set(backend.int8_schemes) <= set(spec.schemes) and set(backend.quantizers) <= set(spec.quantizers)
            lowered = _count_lowering(backend)
            for precision in (p for p in profile.precisions if p in backend.precisions):
                exe = backend.compile(head, precision, calib)
                out = exe.run(sample)
                assert all(cosine(out[n], reference[n]) >= 0.9 for n in reference), (profile.name, precision)
                stored = exe.artifact_files()
                assert set(stored) <= set(spec.suffixes), (profile.name, precision, set(stored))
                if stored:
                    lowered.clear()
                    again = backend.compile(head, precision, calib, stored).run(sample)
                    assert all(cosine(again[n], out[n]) >= 0.999 for n in out), (profile.name, precision)
                    # compile()'s template: what the backend can load of its own files it loads, never lowering
                    # (quantizing, converting) again; only a backend that loads nothing (Rockchip's simulator) lowers
                    loads = backend._load(head, backend.resolve(precision), stored) is not None
                    assert loads != bool(lowered), (profile.name, precision, loads, lowered)
                _batches_or_says_why(backend, head, precision, calib, exe, [sample, {n: tensors[5][n] for n in names}])
                exe.close()


def _batches_or_says_why(
    backend: Backend, head: onnx.ModelProto, precision: str, calib: CalibSet, one: Executable, frames: list[Feeds]
) -> None:
    """At batch 2 the backend gives each frame what its batch-1 executable ``one`` gives, or refuses before any
    work with its reason (Vela's batch 1)."""
    if backend.max_batch == 1:
        with pytest.raises(NpuCompileError, match=f"cannot compile batch 2: {re.escape(backend.batch_refusal)}"):
            backend.compile(head, precision, calib, batch=2)
        return
    two = backend.compile(head, precision, calib, batch=2)
    rows = two.run({n: np.concatenate([f[n] for f in frames]) for n in frames[0]})
    for i, frame in enumerate(frames):
        alone = one.run(frame)
        assert all(cosine(rows[n][i : i + 1], alone[n]) >= 0.9999 for n in alone), (backend.name, precision, i)
    two.close()


PLUGINS = Path(__file__).parent / "plugins"


@pytest.fixture
def toy_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The toy backend package (tests/plugins/toy_npu) installed as pip leaves a package: its code and a dist-info
    naming its entry point, in a folder on the path for this test only."""
    import shutil
    import sys

    site = tmp_path / "site"
    shutil.copytree(PLUGINS / "toy_npu", site / "toy_npu")
    info = site / "toy_npu-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-npu\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINTS}]\ntoy-npu = toy_npu.spec:SPEC\n")
    monkeypatch.syspath_prepend(str(site))
    read.cache_clear()
    yield site
    read.cache_clear()
    for name in [m for m in sys.modules if m == "toy_npu" or m.startswith("toy_npu.")]:
        del sys.modules[name]


def test_a_backend_from_another_package_keeps_the_contract_and_deploys(  # type: ignore[no-untyped-def]
    toy_site: Path, demo_split: SplitModel, tensors: list, tiny_cfg: Path, tiny_images: Path, tmp_path: Path
) -> None:
    """A vendor's backend as a package of its own (tests/plugins/toy_npu), registered by its entry point: it passes
    the contract cases of the built-in ones, the demo deploys to its profile, the bundle loads and detects; nothing
    under yolo_edge/ names it. Uninstalled, its profile is one line naming the registered runtimes."""
    import sys

    from yolo_edge.bundle import load_bundle
    from yolo_edge.flows.deploy import DeployRequest, deploy
    from yolo_edge.pipeline.preprocess import read_image

    profile_path = str(PLUGINS / "toy-npu.yaml")
    spec = backends()["toy-npu"]
    assert spec.module == "toy_npu.backend" and not any(v.startswith("toy_npu") for v in BUILTIN)
    package = Path(importlib.import_module("yolo_edge").__file__ or "").parent
    assert [p for p in package.rglob("*.py") if "toy_npu" in p.read_text() or "toy-npu" in p.read_text()] == []
    _keeps_the_contract(spec, [load_profile(profile_path)], demo_split, tensors)
    request = DeployRequest(device=profile_path, config=tiny_cfg, data=tiny_images)
    result = deploy(request, out=tmp_path / "bundle", quiet=True)
    rows = {p.name: p for p in result.report.plans}
    assert result.report.profile.name == "toy-npu" and rows["split"].latency is not None
    assert rows["split"].latency.kind == "modelled (board)"
    with load_bundle(result.bundle).detector() as detector:
        _, timing = detector.detect(read_image(sorted(tiny_images.glob("*.jpg"))[0]))
    assert timing.end_to_end_ms > 0
    sys.path.remove(str(toy_site))  # uninstalled
    read.cache_clear()
    with pytest.raises(YoloEdgeError, match="runtime: must be one of onnxruntime, .*got 'toy-npu'"):
        load_profile(profile_path)
    with pytest.raises(YoloEdgeError, match="backend is not installed here: .*entry point registers 'toy-npu'"):
        load_bundle(result.bundle)


def test_the_simulated_npu_delegates_every_hook_it_does_not_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a simulated board does not model (the runtime's op query, per-layer errors, the compiler's report, a
    stored unit read back, ...) is its numerics backend's, forwarded by name: a hook added to Backend reaches it
    with no edit to the simulated NPU. What it models (admission, the build, never the CPU reference) is its own."""
    from yolo_edge.backends.simulated import FORWARDED, SimulatedNpu

    numerics = cpu_backend()
    for name in FORWARDED:  # each answers its own name: the simulated NPU's answer shows where it came from
        monkeypatch.setattr(numerics, name, lambda *_a, _name=name, **_k: _name)
    simulated = SimulatedNpu(load_profile("sim-edge-npu"), numerics)
    assert {"query", "layer_errors", "compiler_report", "describe", "close", "_load"} <= set(FORWARDED)
    assert not {"compile", "resolve", "_admit", "_build", "is_reference"} & set(FORWARDED)
    assert all(getattr(simulated, name)(None, None) == name for name in FORWARDED)
    assert simulated.is_reference(Variant("fp32")) is False and numerics.is_reference(Variant("fp32")) is True


BROKEN = """
import sys
from yolo_edge.core.registry import BackendSpec, RuntimeOptions
print("a plug-in's own print")
NOT_A_SPEC = "not a spec"
TWIN = BackendSpec("onnxruntime", "bad_npu", RuntimeOptions)
LOOSE = BackendSpec("bad-npu", "bad_npu", RuntimeOptions, suffixes=".onnx")
CAPS = BackendSpec("Bad NPU", "bad_npu", RuntimeOptions)
"""


def _broken_site(root: Path, entries: dict[str, str], module: str = BROKEN) -> Path:
    """A package ``bad_npu`` whose dist-info names ``entries`` (entry point name -> object) in the backends group."""
    site = root / "site"
    (site / "bad_npu").mkdir(parents=True, exist_ok=True)
    (site / "bad_npu" / "__init__.py").write_text(module)
    (site / "bad_npu" / "exits.py").write_text("import sys\nsys.exit(0)\n")
    info = site / "bad_npu-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bad-npu\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINTS}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()))
    return site


def test_a_broken_plug_in_is_skipped_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Each way an entry point can be wrong (no such object, not a spec, a taken name, suffixes as a string, a name
    that is no runtime name, a ``sys.exit`` at import) is skipped with one line on stderr naming it; what it prints
    goes to stderr, the built-in backends stay usable."""
    bad = {
        "gone": ("bad_npu:NONE", "does not load: AttributeError"),
        "str": ("bad_npu:NOT_A_SPEC", "is a str, not a yolo_edge.core.registry.BackendSpec"),
        "twin": ("bad_npu:TWIN", "registers 'onnxruntime', which is registered already"),
        "loose": ("bad_npu:LOOSE", "has suffixes '.onnx', not a tuple of strings"),
        "caps": ("bad_npu:CAPS", "names its runtime 'Bad NPU'"),
        "exits": ("bad_npu.exits:SPEC", "does not load: SystemExit: 0"),
    }
    monkeypatch.syspath_prepend(str(_broken_site(tmp_path, {k: v for k, (v, _) in bad.items()})))
    read.cache_clear()
    try:
        registered = backends()
        out, err = capfd.readouterr()
        assert set(BUILTIN_NAMES) == set(registered), registered
        assert out == "" and "a plug-in's own print" in err
        warnings = [line for line in err.splitlines() if line.startswith("yolo-edge: warning:")]
        assert len(warnings) == len(bad), err
        for name, (value, said) in bad.items():
            assert any(f"entry point '{name}' ({value}) {said}" in w and w.endswith(": skipped") for w in warnings), (
                name,
                err,
            )
        assert load_profile("host-lowp").runtime == "openvino"
    finally:
        read.cache_clear()


BUILTIN_NAMES = ("onnxruntime", "openvino", "rknn", "qnn", "ethos-u")


def test_a_plug_in_that_exits_at_import_decides_no_commands_fate(tmp_path: Path) -> None:
    """A plug-in calling ``sys.exit(0)`` as it is imported: ``check`` of a bundle that does not exist still fails
    as bad input (2, not a PASS of 0), ``--version`` and the built-in devices work, ``--json`` stays JSON."""
    import json
    import os
    import subprocess
    import sys

    site = _broken_site(tmp_path, {"exits": "bad_npu.exits:SPEC", "prints": "bad_npu:NOT_A_SPEC"})
    env = {**os.environ, "PYTHONPATH": str(site), "YOLO_OFFLINE": "1", "PYTHONSAFEPATH": "1"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "yolo_edge.cli.main", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)

    read_at_import = (
        "import yolo_edge.cli.main\nfrom yolo_edge.core import registry\nprint(registry.read.cache_info().currsize)"
    )
    imported = subprocess.run(
        [sys.executable, "-c", read_at_import], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert imported.stdout.strip() == "0" and not imported.stderr, imported  # no plug-in runs at import
    checked = cli("check", str(tmp_path / "no-bundle"))
    assert checked.returncode == 2 and "no-bundle" in checked.stderr, checked
    assert "entry point 'exits' (bad_npu.exits:SPEC) does not load: SystemExit: 0: skipped" in checked.stderr
    assert cli("--version").returncode == 0
    listed = cli("devices", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {d["name"] for d in json.loads(listed.stdout)["devices"]} >= {"cpu", "host-lowp"}
    assert "a plug-in's own print" in listed.stderr


def test_yolo_edge_threads_caps_every_runtimes_pool_and_a_bad_value_says_how_to_fix_it(
    demo_split: SplitModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Processes sharing the cores (a camera each, a test run's workers) cap each session's threads."""
    from yolo_edge.backends.onnxruntime.backend import OrtExecutable
    from yolo_edge.backends.openvino.backend import OpenVinoBackend, OpenVinoExecutable

    backbone = demo_split["backbone"].model
    for n in ("1", "2"):
        monkeypatch.setenv("YOLO_EDGE_THREADS", n)
        ort_exe, ov_exe = cpu_backend().compile(backbone, "fp32"), OpenVinoBackend().compile(backbone, "fp32")
        assert isinstance(ort_exe, OrtExecutable) and isinstance(ov_exe, OpenVinoExecutable)
        assert ort_exe.session.get_session_options().intra_op_num_threads == int(n)
        assert int(ov_exe.compiled.get_property("INFERENCE_NUM_THREADS")) == int(n)
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("YOLO_EDGE_THREADS", bad)
        with pytest.raises(YoloEdgeError, match=f"YOLO_EDGE_THREADS='{bad}' is not a thread count"):
            cpu_backend().compile(backbone, "fp32")


FEED_ERRORS = [
    ({}, "missing input tensor"),
    ({"images": np.zeros((1, 3, 64, 64), np.float32)}, "has shape"),
    ({"images": np.zeros((1, 320, 320, 4), np.uint8)}, "has shape"),  # not the pixels of a (1, 3, H, W) image
    ({"images": np.zeros((1, 3, 320, 320), np.float64)}, "expected float32"),
]


@pytest.mark.parametrize(("feeds", "message"), FEED_ERRORS, ids=[m for _, m in FEED_ERRORS])
def test_executable_validates_feeds(demo_split: SplitModel, feeds: dict, message: str) -> None:  # type: ignore[type-arg]
    """yolo-edge builds every feed itself (letterbox, the previous unit): a wrong one is its bug, not the user's."""
    exe = cpu_backend().compile(demo_split["backbone"].model, "fp32")
    with pytest.raises(InternalError, match=message):
        exe.run(feeds)


def test_int8_is_calibrated_on_real_subgraph_outputs_and_cached(demo_split: SplitModel, tensors: list) -> None:  # type: ignore[type-arg]
    neck = demo_split["neck"]
    calib = [{t.name: x[t.name] for t in neck.inputs} for x in tensors[:4]]
    q = quantize_int8(neck.model, calib)
    assert any(n.op_type == "QuantizeLinear" for n in q.graph.node)
    cached = sorted(cache_dir().glob("*.onnx"))
    assert cached
    before = {p: p.stat().st_mtime_ns for p in cached}
    again = quantize_int8(neck.model, calib)
    assert onnx.helper.printable_graph(again.graph) == onnx.helper.printable_graph(q.graph)
    assert {p: p.stat().st_mtime_ns for p in sorted(cache_dir().glob("*.onnx"))} == before
    assert quantize_int8(q, []) is q  # an already-quantized artifact (from a bundle) is used as is


def test_openvino_on_the_cpu_takes_the_letterbox_pixels_and_every_other_graph_the_tensor(
    demo_split: SplitModel,
    tensors: list,  # type: ignore[type-arg]
) -> None:
    """Where latency is measured on OpenVINO's CPU plugin, a unit reading the image takes the letterbox's uint8 BGR
    pixels and normalises them in its own graph (yolo_edge.core.pixels), FP32 or INT8, with outputs bit-identical to the
    tensor's, and a unit ending at the head gives its box and class maps as the convolutions write them ((1, H, W, C),
    handed over as (1, C, H, W) views), which the decode reads to the same candidates, classes, scores and boxes as
    the same maps laid out per channel; a unit reading no image, a
    simulated board's numerics and the onnxruntime CPU twin take the tensor, the twin converting a frame's pixels
    itself, to the same outputs."""
    from yolo_edge.core.pixels import to_pixels
    from yolo_edge.model.decode import HeadOutputs, head_candidates, head_xywh

    backbone, neck = demo_split["backbone"].model, demo_split["neck"].model
    image = tensors[4]["images"]
    pixels = to_pixels(image)
    calib = [{"images": t["images"]} for t in tensors[:4]]
    twin = cpu_backend().compile(backbone, "fp32")
    assert not twin.pixel_inputs
    expected = twin.run({"images": image})
    assert all(np.array_equal(expected[n], a) for n, a in twin.run({"images": pixels}).items())
    with create_backend(load_profile("host-lowp")) as host, create_backend(load_profile("sim-edge-npu")) as sim:
        # the model computed, not garbage: FP32 as the reference; INT8 within what any CPU's kernels give (an
        # AVX2-only one quantizes its weights to 7 bits)
        for variant, least in (("fp32", 0.9999), (Variant("int8", "u8", "nncf"), 0.95)):
            exe = host.compile(backbone, variant, calib)
            assert exe.pixel_inputs == {"images"}
            from_tensor, from_pixels = exe.run({"images": image}), exe.run({"images": pixels})
            assert all(np.array_equal(from_tensor[n], from_pixels[n]) for n in from_tensor), variant
            assert all(cosine(from_pixels[n], expected[n]) >= least for n in expected), variant
        assert not host.compile(neck, "fp32").pixel_inputs
        assert not sim.compile(backbone, "int8", calib).pixel_inputs  # the board's letterbox is modelled
        head = demo_split["head"].model
        sample = {t.name: tensors[4][t.name] for t in io_infos(head)[0]}
        maps, reference = host.compile(head, "fp32").run(sample), cpu_backend().compile(head, "fp32").run(sample)
        layout = HeadOutputs.find({n: a.shape for n, a in maps.items()}, demo_split.exported.meta.imgsz[0])
        assert layout is not None
        for n in reference:  # as written: (1, H, W, C) in memory, handed over as its (1, C, H, W) view
            assert maps[n].shape == reference[n].shape and maps[n].strides[1] == maps[n].itemsize, n
            assert cosine(maps[n], reference[n]) >= 0.9999, n
        dense = {n: np.ascontiguousarray(a) for n, a in maps.items()}  # read the other way: per channel plane
        for conf, multi_label in ((0.001, True), (0.001, False), (0.25, False)):
            found = head_candidates(maps, layout, conf, multi_label)
            assert len(found[0]) > (100 if multi_label else 0)
            assert all(np.array_equal(a, b) for a, b in zip(found, head_candidates(dense, layout, conf, multi_label)))
            assert np.array_equal(head_xywh(maps, layout, found[0]), head_xywh(dense, layout, found[0]))


def test_openvino_outputs_belong_to_the_caller(
    demo_split: SplitModel,
    tensors: list,  # type: ignore[type-arg]
) -> None:
    """A call's outputs are the caller's to keep: the next call on the same thread, by either path (the plain call,
    the bounded one), writes into new arrays, never into the ones handed out before (the plugin writes each call's
    outputs straight into fresh arrays instead of its own reused buffers)."""
    head = demo_split["head"].model
    feeds = [{t.name: x[t.name] for t in io_infos(head)[0]} for x in tensors[:2]]
    with create_backend(load_profile("host-lowp")) as host:
        exe = host.compile(head, "fp32")
        first = exe.run(feeds[0], 30.0)
        kept = {n: a.copy() for n, a in first.items()}
        second, third = exe.run(feeds[1]), exe.run(feeds[1], 30.0)
    for n, a in first.items():
        assert np.array_equal(a, kept[n]) and not np.shares_memory(a, second[n]) and not np.array_equal(a, second[n])
        assert np.array_equal(second[n], third[n]) and not np.shares_memory(second[n], third[n])


def test_openvino_recipe_lets_openvino_fuse_silu_and_requantize_into_each_conv(
    demo_split: SplitModel, tensors: list
) -> None:  # type: ignore[type-arg]
    from yolo_edge.backends.openvino.backend import OpenVinoBackend

    backbone = demo_split["backbone"]
    calib = [{"images": x["images"]} for x in tensors[:4]]
    for_ort, for_ov = quantize_int8(backbone.model, calib), quantize_int8(backbone.model, calib, recipe="openvino-u8")
    q_inputs = {n.input[0] for m in (for_ort, for_ov) for n in m.graph.node if n.op_type == "QuantizeLinear"}
    conv_outs = {n.output[0] for n in backbone.model.graph.node if n.op_type == "Conv"}
    assert conv_outs <= q_inputs  # onnxruntime's recipe quantizes every Conv output (QLinearConv)...
    assert not conv_outs & {
        n.input[0] for n in for_ov.graph.node if n.op_type == "QuantizeLinear"
    }  # ...OpenVINO's none
    for variant in ("int8/u8/qdq", "int8/u8/nncf", "int8/s8/nncf"):  # onnxruntime's quantizer, then NNCF's
        exe = OpenVinoBackend().compile(backbone.model, variant, calib)
        runtime = exe.compiled.get_runtime_model()  # type: ignore[attr-defined]
        convs = [
            op.get_rt_info()
            for op in runtime.get_ordered_ops()
            if op.get_rt_info()["layerType"].astype(str) == "Convolution"
        ]
        assert len(convs) == sum(n.op_type == "Conv" for n in backbone.model.graph.node)
        fused = [ri for ri in convs if "/act/Mul" in ri["originalLayersNames"].astype(str)]
        int8 = [ri for ri in convs if ri["runtimePrecision"].astype(str) in ("u8", "i8")]
        assert len(fused) == len(convs) and len(int8) == len(convs), f"{variant}: every Conv INT8, its SiLU fused"
        out = exe.run(calib[0])
        ref = tensors[0]
        assert all(cosine(out[name], ref[name]) >= 0.95 for name in out), variant
        suffixes = set(exe.artifact_files())  # what a bundle stores: the QDQ graph, or NNCF's OpenVINO IR
        assert suffixes == ({".int8.onnx"} if variant.endswith("qdq") else {".ov.xml", ".ov.bin"})
    s8 = quantize_int8(backbone.model, calib, recipe="openvino-s8")
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in s8.graph.initializer}
    zero_points = [inits[n.input[2]] for n in s8.graph.node if n.op_type == "QuantizeLinear"]
    assert zero_points and all(z.dtype == np.int8 and not z.any() for z in zero_points)  # symmetric int8 activations
    with pytest.raises(YoloEdgeError, match="int8_activations must be one of u8, s8, auto, got 'i4'"):
        replace(load_profile("host-lowp").runtime_options, int8_activations="i4")


@pytest.mark.parametrize("runtime", ["onnxruntime", "openvino"])
def test_a_stored_int8_unit_naming_external_data_is_refused(
    runtime: str, demo_split: SplitModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bundle's ``.int8.onnx`` whose weights name ``cwd_secret.bin``: the runtime would read that file from the
    current folder and use its bytes as weights (issue #21). Refused before any session exists."""
    from onnx.external_data_helper import set_external_data

    monkeypatch.chdir(tmp_path)
    (tmp_path / "cwd_secret.bin").write_bytes(bytes(1 << 20))
    model = onnx.ModelProto()
    original = demo_split["head"].model
    model.CopyFrom(original)
    weight = next(t for t in model.graph.initializer if t.raw_data)
    set_external_data(weight, location="cwd_secret.bin")  # what onnx.save writes for a graph over 2 GB
    weight.ClearField("raw_data")
    backend = cpu_backend() if runtime == "onnxruntime" else runtime_backend(load_profile("host-lowp"))
    with pytest.raises(YoloEdgeError, match="names external data for"):
        backend.compile(original, "int8", artifact={QDQ_SUFFIX: model.SerializeToString()})


def test_the_int8_cache_is_keyed_on_the_graph_and_a_damaged_entry_is_rebuilt(
    demo_split: SplitModel,
    tensors: list,  # type: ignore[type-arg]
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same graph with other metadata (ultralytics writes the export date there) hits the same entry; an
    entry cut short is discarded with a warning and rebuilt, not a DecodeError on every later deploy. A cache of
    its own: it counts the entries, which another xdist worker quantizing into the session's cache would add to."""
    monkeypatch.setenv("YOLO_EDGE_CACHE", str(tmp_path / "cache"))
    neck = demo_split["neck"]
    calib = [{t.name: x[t.name] for t in neck.inputs} for x in tensors[:2]]
    before = set(cache_dir().glob("*.onnx"))
    q = quantize_int8(neck.model, calib, exclude=("/model.12/cv1/conv/Conv",))
    (entry,) = set(cache_dir().glob("*.onnx")) - before
    dated = onnx.ModelProto()
    dated.CopyFrom(neck.model)
    onnx.helper.set_model_props(dated, {"date": "2026-12-01T12:00:00"})
    assert quantize_int8(dated, calib, exclude=("/model.12/cv1/conv/Conv",)).graph == q.graph
    assert set(cache_dir().glob("*.onnx")) == before | {entry}  # the same entry, no new one
    entry.write_bytes(entry.read_bytes()[:100])  # truncated (a full disk, a killed process)
    again = quantize_int8(neck.model, calib, exclude=("/model.12/cv1/conv/Conv",))
    assert "is damaged" in capsys.readouterr().err
    assert onnx.helper.printable_graph(again.graph) == onnx.helper.printable_graph(q.graph)
    known = set(cache_dir().glob("*.onnx"))
    quantize_int8(neck.model, calib[:1], exclude=("/model.12/cv1/conv/Conv",))  # another entry (other calibration)
    (other,) = set(cache_dir().glob("*.onnx")) - known
    entry.write_bytes(other.read_bytes())  # swapped: a whole, valid entry of another graph in its place
    swapped = quantize_int8(neck.model, calib, exclude=("/model.12/cv1/conv/Conv",))
    assert "is damaged" in capsys.readouterr().err
    assert onnx.helper.printable_graph(swapped.graph) == onnx.helper.printable_graph(q.graph)
    for suffix in ("", ".sha256"):  # copied with its own digest: whole and self-consistent, of another key
        entry.with_name(entry.name + suffix).write_bytes(other.with_name(other.name + suffix).read_bytes())
    copied = quantize_int8(neck.model, calib, exclude=("/model.12/cv1/conv/Conv",))
    assert "is damaged" in capsys.readouterr().err
    assert onnx.helper.printable_graph(copied.graph) == onnx.helper.printable_graph(q.graph)


def test_a_cache_that_cannot_be_written_is_a_warning_and_the_work_goes_on_uncached(
    demo_split: SplitModel,
    tensors: list,  # type: ignore[type-arg]
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """YOLO_EDGE_CACHE under a file (as a read-only or full file system, it refuses every write, root included): the
    quantized graph is made all the same, with one warning naming YOLO_EDGE_CACHE."""
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv("YOLO_EDGE_CACHE", str(tmp_path / "a-file" / "cache"))
    neck = demo_split["neck"]
    calib = [{t.name: x[t.name] for t in neck.inputs} for x in tensors[:1]]
    q = quantize_int8(neck.model, calib)
    assert any(n.op_type == "QuantizeLinear" for n in q.graph.node)
    err = capsys.readouterr().err
    assert "is not stored" in err and "YOLO_EDGE_CACHE" in err and len(err.strip().splitlines()) == 1


def _one_conv() -> onnx.ModelProto:
    """A 3 -> 8 channel 3x3 convolution on 1x3x32x32: the smallest graph NNCF quantizes."""
    weight = onnx.numpy_helper.from_array(np.random.default_rng(0).normal(size=(8, 3, 3, 3)).astype(np.float32), "w")
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        "one_conv",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 32, 32])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8, 32, 32])],
        [weight],
    )
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])


@pytest.mark.parametrize("quantizer", ["nncf", "onnxruntime"])
def test_an_upgraded_quantizer_quantizes_anew(quantizer: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The INT8 cache is keyed on the release of the quantizer that made an entry: after ``pip install -U nncf``
    (or onnxruntime) a deploy does not read the old release's graphs as the new one's."""
    import importlib.metadata

    monkeypatch.setenv("YOLO_EDGE_CACHE", str(tmp_path))  # its own cache: the session's is written by other workers

    from yolo_edge.backends.openvino.nncf_int8 import quantize_nncf

    model = _one_conv()
    calib = [{"x": np.random.default_rng(i).random((1, 3, 32, 32), np.float32)} for i in range(2)]

    def quantize() -> None:
        _ = quantize_nncf(model, calib, "u8") if quantizer == "nncf" else quantize_int8(model, calib)

    def entries() -> set[Path]:
        return set(cache_dir().glob("*.bin" if quantizer == "nncf" else "*.onnx"))

    quantize()
    before = entries()
    quantize()
    assert entries() == before  # the same release: read back
    installed = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda p: "99.0" if p == quantizer else installed(p))
    quantize()
    assert len(entries() - before) == 1
