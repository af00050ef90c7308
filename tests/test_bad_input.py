"""Bad input and faults, as a user meets them: each case runs the CLI and asserts the exit code, one line on
stderr without a traceback, and nothing lost or left behind (the --out path, its temporary siblings, temp folders,
files beside the inputs). User files survive.

The cases run the CLI's ``main()`` in this process (its working folder and TMPDIR the case's, stdout and stderr
captured at the file descriptors, a warning counted as a line on stderr); a few of them, and the signal and
file-size-limit tests, run it as the console script does, in a process of its own.

One row per case of the sweep in issue #11, the defects it found and the sound cases that must stay sound.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import yaml

from tests.conftest import plan_bundle
from yolo_edge.cli.main import main
from yolo_edge.core.config import DeployConfig, configs_dir
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.demo import CLASS_NAMES
from yolo_edge.flows.deploy import DeployResult
from yolo_edge.model.meta import demo_model_path
from yolo_edge.model.split import SplitModel
from yolo_edge.pipeline.preprocess import default_calib_dir
from yolo_edge.plan.placement import PlacementPlan


@dataclass
class Env:
    root: Path  # the working folder of every command
    tmp: Path  # its TMPDIR: must be empty after every command
    bundle: Path  # a deployed bundle (demo model on host-lowp, small config), never modified
    image: Path  # a readable image
    ir_bundle: Path  # the demo's backbone and neck as one NNCF INT8 unit on host-lowp, whatever a deploy would choose


Cli = Callable[..., subprocess.CompletedProcess[str]]


def _process(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    """``yolo-edge ARGS`` in a process of its own, in ``env.root`` with ``env.tmp`` as its TMPDIR."""
    child = {**os.environ, "TMPDIR": str(env.tmp), "YOLO_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "yolo_edge.cli.main", *args],
        cwd=env.root,
        env=child,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def cli(env: Env, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    """``cli(*args)``: ``main(args)`` in this process, as ``_process`` runs it: in ``env.root``, TMPDIR ``env.tmp``
    (``tempfile`` made to read it again), its exit code (argparse's ``SystemExit`` included), what it wrote to the
    file descriptors 1 and 2, and each warning it raised as a line of stderr (a user would see it there)."""
    monkeypatch.chdir(env.root)
    monkeypatch.setenv("TMPDIR", str(env.tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        capfd.readouterr()
        with warnings.catch_warnings(record=True) as caught:  # under the filters the libraries installed
            try:
                code = main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 2
        out, err = capfd.readouterr()
        shown = [w for w in caught if not issubclass(w.category, DeprecationWarning | PendingDeprecationWarning)]
        err += "".join(f"{w.category.__name__}: {w.message}\n" for w in shown)  # outside __main__ those are hidden
        return subprocess.CompletedProcess(list(args), code, out, err)

    return run


@pytest.fixture(scope="module")
def env(
    tmp_path_factory: pytest.TempPathFactory,
    deployed: DeployResult,
    demo_split: SplitModel,
    tensors: list,  # type: ignore[type-arg]
    fast_cfg: DeployConfig,
) -> Env:
    root = tmp_path_factory.mktemp("bad")
    (root / "tmp").mkdir()
    # the deploy's own choice may be whole-cpu on a CPU where INT8 barely wins (a near-tie goes to FP32): the cases
    # about a stored OpenVINO IR read one that is there by construction
    plan = PlacementPlan.manual(demo_split, {"backbone": "int8/s8/nncf", "neck": "int8/s8/nncf"}, "host-lowp")
    ir = plan_bundle(root / "ir-bundle", demo_split, plan, tensors, fast_cfg)
    return Env(root, root / "tmp", deployed.bundle, sorted(default_calib_dir().glob("*.jpg"))[0], ir)


def _leftovers(env: Env) -> list[str]:
    """What a command left in its TMPDIR, less onnxruntime's own ``.ses`` file (written on import, kept on purpose)."""
    return [p.name for p in env.tmp.iterdir() if p.name != ".ses"]


def _copy_bundle(env: Env, name: str) -> Path:
    dst = env.root / name
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(env.bundle, dst)
    return dst


def _coco(env: Env, ann: dict[str, object], cats: int = 1) -> str:
    folder = env.root / "coco"
    folder.mkdir(exist_ok=True)
    shutil.copy(env.image, folder / "a.jpg")
    doc = {
        "images": [{"id": 1, "file_name": "a.jpg", "width": 320, "height": 320}],
        "categories": [{"id": i + 1, "name": f"c{i}"} for i in range(cats)],
        "annotations": [ann],
    }
    (folder / "ann.json").write_text(json.dumps(doc))
    return str(folder / "ann.json")


def _user_folder(env: Env) -> str:
    folder = env.root / "mine"
    folder.mkdir(exist_ok=True)
    (folder / "notes.txt").write_text("my notes")
    return str(folder)


def _no_bundle_file(name: str) -> Callable[[Env], str]:
    def make(env: Env) -> str:
        b = _copy_bundle(env, f"broken-{name.replace('/', '-')}")
        (b / name).unlink()
        return str(b)

    return make


def _meta_without(key: str) -> Callable[[Env], str]:
    def make(env: Env) -> str:
        b = _copy_bundle(env, f"meta-{key}")
        meta = json.loads((b / "meta.json").read_text())
        del meta[key]
        (b / "meta.json").write_text(json.dumps(meta))
        return str(b)

    return make


def _damaged(name: str, data: bytes) -> Callable[[Env], str]:
    def make(env: Env) -> str:
        b = _copy_bundle(env, f"damaged-{name}")
        (b / name).write_bytes(data)
        return str(b)

    return make


def _units_edit(name: str, edit: Callable[[list[dict[str, object]]], None]) -> Callable[[Env], str]:
    return _json_edit("units.json", name, edit)  # type: ignore[arg-type]


def _json_edit(file: str, name: str, edit: Callable[[object], None]) -> Callable[[Env], str]:
    """A copied bundle with its JSON ``file`` changed by ``edit``."""

    def make(env: Env) -> str:
        b = _copy_bundle(env, f"{file.split('.')[0]}-{name}")
        doc = json.loads((b / file).read_text())
        edit(doc)
        (b / file).write_text(json.dumps(doc))
        return str(b)

    return make


def _bright_lighting(meta: Any) -> None:
    meta["lighting"] = {"mean": [10, 900], "std": [1, 2]}


def _dark_lighting(meta: Any) -> None:
    meta["lighting"] = {"mean": [0, 0], "std": [0, 0]}


def _millions_kept(meta: Any) -> None:
    meta["boxes_kept"] = [50_000_000, 100_000_000]


def _floor_off(units: list[dict[str, object]]) -> None:
    units[0]["audit_floor"] = -1


BASE_NAN_MAP = '{"p95_ms": 9, "accuracy": {"kind": "labels", "data_sha256": "x", "map50_95": NaN, "map50": 0.5}}'


def _meta_imgsz(meta: Any) -> None:
    meta["model"]["imgsz"] = [16384, 16384]


def _more_names(meta: Any) -> None:
    meta["model"]["names"] += ["x", "y", "z"]


def _graph_outside(units: list[dict[str, object]]) -> None:
    units[0]["graph"] = "subgraphs/../../../../etc/passwd.onnx"


def _unit_on_gpu(units: list[dict[str, object]]) -> None:
    units[-1]["device"] = "gpu"


def _damaged_unit_graph(env: Env) -> str:
    """The FP32 graph of the bundle's first unit (whichever file units.json names) overwritten with junk."""
    b = _copy_bundle(env, "damaged-unit-graph")
    (b / json.loads((b / "units.json").read_text())[0]["graph"]).write_bytes(b"\x00junk")
    return str(b)


def _first_unit_is_the_head(env: Env) -> str:
    """The first unit's graph replaced by the bundle's own head graph: valid, self-contained, out of place."""
    b = _copy_bundle(env, "swapped-unit-graph")
    first = json.loads((b / "units.json").read_text())[0]["graph"]
    shutil.copy(b / "subgraphs" / "head.onnx", b / first)
    return str(b)


def _with_loop(rel: str | None) -> Callable[[Env], str]:
    """A bundle whose graph ``rel`` (default: the first unit's) also holds a Loop of 2e9 iterations."""

    def make(env: Env) -> str:
        import onnx

        b = _copy_bundle(env, f"loop-{rel or 'unit'}")
        path = b / (rel or json.loads((b / "units.json").read_text())[0]["graph"])
        model = onnx.load(str(path))
        body = onnx.helper.make_graph(
            [onnx.helper.make_node("Identity", ["cond"], ["cond_out"])],
            "body",
            [onnx.helper.make_tensor_value_info(n, t, []) for n, t in (("i", 7), ("cond", 9))],
            [onnx.helper.make_tensor_value_info("cond_out", 9, [])],
        )
        model.graph.initializer.extend(
            [onnx.numpy_helper.from_array(np.array(2_000_000_000, np.int64), "trips"),
             onnx.numpy_helper.from_array(np.array(True), "go")]
        )  # fmt: skip
        model.graph.node.append(onnx.helper.make_node("Loop", ["trips", "go"], [], body=body))
        path.write_bytes(model.SerializeToString())
        return str(b)

    return make


def _custom_op(env: Env) -> str:
    """A bundle whose first unit graph also holds an op of a domain no runtime here knows: it loads, and every
    runtime refuses to make a session of it."""
    import onnx

    b = _copy_bundle(env, "custom-op")
    path = b / json.loads((b / "units.json").read_text())[0]["graph"]
    model = onnx.load(str(path))
    model.graph.node.append(onnx.helper.make_node("Mystery", [model.graph.input[0].name], ["mystery"], domain="x.y"))
    model.opset_import.append(onnx.helper.make_opsetid("x.y", 1))
    path.write_bytes(model.SerializeToString())
    return str(b)


def _renamed_ir_output(env: Env) -> str:
    """A stored OpenVINO IR whose last tensor name was edited: it parses, and OpenVINO refuses the unit it claims
    to be (its outputs are not the unit's)."""
    b = env.root / "renamed-ir-output"
    shutil.rmtree(b, ignore_errors=True)
    shutil.copytree(env.ir_bundle, b)
    (xml,) = (b / "units").glob("*.ov.xml")
    text = xml.read_text()
    last = re.findall(r'names="([^"]*)"', text)[-1]
    xml.write_text(text.replace(f'names="{last}"', 'names="renamed_output"'))
    return str(b)


def _host_bf16() -> bool:
    """Whether OpenVINO runs BF16 on this host's CPU (measured, never assumed from the CPU's name)."""
    from yolo_edge.backends import create_backend
    from yolo_edge.core.config import load_profile

    with create_backend(load_profile("host-lowp")) as backend:
        return "bf16" in backend.precisions


def _ir_claimed_bf16(env: Env) -> str:
    """The NNCF INT8 unit's bundle with plan.json and units.json both saying BF16: the stored IR is INT8, and a
    loader that compiled it under the claim would run another precision than the one shown."""
    b = env.root / "ir-claimed-bf16"
    shutil.rmtree(b, ignore_errors=True)
    shutil.copytree(env.ir_bundle, b)
    units = json.loads((b / "units.json").read_text())
    units[0]["variant"] = "bf16"
    (b / "units.json").write_text(json.dumps(units))
    plan = json.loads((b / "plan.json").read_text())
    for sub in plan["subgraphs"]:
        if sub["device"] == "npu":
            sub.update(precision="bf16", int8_scheme=None, quantizer=None)
    (b / "plan.json").write_text(json.dumps(plan))
    return str(b)


def _hostile_sample(env: Env) -> str:
    """sample.npz whose image tensor's header claims 2**40 floats: refused from the header, nothing allocated."""
    import io
    import zipfile

    b = _copy_bundle(env, "hostile-sample")
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    npy = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + b"\x00" * 64
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("images.npy", npy)
    (b / "sample.npz").write_bytes(buf.getvalue())
    return str(b)


def _sample_bomb(env: Env) -> str:
    """sample.npz whose image tensor has the right header, then 256 MiB of zeros deflated to a few hundred KB: read
    up to one byte past the array, so nothing near the bomb's size is inflated."""
    import zipfile

    b = _copy_bundle(env, "sample-bomb")
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 320, 320), }"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    chunk = bytes(1 << 20)
    with zipfile.ZipFile(b / "sample.npz", "w", zipfile.ZIP_DEFLATED) as z, z.open("images.npy", "w") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode())
        for _ in range(256):
            f.write(chunk)
    return str(b)


def _baseline(text: str) -> Callable[[Env], str]:
    def make(env: Env) -> str:
        (env.root / "base.json").write_text(text)
        return str(env.root / "base.json")

    return make


def _garbage(name: str) -> Callable[[Env], str]:
    def make(env: Env) -> str:
        (env.root / name).write_bytes(b"\x00garbage" * 40)
        return str(env.root / name)

    return make


def _empty_dir(env: Env) -> str:
    (env.root / "empty").mkdir(exist_ok=True)
    return str(env.root / "empty")


def _a_file(env: Env) -> str:
    (env.root / "afile").write_text("x")
    return str(env.root / "afile")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once it is closed


def _log_file(env: Env) -> str:
    (env.root / "events.jsonl").write_text("")
    return str(env.root / "events.jsonl")


_LISTENING: list[socket.socket] = []  # kept open for the session: what _not_ray names must stay there


def _not_ray() -> str:
    """The address of a socket that takes connections and never answers (not a Ray head)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    _LISTENING.append(s)
    return f"127.0.0.1:{s.getsockname()[1]}"


BOMB = "\n".join(  # a "billion laughs": under 1 KB of YAML, 9**9 strings once its aliases are expanded
    ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
)


def _config(key: str, value: object) -> Callable[[Env], str]:
    """The shipped deploy config with ``key`` (dotted) set to ``value``."""

    def make(env: Env) -> str:
        doc = yaml.safe_load((configs_dir() / "default.yaml").read_text())
        *parents, last = key.split(".")
        node = doc
        for k in parents:
            node = node[k]
        node[last] = value
        path = env.root / f"cfg-{key}.yaml"
        path.write_text(yaml.safe_dump(doc))
        return str(path)

    return make


def _profile(key: str, value: object) -> Callable[[Env], str]:
    """The shipped sim-edge-npu profile with ``key`` (dotted) set to ``value``, as a file of the user's."""

    def make(env: Env) -> str:
        doc = yaml.safe_load((configs_dir() / "devices" / "sim-edge-npu.yaml").read_text())
        *parents, last = key.split(".")
        node = doc
        for k in parents:
            node = node[k]
        node[last] = value
        path = env.root / f"profile-{key}.yaml"
        path.write_text(yaml.safe_dump(doc))
        return str(path)

    return make


def _device(env: Env) -> str:
    return "/dev/zero"


def _text(name: str, data: str | bytes) -> Callable[[Env], str]:
    def make(env: Env) -> str:
        path = env.root / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        return str(path)

    return make


def _fifo(env: Env) -> str:
    path = env.root / "fifo.yaml"
    if not path.exists():
        os.mkfifo(path)
    return str(path)


def _bundle_with(name: str, make_it: Callable[[Path], None]) -> Callable[[Env], str]:
    def make(env: Env) -> str:
        b = _copy_bundle(env, f"hostile-{name}")
        make_it(b / name)
        return str(b)

    return make


def _replace_by_link(target: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.unlink()
        path.symlink_to(target)

    return make


def _replace_by_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _labelled(rows: str) -> Callable[[Env], str]:
    """A one-image ultralytics data.yaml (the demo's six classes) whose label file holds ``rows``."""

    def make(env: Env) -> str:
        root = env.root / f"labels-{abs(hash(rows))}"
        (root / "images").mkdir(parents=True, exist_ok=True)
        (root / "labels").mkdir(exist_ok=True)
        shutil.copy(env.image, root / "images" / "a.jpg")
        (root / "labels" / "a.txt").write_text(rows)
        doc = {"path": str(root), "val": "images", "names": list(CLASS_NAMES)}
        (root / "data.yaml").write_text(yaml.safe_dump(doc))
        return str(root / "data.yaml")

    return make


def _pictures(env: Env, name: str = "pics") -> str:
    """A user's folder of two photos (the calibration images), made once."""
    folder = env.root / name / "imgs"
    if not folder.is_dir():
        folder.mkdir(parents=True)
        for k, src in enumerate(sorted(default_calib_dir().glob("*.jpg"))[:2]):
            shutil.copy(src, folder / f"img{k}.jpg")
    return str(folder)


def _new_unit(name: str, make_it: Callable[[Path], None]) -> Callable[[Env], str]:
    """A copied bundle with ``units/<name>`` made by ``make_it`` (a unit the plan may not even use)."""

    def make(env: Env) -> str:
        b = _copy_bundle(env, f"unit-{name}")
        (b / "units").mkdir(exist_ok=True)
        make_it(b / "units" / name)
        return str(b)

    return make


def _plan_edit(name: str, edit: Callable[[dict[str, object]], None]) -> Callable[[Env], str]:
    return _json_edit("plan.json", name, edit)  # type: ignore[arg-type]


def _rename_first(plan: dict[str, object]) -> None:
    plan["subgraphs"][0]["name"] = "torso"  # type: ignore[index]


def _decode_on_npu(plan: dict[str, object]) -> None:
    decode = next(s for s in plan["subgraphs"] if s["name"] == "decode")  # type: ignore[attr-defined, index]
    decode["device"] = "npu"


def _int9_backbone(plan: dict[str, object]) -> None:
    plan["subgraphs"][0]["precision"] = "int9"  # type: ignore[index]


def _guessed_kind(plan: dict[str, object]) -> None:
    plan["subgraphs"][0]["latency_ms"]["kind"] = "guessed"  # type: ignore[index]


# (case, argv builder, exit code, words the one-line message must contain)
Case = tuple[str, Callable[[Env], list[str]], int, str | Callable[[], str]]  # the words, or what asks the host for them
CASES: list[Case] = [
    # defects of issue #21: config values range-checked where they are parsed, before any work
    (
        "latency_runs: 0",
        lambda e: ["deploy", "--config", _config("validate.latency_runs", 0)(e)],
        2,
        "latency_runs: must be in [1, 100000], got 0",
    ),
    (
        "latency_runs: -1",
        lambda e: ["deploy", "--config", _config("validate.latency_runs", -1)(e)],
        2,
        "must be in [1, 100000], got -1",
    ),
    (
        "precision.images: 0",
        lambda e: ["deploy", "--config", _config("checks.precision.images", 0)(e)],
        2,
        "images: must be in [1, 100000], got 0",
    ),
    (
        "min_cosine: 2",
        lambda e: ["deploy", "--config", _config("checks.precision.min_cosine", 2)(e)],
        2,
        "min_cosine: must be in [-1, 1]",
    ),
    (
        "max_drift: -1",
        lambda e: ["deploy", "--config", _config("validate.max_drift", -1)(e)],
        2,
        "max_drift: must be in [0, 1]",
    ),
    ("max_drift: nan", lambda e: ["deploy", "--config", _config("validate.max_drift", float("nan"))(e)], 2, "got nan"),
    ("sla_ms: -5", lambda e: ["deploy", "--config", _config("validate.sla_ms", -5)(e)], 2, "sla_ms: must be > 0"),
    ("nms.conf: 2", lambda e: ["deploy", "--config", _config("nms.conf", 2)(e)], 2, "nms.conf: must be in (0, 1]"),
    # a config that is not one
    (
        "binary --config",
        lambda e: ["deploy", "--config", _text("bin.yaml", b"\x00\xff\xfe" * 50)(e)],
        2,
        "is not a text file",
    ),
    ("folder --config", lambda e: ["deploy", "--config", _empty_dir(e)], 2, "is a folder"),
    ("FIFO --config", lambda e: ["deploy", "--config", _fifo(e)], 2, "not a regular file"),
    (
        "alias bomb --config",
        lambda e: ["deploy", "--config", _text("bomb.yaml", BOMB)(e)],
        2,
        "aliases (*name) are not allowed",
    ),
    ("/dev/zero --config", lambda e: ["deploy", "--config", "/dev/zero"], 2, "not a regular file"),
    # a bundle is untrusted input
    (
        "alias bomb deploy.yaml",
        lambda e: ["bench", _damaged("deploy.yaml", BOMB.encode())(e)],
        2,
        "aliases (*name) are not allowed",
    ),
    (
        "alias bomb profile.yaml",
        lambda e: ["bench", _damaged("profile.yaml", BOMB.encode())(e)],
        2,
        "aliases (*name) are not allowed",
    ),
    (
        "profile.yaml -> /dev/zero",
        lambda e: ["bench", _bundle_with("profile.yaml", _replace_by_link("/dev/zero"))(e)],
        2,
        "points outside it, to /dev/zero",
    ),
    (
        "deploy.yaml a FIFO",
        lambda e: ["bench", _bundle_with("deploy.yaml", _replace_by_fifo)(e)],
        2,
        "not a regular file",
    ),
    ("a FIFO in units/", lambda e: ["bench", _new_unit("spare.int8.onnx", os.mkfifo)(e)], 2, "is not a regular file"),
    (
        "a unit -> /dev/zero",
        lambda e: ["bench", _new_unit("spare.int8.onnx", lambda p: p.symlink_to("/dev/zero"))(e)],
        2,
        "points outside it",
    ),
    (
        "plan.json names an unknown subgraph",
        lambda e: ["bench", _plan_edit("torso", _rename_first)(e)],
        2,
        "the model's subgraphs are",
    ),
    (
        "plan.json puts the decode on the NPU",
        lambda e: ["bench", _plan_edit("decode", _decode_on_npu)(e)],
        2,
        "decode on the accelerator",
    ),
    (
        "plan.json names a precision that does not exist",
        lambda e: ["bench", _plan_edit("int9", _int9_backbone)(e)],
        2,
        "unknown precision 'int9'",
    ),
    (
        "plan.json names a latency kind that does not exist",
        lambda e: ["bench", _plan_edit("guessed", _guessed_kind)(e)],
        2,
        "latency kind must be one of measured, modelled, got 'guessed'",
    ),
    ("deploy --out a mount point", lambda e: ["deploy", "--quiet", "--out", "/proc"], 2, "is a mount point"),
    (
        "YOLO-World export",
        lambda e: ["split", "--model", "yolov8s-world.yaml", "--imgsz", "320"],
        2,
        "could not export",
    ),
    (
        "a refused run makes no --save",
        lambda e: ["run", _damaged("plan.json", b"{not json")(e), "--source", str(e.image), "--save", "never-made"],
        2,
        "damaged bundle",
    ),
    # data that is not what it says
    (
        "binary data.yaml",
        lambda e: ["val", str(e.bundle), "--data", _text("data.yaml", b"\x00\xff" * 64)(e)],
        2,
        "is not a text file",
    ),
    (
        "binary COCO JSON",
        lambda e: ["val", str(e.bundle), "--data", _text("ann.json", b"\x00\xff" * 64)(e)],
        2,
        "is not a COCO detection JSON",
    ),
    (
        "garbage label row",
        lambda e: ["val", str(e.bundle), "--data", _labelled("zz top\n")(e)],
        2,
        "expected 'class cx cy w h' numbers",
    ),
    (
        "ragged label row",
        lambda e: ["val", str(e.bundle), "--data", _labelled("0 0.5 0.5 0.2\n")(e)],
        2,
        "expected 5 values",
    ),
    (
        "label class 99",
        lambda e: ["val", str(e.bundle), "--data", _labelled("99 0.5 0.5 0.2 0.2\n")(e)],
        2,
        "class 99 is not one of the 6",
    ),
    (
        "label class -1",
        lambda e: ["val", str(e.bundle), "--data", _labelled("-1 0.5 0.5 0.2 0.2\n")(e)],
        2,
        "class -1 is not one of",
    ),
    (
        "label NaN",
        lambda e: ["val", str(e.bundle), "--data", _labelled("0 nan 0.5 0.2 0.2\n")(e)],
        2,
        "normalised to [0, 1]",
    ),
    (
        "label polygon",
        lambda e: ["val", str(e.bundle), "--data", _labelled("0 0.1 0.1 0.5 0.1 0.5 0.5\n")(e)],
        2,
        "segmentation polygon",
    ),
    # live-source options
    (
        "run --max-fps nan",
        lambda e: ["run", str(e.bundle), "--source", str(e.image), "--max-fps", "nan"],
        2,
        "not a finite number",
    ),
    (
        "run --max-age-ms -5",
        lambda e: ["run", str(e.bundle), "--source", str(e.image), "--max-age-ms", "-5"],
        2,
        "must be a positive number",
    ),
    # every output path checked before any work
    (
        "run --events a folder",
        lambda e: ["run", str(e.bundle), "--source", str(e.image), "--events", _empty_dir(e)],
        2,
        "is a folder",
    ),
    (
        "run --events in a missing folder",
        lambda e: ["run", str(e.bundle), "--source", str(e.image), "--events", "no/ev.jsonl"],
        2,
        "does not exist",
    ),
    (
        "run --save the source folder",
        lambda e: ["run", str(e.bundle), "--source", _pictures(e), "--save", _pictures(e)],
        2,
        "over the originals",
    ),
    (
        "run --save a source's folder",
        lambda e: [
            "run",
            str(e.bundle),
            "--source",
            str(e.image),
            "--source",
            _pictures(e),
            "--save",
            str(Path(_pictures(e)).parent),
        ],
        2,
        "over the originals",
    ),
    # defects of issue #11
    (
        "deploy --out a user's folder",
        lambda e: ["deploy", "--quiet", "--out", _user_folder(e)],
        2,
        "not a yolo-edge bundle",
    ),
    ("deploy --out .", lambda e: ["deploy", "--quiet", "--out", "."], 2, "current folder"),
    ("export --imgsz 33", lambda e: ["export", "--model", "yolov8n.yaml", "--imgsz", "33"], 2, "multiple of 32"),
    ("split --imgsz 33", lambda e: ["split", "--model", "yolov8n.yaml", "--imgsz", "33"], 2, "multiple of 32"),
    ("plan --imgsz 33", lambda e: ["plan", "--model", "yolov8n.yaml", "--imgsz", "33"], 2, "multiple of 32"),
    ("deploy --imgsz 33", lambda e: ["deploy", "--imgsz", "33"], 2, "multiple of 32"),
    ("deploy --imgsz 100000", lambda e: ["deploy", "--imgsz", "100000", "--out", "o"], 2, "too large: at most 4096"),
    # --data without --quiet: deploy says "exporting ..." before it exports, so one line of stderr shows the data
    # was refused before the export
    (
        "COCO annotation without bbox",
        lambda e: ["deploy", "--out", "o", "--data", _coco(e, {"id": 7, "image_id": 1, "category_id": 1})],
        2,
        "annotation 7 has no bbox",
    ),
    (
        "COCO unknown category_id",
        lambda e: [
            "deploy",
            "--out",
            "o",
            "--data",
            _coco(e, {"id": 7, "image_id": 1, "category_id": 9, "bbox": [1, 1, 5, 5]}),
        ],
        2,
        "category_id 9",
    ),
    (
        "COCO negative width",
        lambda e: [
            "deploy",
            "--out",
            "o",
            "--data",
            _coco(e, {"id": 7, "image_id": 1, "category_id": 1, "bbox": [10, 10, -5, 5]}),
        ],
        2,
        "negative width",
    ),
    (
        "run --save an existing file",
        lambda e: ["run", str(e.bundle), "--source", str(e.image), "--save", _a_file(e)],
        2,
        "is a file",
    ),
    (
        "run --save an unwritable folder",
        lambda e: ["run", str(e.bundle), "--source", str(e.image), "--save", _a_file(e) + "/sub"],
        2,
        "cannot write in",
    ),
    (
        "bundle without profile.yaml",
        lambda e: ["run", _no_bundle_file("profile.yaml")(e), "--source", str(e.image)],
        2,
        "damaged bundle (no profile.yaml)",
    ),
    (
        "bundle without deploy.yaml",
        lambda e: ["check", _no_bundle_file("deploy.yaml")(e)],
        2,
        "damaged bundle (no deploy.yaml)",
    ),
    (
        "meta.json without fuse_units",
        lambda e: ["bench", _meta_without("fuse_units")(e)],
        2,
        "meta.json has no fuse_units",
    ),
    (
        "damaged model.onnx in a bundle",  # the FP32 reference: read by val and check, not by run
        lambda e: ["val", _damaged("model.onnx", b"\x00junk")(e), "--data", _pictures(e)],
        2,
        "deploy it again",
    ),
    (
        "a damaged unit graph in a bundle",
        lambda e: ["run", _damaged_unit_graph(e), "--source", str(e.image)],
        2,
        "deploy it again",
    ),
    (
        "--write-baseline into a missing folder",
        lambda e: ["check", str(e.bundle), "--write-baseline", "nowhere/base.json"],
        2,
        "does not exist",
    ),
    ("bench --runs -3", lambda e: ["bench", str(e.bundle), "--runs", "-3"], 2, "--runs: must be a positive integer"),
    ("bench --runs 0", lambda e: ["bench", str(e.bundle), "--runs", "0"], 2, "--runs: must be a positive integer"),
    (
        "check --max-drift -1",
        lambda e: ["check", str(e.bundle), "--max-drift", "-1"],
        2,
        "--max-drift: must be zero or positive",
    ),
    ("check --sla-ms 0", lambda e: ["check", str(e.bundle), "--sla-ms", "0"], 2, "--sla-ms: must be a positive number"),
    ("deploy --sla-ms nan", lambda e: ["deploy", "--sla-ms", "nan"], 2, "not a finite number"),
    ("deploy --sla-ms -5", lambda e: ["deploy", "--sla-ms", "-5"], 2, "--sla-ms: must be a positive number"),
    (
        "NaN baseline",
        lambda e: ["check", str(e.bundle), "--baseline", _baseline('{"p95_ms": NaN}')(e)],
        2,
        "not a positive number",
    ),
    (
        "zero baseline",
        lambda e: ["check", str(e.bundle), "--baseline", _baseline('{"p95_ms": 0}')(e)],
        2,
        "not a positive number",
    ),
    # a baseline's every number checked: a NaN accuracy would switch the accuracy gate off (a FAIL read as PASS)
    (
        "baseline accuracy NaN",
        lambda e: ["check", str(e.bundle), "--baseline", _baseline(BASE_NAN_MAP)(e)],
        2,
        "accuracy.map50_95 is nan, not a number from 0 to 1",
    ),
    (
        "baseline p95 a string",
        lambda e: ["check", str(e.bundle), "--baseline", _baseline('{"p95_ms": "100"}')(e)],
        2,
        "p95_ms is '100', not a positive number",
    ),
    (
        "baseline p95 true",
        lambda e: ["check", str(e.bundle), "--baseline", _baseline('{"p95_ms": true}')(e)],
        2,
        "p95_ms is True, not a positive number",
    ),
    (
        "baseline accuracy without its kind",
        lambda e: ["check", str(e.bundle), "--baseline", _baseline('{"p95_ms": 9, "accuracy": {"map50": 1}}')(e)],
        2,
        "accuracy.kind is None, not labels or agreement",
    ),
    (
        "export of an unloadable .pt",
        lambda e: ["export", "--model", _garbage("bad.pt")(e), "--out", "exp"],
        2,
        "cannot load",
    ),
    (
        "split of an unloadable .pt",
        lambda e: ["split", "--model", _garbage("bad2.pt")(e), "--out", "spl"],
        2,
        "cannot load",
    ),
    # the sound cases of the sweep, kept sound
    ("missing model", lambda e: ["deploy", "--quiet", "--model", "nope.pt", "--out", "o"], 2, "model not found"),
    (
        "corrupt onnx",
        lambda e: ["deploy", "--quiet", "--model", _garbage("c.onnx")(e), "--out", "o"],
        2,
        "not a readable ONNX",
    ),
    (
        "unknown device",
        lambda e: ["deploy", "--quiet", "--device", "npu9000", "--out", "o"],
        2,
        "unknown device 'npu9000'",
    ),
    ("empty data folder", lambda e: ["deploy", "--data", _empty_dir(e), "--out", "o"], 2, "has no images"),
    ("damaged plan.json", lambda e: ["bench", _damaged("plan.json", b"{not json")(e)], 2, "damaged bundle"),
    ("damaged units.json", lambda e: ["bench", _damaged("units.json", b"[{}]")(e)], 2, "damaged bundle (KeyError"),
    ("no units.json", lambda e: ["bench", _no_bundle_file("units.json")(e)], 2, "damaged bundle (no units.json)"),
    (
        "a unit graph outside the bundle",
        lambda e: ["bench", _units_edit("outside", _graph_outside)(e)],
        2,
        "points outside it",
    ),
    ("a unit on a third device", lambda e: ["bench", _units_edit("gpu", _unit_on_gpu)(e)], 2, "a unit on 'gpu'"),
    # a bundle checked for internal consistency at load: meta.json, the unit chain and the graphs agree
    (
        "meta.json imgsz 16384",
        lambda e: ["bench", _json_edit("meta.json", "imgsz", _meta_imgsz)(e)],
        2,
        "takes images as [1, 3, 320, 320], but it comes as [1, 3, 16384, 16384]",
    ),  # fmt: skip
    (
        "meta.json with 3 more names",
        lambda e: ["bench", _json_edit("meta.json", "names", _more_names)(e)],
        2,
        "but meta.json names",
    ),  # fmt: skip
    (
        "meta.json lighting out of range",  # the audit's: what the proof saw, untrusted as the rest
        lambda e: ["bench", _json_edit("meta.json", "lighting", _bright_lighting)(e)],
        2,
        "lighting {'mean': [10, 900]",
    ),  # fmt: skip
    (
        "meta.json lighting of zeros",  # every frame unlike the proof's: the audit pinned at its failing rate
        lambda e: ["bench", _json_edit("meta.json", "dark", _dark_lighting)(e)],
        2,
        "each hi over 0",
    ),  # fmt: skip
    (
        "meta.json boxes_kept of millions",  # the audit's statistics from these numbers: bounded, not minutes long
        lambda e: ["bench", _json_edit("meta.json", "kept", _millions_kept)(e)],
        2,
        "boxes_kept [50000000, 100000000] is not [n, of]",
    ),  # fmt: skip
    (
        "units.json audit_floor -1",  # a floor at or under 0 passes every audit: the trigger off
        lambda e: ["bench", _units_edit("floor", _floor_off)(e)],
        2,
        "audit_floor -1 is not a cosine over 0",
    ),  # fmt: skip
    (
        "a unit graph out of place",
        lambda e: ["bench", _first_unit_is_the_head(e)],
        2,
        "but it comes as [1, 3, 320, 320]",
    ),
    ("a Loop in a unit graph", lambda e: ["bench", _with_loop(None)(e)], 2, "holds control flow (Loop)"),
    (
        "IR outputs renamed",
        lambda e: ["bench", _renamed_ir_output(e)],
        2,
        "damaged bundle (a runtime refused its stored units: RuntimeError",
    ),  # fmt: skip
    (
        "an op no runtime knows",
        lambda e: ["bench", _custom_op(e)],
        2,
        "holds ops of no standard domain (x.y:Mystery)",
    ),
    (
        "an INT8 IR claimed as BF16",
        lambda e: ["bench", _ir_claimed_bf16(e)],
        2,
        lambda: (  # a host without BF16 kernels (an AVX2-only CPU) refuses the claim itself first, as it should
            "is an INT8 graph but units.json says it runs at bf16" if _host_bf16() else "openvino cannot run bf16 here"
        ),
    ),
    (
        "a Loop in model.onnx",
        lambda e: ["val", _with_loop("model.onnx")(e), "--data", _pictures(e)],
        2,
        "holds control flow (Loop)",
    ),  # fmt: skip
    ("sample.npz of garbage", lambda e: ["bench", _damaged("sample.npz", b"PK\x00junk")(e)], 2, "sample.npz"),
    (
        "sample.npz deflate bomb",
        lambda e: ["bench", _sample_bomb(e)],
        2,
        "images does not hold exactly [1, 3, 320, 320] float32 values",
    ),
    (
        "sample.npz claiming 4 TB",
        lambda e: ["bench", _hostile_sample(e)],
        2,
        "images is float32 [1099511627776], its unit takes float32 [1, 3, 320, 320]",
    ),
    (
        "meta.json nested 200k deep",
        lambda e: ["bench", _damaged("meta.json", b"[" * 200_000 + b"]" * 200_000)(e)],
        2,
        "meta.json: JSONDecodeError",
    ),
    (
        "baseline nested 200k deep",
        lambda e: ["check", str(e.bundle), "--baseline", _baseline("[" * 200_000 + "]" * 200_000)(e)],
        2,
        "is not a yolo-edge baseline",
    ),
    (
        "garbage baseline",
        lambda e: ["check", str(e.bundle), "--baseline", _baseline("]]")(e)],
        2,
        "is not a yolo-edge baseline",
    ),
    (
        "unreadable video",
        lambda e: ["run", str(e.bundle), "--source", _garbage("clip.mp4")(e)],
        2,
        "not a readable video",
    ),
    ("not a bundle", lambda e: ["check", _empty_dir(e)], 2, "is not a yolo-edge bundle"),
    (
        "a folder of pictures as the bundle",
        lambda e: ["run", _pictures(e), "--source", str(e.image)],
        2,
        "make one with yolo-edge deploy (it writes out/bundle)",
    ),  # not `deploy --out` a folder deploy would refuse
    # FIFOs and devices where a file is read or written: refused before they block or read for ever
    ("baseline a FIFO", lambda e: ["check", str(e.bundle), "--baseline", _fifo(e)], 2, "not a regular file"),
    ("baseline /dev/zero", lambda e: ["check", str(e.bundle), "--baseline", _device(e)], 2, "not a regular file"),
    (
        "--events a FIFO",
        lambda e: ["run", str(e.bundle), "--source", str(e.image), "--events", _fifo(e)],
        2,
        "fifo.yaml is not a regular file (a FIFO, socket or device)",
    ),
    (
        "--save-json a device",
        lambda e: ["run", str(e.bundle), "--source", str(e.image), "--save-json", "/dev/zero"],
        2,
        "not a regular file",
    ),  # fmt: skip
    # a profile's numbers range-checked where it is parsed (a zero divides, a negative cost passes any SLA)
    (
        "peak_tops 0",
        lambda e: ["deploy", "--device", _profile("peak_tops.int8", 0)(e)],
        2,
        "peak_tops must each be in [1e-06, 1e+09]",
    ),
    ("peak_tops nan", lambda e: ["deploy", "--device", _profile("peak_tops.int8", float("nan"))(e)], 2, "peak_tops"),
    ("utilization 0", lambda e: ["deploy", "--device", _profile("utilization", 0)(e)], 2, "utilization: must be in (0"),
    (
        "dram_gbps 0",
        lambda e: ["deploy", "--device", _profile("dram_gbps", 0)(e)],
        2,
        "dram_gbps: must be in [1e-06, 1e+09]",
    ),
    (
        "op_overhead_us -1e6",
        lambda e: ["deploy", "--device", _profile("op_overhead_us", -1e6)(e)],
        2,
        "must be in [0, 1e+09]",
    ),
    ("cpu.gflops inf", lambda e: ["deploy", "--device", _profile("cpu.gflops", float("inf"))(e)], 2, "cpu.gflops"),
    # a count of runs or images bounded: 1e30 latency runs would run for ever
    (
        "latency_runs 1e30",
        lambda e: ["deploy", "--config", _config("validate.latency_runs", 10**30)(e)],
        2,
        "latency_runs: must be in [1, 100000]",
    ),  # fmt: skip
    # a config value of 900 KB: the one-line error quotes it cut short
    (
        "a 900 KB config value",
        lambda e: ["deploy", "--config", _config("plan.head_on_npu", "x" * 900_000)(e)],
        2,
        "characters cut",
    ),  # fmt: skip
    # the sweep's grid checked before anything is deployed: bad input is exit 2, not "nothing meets the SLA"
    ("sweep --imgsz 33", lambda e: ["sweep", "--imgsz", "33", "--no-ray", "--cache", ""], 2, "imgsz 33 is not valid"),
    (
        "sweep of a missing model",
        lambda e: ["sweep", "--model", "nope.pt", "--no-ray", "--cache", ""],
        2,
        "model not found: nope.pt",
    ),  # fmt: skip
    # a Ray cluster that is not there: Ray alone retries a closed port for minutes
    (
        "sweep --ray-address a closed port",
        lambda e: (
            ["sweep", "--model", str(demo_model_path()), "--imgsz", "320", "--device", "cpu"]
            + ["--cache", "", "--ray-address", f"127.0.0.1:{_closed_port()}"]
        ),
        2,
        "nothing answers there",
    ),
    (
        "check --ray-address at something that is not Ray",  # it takes TCP and says nothing: Ray would retry
        lambda e: ["check", str(e.bundle), "--ray-address", _not_ray()],
        2,
        "something answers there but it is not Ray",
    ),
    (
        "deploy --ray-address at something that is not Ray",  # said before a minute of work, not after it
        lambda e: ["deploy", "--ray-address", _not_ray(), "--out", "o"],
        2,
        "something answers there but it is not Ray",
    ),
    # a name over the file system's 255 bytes, as an output and as an input: one line (it was "a bug", exit 3)
    ("deploy --out of a long name", lambda e: ["deploy", "--out", "b" * 300], 2, "over the 255 a file system takes"),
    (
        "events --plot of a long name",
        lambda e: ["events", _log_file(e), "--plot", "p" * 300 + ".png"],
        2,
        "over the 255 a file system takes",
    ),
    (
        "check --baseline of a long name",
        lambda e: ["check", str(e.bundle), "--baseline", "q" * 300 + ".json"],
        2,
        "longer than the file system takes (255 bytes)",
    ),
    (
        "val --ray-address no port",
        lambda e: ["val", str(e.bundle), "--ray-address", "head"],
        2,
        "--ray-address: expected host:port",
    ),
]


# run as the console script runs them too: an error while loading a bundle, one in argparse, one reading data
IN_A_PROCESS = ("damaged plan.json", "deploy --imgsz 33", "empty data folder")


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_bad_input(env: Env, cli: Cli, case: str) -> None:
    _expect_bad_input(env, cli, case)


@pytest.mark.parametrize("case", IN_A_PROCESS)
def test_bad_input_in_a_process_of_its_own(env: Env, case: str) -> None:
    _expect_bad_input(env, lambda *args: _process(env, *args), case)


def _expect_bad_input(env: Env, cli: Cli, case: str) -> None:
    _, argv, code, said = next(c for c in CASES if c[0] == case)
    words = said() if callable(said) else said  # what the host decides (its precisions), asked when the case runs
    args = argv(env)  # makes the case's inputs
    before = {p.relative_to(env.root) for p in env.root.rglob("*")}
    proc = cli(*args)
    err = proc.stderr.strip()
    assert proc.returncode == code, (proc.returncode, err)
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("yolo-edge ") and words in err, err
    assert not _leftovers(env), "temporary files left behind"
    made = {p.relative_to(env.root) for p in env.root.rglob("*")} - before
    assert not [p for p in made if p.parts[0] != "tmp"], (
        made
    )  # no --out (not even empty), no temporary sibling, nothing beside the inputs
    if (env.root / "mine").is_dir():
        assert (env.root / "mine" / "notes.txt").read_text() == "my notes"  # the user's folder survives


def test_deploy_replaces_a_bundle_and_an_empty_folder_but_reports_in_one_line_each(env: Env, cli: Cli) -> None:
    """The other side of the --out rule, and bundles a person can read: not 0700, no progress bars in logs. The
    --out named is a symlink to the bundle: the bundle it points at is replaced, the link kept."""
    target = _copy_bundle(env, "replace-me")
    link = env.root / "link-to-it"
    link.unlink(missing_ok=True)
    link.symlink_to(target)
    old = (target / "report.json").read_text()
    deploy_yaml, data = str(env.bundle / "deploy.yaml"), env.root / "others"
    data.mkdir(exist_ok=True)
    for p in sorted(default_calib_dir().glob("*.jpg"))[40:48]:  # not among those the demo calibrates on
        shutil.copy(p, data)
    proc = cli("deploy", "--device", "host-lowp", "--out", str(link), "--config", deploy_yaml, "--data", str(data))
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert (target / "report.json").read_text() != old and (target / "report.md").is_file()
    assert (target.stat().st_mode & 0o777) == 0o777 & ~_umask()
    assert "\r" not in proc.stderr and "it/s" not in proc.stderr  # no tqdm bars when stderr is not a terminal
    hidden = [p for p in target.parent.iterdir() if p.name.startswith((".replace-me", ".link-to-it"))]
    assert not _leftovers(env) and not hidden


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize(
    ("sig", "code", "word"), [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")]
)
def test_signal_during_deploy_cleans_up(env: Env, sig: signal.Signals, code: int, word: str) -> None:
    out = env.root / f"sig-{code}"
    child = {**os.environ, "TMPDIR": str(env.tmp), "YOLO_OFFLINE": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "yolo_edge.cli.main",
            "deploy",
            "--device",
            "host-lowp",
            "--out",
            str(out),
            "--config",
            str(env.bundle / "deploy.yaml"),
        ],
        cwd=env.root,
        env=child,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not any(p.name.startswith("yolo-edge-deploy-") for p in env.tmp.iterdir()):  # deploy's work folder exists
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(1.0)  # well into the export
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    lines = [line for line in err.splitlines() if line.startswith("yolo-edge deploy:")]
    assert proc.returncode == code and len(lines) == 1 and word in lines[0] and "Traceback" not in err, err
    assert not _leftovers(env) and not out.exists()
    assert not [p for p in env.root.iterdir() if p.name.startswith(f".sig-{code}")]


def test_unreadable_image_and_truncated_video_are_reported_not_dropped(env: Env, cli: Cli) -> None:
    folder = env.root / "frames"
    folder.mkdir()
    for i in range(3):
        shutil.copy(env.image, folder / f"f{i}.jpg")
    (folder / "f1.jpg").write_bytes(b"not a jpeg")
    proc = cli("run", str(env.bundle), "--source", str(folder), "--save", str(env.root / "ann"), "--json")
    assert proc.returncode == 1
    assert [json.loads(x)["source"] for x in proc.stdout.splitlines()] == ["f0.jpg", "f2.jpg"]
    assert sorted(p.name for p in (env.root / "ann").iterdir()) == ["f0.jpg", "f2.jpg"]
    assert "skipped" in proc.stderr and "f1.jpg" in proc.stderr and "Traceback" not in proc.stderr

    video = env.root / "clip.avi"
    frame = cv2.imread(str(env.image))
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter.fourcc(*"MJPG"), 10.0, (frame.shape[1], frame.shape[0]))
    for _ in range(10):
        writer.write(frame)
    writer.release()
    data = video.read_bytes()
    video.write_bytes(data[: len(data) * 6 // 10])  # cut: the header still says 10 frames
    proc = cli("run", str(env.bundle), "--source", str(video), "--json")
    read = len(proc.stdout.splitlines())
    assert proc.returncode == 1 and 0 < read < 10
    assert f"read {read} frames but its header says 10" in proc.stderr


def test_a_file_name_that_is_not_utf8_is_read_or_refused_in_one_line_never_a_crash(env: Env) -> None:
    """A Linux file name is any bytes; OpenCV takes names as UTF-8 and crashes the process (SIGSEGV) on one that
    is not. An image so named is read (its bytes through Python) and its annotated copy saved under the same name;
    a video so named, which only OpenCV can open, is a one-line error, exit 2. In a process of its own: a crash
    would take pytest with it."""
    folder = env.root / "latin1"
    folder.mkdir()
    odd = os.fsdecode(b"caf\xe9.jpg")  # Latin-1 bytes: not UTF-8
    shutil.copy(env.image, folder / odd)
    shutil.copy(env.image, folder / "plain.jpg")
    proc = _process(env, "run", str(env.bundle), "--source", str(folder), "--save", str(env.root / "ann1"), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(proc.stdout.splitlines()) == 2 and "Traceback" not in proc.stderr
    assert sorted(os.fsencode(p.name) for p in (env.root / "ann1").iterdir()) == [b"caf\xe9.jpg", b"plain.jpg"]
    video = env.root / os.fsdecode(b"clip\xe9.avi")
    frame = cv2.imread(str(env.image))
    writer = cv2.VideoWriter(str(env.root / "ok.avi"), cv2.VideoWriter.fourcc(*"MJPG"), 10.0, frame.shape[1::-1])
    writer.write(frame)
    writer.release()
    (env.root / "ok.avi").rename(video)
    proc = _process(env, "run", str(env.bundle), "--source", str(video))
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert "is not valid UTF-8" in line and "rename it" in line


def test_run_save_keeps_two_sources_apart_and_the_originals_untouched(env: Env, cli: Cli) -> None:
    """Two folders whose files have the same names: each source's annotated frames go to their own folder under
    --save (``imgs``, ``imgs-2``), all four kept; the originals are byte for byte what they were."""
    a, b = Path(_pictures(env, "first")), Path(_pictures(env, "second"))
    (b / "img0.jpg").write_bytes((b / "img1.jpg").read_bytes())  # the same names, not the same photos
    before = {p: p.read_bytes() for p in [*a.iterdir(), *b.iterdir()]}
    proc = cli("run", str(env.bundle), "--source", str(a), "--source", str(b), "--save", "two", "--quiet")
    assert proc.returncode == 0, proc.stderr
    made = sorted(str(p.relative_to(env.root / "two")) for p in (env.root / "two").rglob("*.jpg"))
    assert made == ["imgs-2/img0.jpg", "imgs-2/img1.jpg", "imgs/img0.jpg", "imgs/img1.jpg"]
    assert {p: p.read_bytes() for p in before} == before


def _small_files(env: Env, limit: int, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    """``yolo-edge ARGS`` in a process of its own whose files cannot grow past ``limit`` bytes (RLIMIT_FSIZE; Python
    ignores SIGXFSZ, so writes fail with EFBIG, the OSError a full disk's ENOSPC is)."""
    import resource

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "yolo_edge.cli.main", *args],
        cwd=env.root,
        env={**os.environ, "TMPDIR": str(env.tmp), "YOLO_OFFLINE": "1", **extra_env},
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=small_files,
    )


def test_run_save_on_a_full_disk_counts_each_frame_it_could_not_write(env: Env) -> None:
    """A write that fails (the file-size limit here, EFBIG, as a full disk gives ENOSPC: both an OSError on
    write) is a ``sink_error`` drop per frame and exit 1, not "delivered, dropped: none"."""
    proc = _small_files(env, 2048, "run", str(env.bundle), "--source", _pictures(env), "--save", "full")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "2 read, 0 delivered, dropped: sink_error 2" in proc.stdout, proc.stdout
    assert "File too large" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not list((env.root / "full").rglob("*")), "a half-written image or temporary file left behind"


def test_run_save_json_on_a_full_disk_counts_each_frame_it_could_not_write(env: Env) -> None:
    """Issue #55's class I: ``--save-json`` on a full disk (the file-size limit here): each frame whose record could
    not be written is a ``sink_error`` drop, not printed as done; the summary is printed, exit 1 (not 2), the file
    keeps what it held before, and no temporary file is left beside it."""
    out = env.root / "results.json"
    out.write_text("[]\n")
    # the opening bracket fits, a record does not
    proc = _small_files(env, 300, "run", str(env.bundle), "--source", _pictures(env), "--save-json", str(out))
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "2 read, 0 delivered, dropped: sink_error 2" in proc.stdout, proc.stdout
    assert "ms inference" not in proc.stdout and "--save-json" in proc.stderr and "Traceback" not in proc.stderr
    assert out.read_text() == "[]\n" and [p.name for p in env.root.iterdir() if p.name.startswith(".results")] == []


def test_a_full_disk_while_deploying_is_one_line_and_leaves_nothing(env: Env) -> None:
    """A write that fails for lack of room (the file-size limit here, EFBIG, the same OSError as ENOSPC on a
    full disk) while deploy writes its working files: one line saying what to do, exit 2, no --out, TMPDIR
    empty."""
    cache = env.root / "full-cache"  # not the user's cache: the same limit holds for what deploy caches
    proc = _small_files(env, 1 << 20, "deploy", "--quiet", "--out", "full-out", YOLO_EDGE_CACHE=str(cache))
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "File too large" in err and "write elsewhere" in err, err
    assert not (env.root / "full-out").exists() and not _leftovers(env)


def test_a_toolchain_that_does_not_start_is_not_usable(env: Env, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed toolchain environment whose Python does not start (a broken upgrade, a deleted interpreter):
    ``devices`` says rk3588 is unusable and why, and ``deploy --device rk3588`` refuses in one line, instead of a
    PASS with everything on the CPU. ``YOLO_EDGE_TOOLCHAINS`` naming a file is one line too."""
    from yolo_edge.toolchains import get_toolchain

    root = env.root / "broken-toolchains"
    monkeypatch.setenv("YOLO_EDGE_TOOLCHAINS", str(root))
    env_dir = get_toolchain("rknn").env_dir
    (env_dir / "bin").mkdir(parents=True, exist_ok=True)
    (env_dir / "bin" / "python").write_text("#!/bin/sh\necho 'broken interpreter' >&2\nexit 1\n")
    (env_dir / "bin" / "python").chmod(0o755)
    (env_dir / ".complete").write_text("{}")
    devices = cli("devices", "--json")
    assert devices.returncode == 0, devices.stderr
    rk = next(d for d in json.loads(devices.stdout)["devices"] if d["name"] == "rk3588")
    assert not rk["usable"] and "does not start" in rk["why"], rk
    proc = cli("deploy", "--quiet", "--device", "rk3588", "--out", "rk-out")
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1 and "does not start" in err, err
    assert not (env.root / "rk-out").exists()
    monkeypatch.setenv("YOLO_EDGE_TOOLCHAINS", _a_file(env))
    listed = cli("toolchain", "list")
    assert listed.returncode == 2 and "is a file" in listed.stderr and "Traceback" not in listed.stderr, listed.stderr


def test_a_failed_toolchain_install_leaves_no_environment_and_no_pip_temporaries(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip fails (a package no index has): no environment that looks installed, and none of pip's temporary
    folders (GBs of wheels for a real toolchain) left in the toolchain root or TMPDIR; one line."""
    from dataclasses import replace as copy

    import yolo_edge.toolchains as toolchains
    from yolo_edge.backends.rknn.spec import TOOLCHAIN

    root = env.root / "install-root"
    monkeypatch.setenv("YOLO_EDGE_TOOLCHAINS", str(root))
    monkeypatch.setenv("TMPDIR", str(env.tmp))
    fake = copy(TOOLCHAIN, name="nothing", steps=(("--no-index", "yolo-edge-no-such-package==0.0.1"),))
    monkeypatch.setattr(toolchains, "toolchains", lambda: {"nothing": fake})
    with pytest.raises(YoloEdgeError, match="pip install --no-index yolo-edge-no-such-package==0.0.1 failed"):
        toolchains.install_toolchain("nothing", python=sys.executable, say=lambda _m: None)
    assert not fake.env_dir.exists() and list(root.iterdir()) == [] and not _leftovers(env)


def test_a_bug_is_its_traceback_and_exit_code_3_asking_for_a_report(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not a user error: the traceback is kept, the last line says it is yolo-edge's bug, and the exit code is
    neither 1 (a failed verdict) nor 2 (bad input)."""
    from yolo_edge.cli import devices
    from yolo_edge.cli.main import main

    def broken(_profile: object) -> object:
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(devices, "device_status", broken)
    assert main(["devices"]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError: float division by zero" in err
    assert err.strip().splitlines()[-1].startswith("yolo-edge devices: internal error, a bug in yolo-edge")


def test_the_console_script_runs_exit_handlers_flushes_and_keeps_the_exit_code(tmp_path: Path) -> None:
    """``entry()`` leaves without the interpreter's teardown (native runtimes' static objects destroyed in no
    order they control aborted a finished run once): the exit handlers still run, buffered stdout still reaches
    a pipe, and the command's exit code is the process's."""
    script = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('exit handler ran', file=sys.stderr))\n"
        "from yolo_edge.cli.main import entry\n"
        "sys.argv = ['yolo-edge', *sys.argv[1:]]\n"
        "entry()\n"
    )
    kw: dict[str, Any] = {"capture_output": True, "text": True, "timeout": 120}
    ok = subprocess.run([sys.executable, "-c", script, "devices", "--json"], **kw)
    assert ok.returncode == 0 and json.loads(ok.stdout)["devices"] and "exit handler ran" in ok.stderr
    bad = subprocess.run([sys.executable, "-c", script, "split", "--model", str(tmp_path / "none.pt")], **kw)
    assert bad.returncode == 2 and "exit handler ran" in bad.stderr and "model not found" in bad.stderr.lower()


def test_a_reader_that_closes_stdout_ends_the_command_quietly_with_141() -> None:
    """``yolo-edge devices --json | head -c 20``: once the reader has gone, nothing more is said (no traceback, no
    'internal error'), and the exit code is a SIGPIPE'd command's."""
    cmd = [sys.executable, "-m", "yolo_edge.cli.main", "devices", "--json"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "YOLO_OFFLINE": "1"}
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader leaves before the command writes
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == ""


def test_run_whose_reader_leaves_stops_the_stream_and_accounts_for_it(env: Env) -> None:
    """``yolo-edge run B --source 400-images --json | head -1``: the run stops once the reader has gone (a camera
    would otherwise be read for ever into a closed pipe), says on stderr what was read, delivered and dropped,
    and ends as a SIGPIPE'd command does, 141, with no traceback. 400 lines do not fit in a pipe's 64 KiB: the
    command cannot finish before the reader leaves, however slowly the reader is scheduled."""
    folder = env.root / "many"
    folder.mkdir()
    for i in range(400):
        shutil.copy(env.image, folder / f"frame_{i:03d}.jpg")
    child = {**os.environ, "TMPDIR": str(env.tmp), "YOLO_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "yolo_edge.cli.main", "run", str(env.bundle), "--source", str(folder), "--json"]
    proc = subprocess.Popen(cmd, cwd=env.root, env=child, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = json.loads(proc.stdout.readline())
    proc.stdout.close()  # the reader leaves after one frame
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141, err
    assert first["frame"] == 0 and "Traceback" not in err and "internal error" not in err
    (summary,) = [line for line in err.splitlines() if " read, " in line]
    read, delivered = (int(w) for w in re.findall(r"(\d+) (?:read|delivered)", summary))
    dropped = {k: int(v) for k, v in re.findall(r"(\w+) (\d+)", summary.split("dropped: ")[1].split(";")[0])}
    assert delivered < 400 and read == delivered + sum(dropped.values()), summary  # every frame read accounted for
    assert dropped.get("sink_error") == 1, summary  # the frame the closed pipe refused


def test_a_child_forked_during_a_command_ends_on_sigterm_as_it_would_without_the_command() -> None:
    """A library forks a helper while the command's handlers are installed (OpenVINO's telemetry sender, which
    its parent ends with SIGTERM): the child dies of the signal, without a traceback or the command's cleanup."""
    script = (
        "import os, signal, time\n"
        "from yolo_edge.cli import main as m\n"
        "m._OWNER[:] = [os.getpid()]\n"
        "signal.signal(signal.SIGTERM, m._terminate)\n"
        "r, w = os.pipe()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.write(w, b'x')\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
        "os.read(r, 1)\n"
        "os.kill(pid, signal.SIGTERM)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print(os.WIFSIGNALED(status) and os.WTERMSIG(status))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == str(int(signal.SIGTERM)) and "Traceback" not in proc.stderr, proc.stderr


def test_a_closed_stdout_is_dev_null_not_a_traceback(env: Env) -> None:
    """``yolo-edge run ... >&-``: what it prints goes nowhere, the run ends 0 with nothing on stderr, and descriptor 1
    is not handed to the next file the command opens."""
    child = {**os.environ, "TMPDIR": str(env.tmp), "YOLO_OFFLINE": "1"}
    argv = [sys.executable, "-m", "yolo_edge.cli.main", "run", str(env.bundle), "--source", str(env.image)]
    argv += ["--save-json", "results.json"]
    proc = subprocess.run(
        argv, cwd=env.root, env=child, stdout=None, stderr=subprocess.PIPE, text=True, timeout=300,
        preexec_fn=lambda: os.close(1),
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert len(json.loads((env.root / "results.json").read_text())) == 1  # the JSON file is whole, not stdout's


def test_more_threads_than_cores_is_one_line_before_any_work(env: Env) -> None:
    child = {**os.environ, "TMPDIR": str(env.tmp), "YOLO_OFFLINE": "1", "YOLO_EDGE_THREADS": "2000"}
    argv = [sys.executable, "-m", "yolo_edge.cli.main", "run", str(env.bundle), "--source", str(env.image)]
    proc = subprocess.run(argv, cwd=env.root, env=child, capture_output=True, text=True, timeout=300)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1, err
    assert f"more threads than the {os.cpu_count()} cores here" in err, err


def test_control_characters_in_file_names_never_reach_the_terminal(env: Env, cli: Cli) -> None:
    """ESC sequences in a source's name (set the terminal's title, clear it) are shown as ?, on stdout's frame line,
    the summary and the one-line error alike."""
    hostile = env.root / "\x1b]0;pwned\x07\x1b[2Jshot.jpg"
    shutil.copy(env.image, hostile)
    proc = cli("run", str(env.bundle), "--source", str(hostile))
    assert proc.returncode == 0, proc.stderr
    assert "?]0;pwned??[2Jshot.jpg: " in proc.stdout and "\x1b" not in proc.stdout + proc.stderr
    proc = cli("run", str(env.bundle), "--source", str(hostile) + ".missing")
    assert proc.returncode == 2 and "?]0;pwned" in proc.stderr and "\x1b" not in proc.stderr, proc.stderr
    hostile.unlink()
