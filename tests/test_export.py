"""Export: metadata, and one-line refusals for everything that is not a YOLOv8 detector."""

from __future__ import annotations

import hashlib
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from tests.conftest import ExportFn
from yolo_edge.cli.main import main
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.model.export import export_model
from yolo_edge.model.meta import demo_model_path, load_onnx, parse_imgsz


def test_metadata_of_exported_model(exported: ExportFn) -> None:
    m = exported("yolov8n.yaml", (384, 640))
    assert m.meta.imgsz == (384, 640)
    assert m.meta.strides == (8, 16, 32)
    assert m.meta.reg_max == 16
    assert m.meta.nc == 80 and len(m.meta.names) == 80
    assert m.meta.source_sha256 == hashlib.sha256(b"yolov8n.yaml").hexdigest()
    proto = onnx.load(str(m.path))
    assert [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim] == [1, 3, 384, 640]
    assert load_onnx(m.path).meta == m.meta  # the metadata travels inside the ONNX


def test_pt_checkpoint_export_records_sha(tmp_path: Path) -> None:
    from ultralytics import YOLO

    pt = tmp_path / "tiny.pt"
    YOLO("yolov8n.yaml").save(str(pt))
    m = export_model(pt, imgsz=320, out_dir=tmp_path / "out")
    assert m.meta.source_sha256 == hashlib.sha256(pt.read_bytes()).hexdigest()
    assert m.path == tmp_path / "out" / "tiny.onnx"
    assert not (tmp_path / "tiny.onnx").exists()  # nothing written beside the user's weights


def test_a_checkpoint_exported_again_is_read_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second export of the same .pt at the same size never calls ultralytics and gives the same graph; another
    size, changed weights or a damaged entry export anew; a model .yaml is never cached (new random weights)."""
    from ultralytics import YOLO

    import yolo_edge.model.export as export

    monkeypatch.setenv("YOLO_EDGE_CACHE", str(tmp_path / "cache"))
    pt = tmp_path / "tiny.pt"
    YOLO("yolov8n.yaml").save(str(pt))
    calls: list[tuple[int, int]] = []
    real = export._ultralytics_export

    def counted(source: str, shown: str, imgsz: tuple[int, int], opset: int, workdir: Path) -> Path:
        calls.append(imgsz)
        return real(source, shown, imgsz, opset, workdir)

    monkeypatch.setattr(export, "_ultralytics_export", counted)
    first = export_model(pt, imgsz=320, out_dir=tmp_path / "a")
    again = export_model(pt, imgsz=320, out_dir=tmp_path / "b")
    assert calls == [(320, 320)] and again.path.read_bytes() == first.path.read_bytes()
    assert again.meta == first.meta
    export_model(pt, imgsz=256, out_dir=tmp_path / "c")
    assert calls == [(320, 320), (256, 256)]
    entries = sorted((tmp_path / "cache" / "exports").glob("*.onnx"))
    assert len(entries) == 2
    for entry in entries:  # damaged: rebuilt, with a warning
        entry.write_bytes(entry.read_bytes()[:-10])
    rebuilt = export_model(pt, imgsz=320, out_dir=tmp_path / "d").path  # its metadata has its own export date
    assert onnx.load(str(rebuilt)).graph == onnx.load(str(first.path)).graph
    assert calls[-1] == (320, 320) and len(calls) == 3
    YOLO("yolov8n.yaml").save(str(pt))  # other weights, the same file name
    assert export_model(pt, imgsz=320, out_dir=tmp_path / "e").meta.source_sha256 != first.meta.source_sha256
    assert len(calls) == 4
    yaml_twice = [export_model("yolov8n.yaml", imgsz=320, out_dir=tmp_path / f"y{i}") for i in range(2)]
    assert len(calls) == 6 and onnx.load(str(yaml_twice[0].path)).graph != onnx.load(str(yaml_twice[1].path)).graph


def test_foreign_ultralytics_onnx_is_read_without_our_metadata(exported: ExportFn, tmp_path: Path) -> None:
    proto = onnx.load(str(exported("yolov8n.yaml", (320, 320)).path))
    keep = [p for p in proto.metadata_props if p.key != "yolo_edge"]
    del proto.metadata_props[:]
    proto.metadata_props.extend(keep)
    path = tmp_path / "plain.onnx"
    onnx.save(proto, str(path))
    m = load_onnx(path)
    assert (m.meta.nc, m.meta.strides, m.meta.imgsz, m.meta.reg_max) == (80, (8, 16, 32), (320, 320), 16)


def _tiny_onnx(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 32, 32])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y])
    onnx.save(helper.make_model(g), str(path))
    return path


def _seg_onnx(tmp_path: Path) -> Path:
    from ultralytics import YOLO

    return Path(YOLO("yolov8n-seg.yaml").export(format="onnx", imgsz=64, simplify=False))


REFUSALS = [
    ("missing file", lambda p: str(p / "nope.pt"), "model not found"),
    ("missing onnx", lambda p: str(p / "nope.onnx"), "model not found"),
    ("corrupt pt", lambda p: (p / "bad.pt").write_bytes(b"not a checkpoint" * 10) and str(p / "bad.pt"), "cannot load"),
    ("empty pt", lambda p: (p / "empty.pt").write_bytes(b"") is not None and str(p / "empty.pt"), "is empty"),
    (
        "corrupt onnx",
        lambda p: (p / "bad.onnx").write_bytes(b"\x08\x07garbage" * 50) and str(p / "bad.onnx"),
        "not a readable ONNX",
    ),
    ("segmentation yaml", lambda p: "yolov8n-seg.yaml", "segmentation model"),
    ("pose yaml", lambda p: "yolov8n-pose.yaml", "pose model"),
    ("classify yaml", lambda p: "yolov8n-cls.yaml", "classification model"),
    ("obb yaml", lambda p: "yolov8n-obb.yaml", "OBB"),
    ("not yolov8 onnx", lambda p: str(_tiny_onnx(p / "relu.onnx")), "not a YOLOv8 detect graph"),
    (
        "unsupported suffix",
        lambda p: (p / "m.tflite").write_bytes(b"x") and str(p / "m.tflite"),
        "unsupported model file",
    ),
]


@pytest.mark.parametrize(("case", "make", "message"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_export_refuses(tmp_path: Path, case: str, make, message: str, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    model = make(tmp_path)
    with pytest.raises(YoloEdgeError, match=message) as err:
        export_model(model, imgsz=64, out_dir=tmp_path / "out")
    assert "\n" not in str(err.value)
    assert main(["export", "--model", model, "--imgsz", "64", "--out", str(tmp_path / "out2")]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("yolo-edge export: error:") and "\n" not in line


def test_segmentation_onnx_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(YoloEdgeError, match="segmentation model"):
        load_onnx(_seg_onnx(tmp_path))


@pytest.mark.parametrize("value", ["100", "640,333", "0", "-32", "abc", "32,32,32"])
def test_imgsz_must_be_multiple_of_32(value: str) -> None:
    with pytest.raises(YoloEdgeError, match="imgsz"):
        parse_imgsz(value)


def test_imgsz_parsing() -> None:
    assert parse_imgsz("640") == (640, 640)
    assert parse_imgsz("384,640") == (384, 640)
    assert parse_imgsz((320, 256)) == (320, 256)


def test_onnx_at_other_imgsz_is_refused(exported: ExportFn) -> None:
    with pytest.raises(YoloEdgeError, match="exported at imgsz"):
        export_model(exported("yolov8n.yaml", (320, 320)).path, imgsz=640)


def test_class_names_from_an_onnx_cannot_forge_terminal_output(exported: ExportFn, tmp_path: Path) -> None:
    """Names are someone else's text: a newline or an ESC sequence in them becomes ``?`` wherever they are read
    (our metadata and ultralytics' ``names``), so a printed detection cannot forge a line or recolour a terminal."""
    import json

    proto = onnx.load(str(exported("yolov8n.yaml", (320, 320)).path))
    props = {p.key: p.value for p in proto.metadata_props}
    ours = json.loads(props["yolo_edge"])
    ours["names"][0] = "person\nyolo-edge run: 0 fallback events"
    ours["names"][1] = "\x1b[2J\x1b[31mbicycle"
    plain = {i: f"c{i}" for i in range(80)}
    plain[2] = "car\r\x07"
    onnx.helper.set_model_props(proto, {**props, "yolo_edge": json.dumps(ours), "names": repr(plain)})
    onnx.save(proto, str(tmp_path / "ours.onnx"))
    names = load_onnx(tmp_path / "ours.onnx").meta.names
    assert names[:2] == ("person?yolo-edge run: 0 fallback events", "?[2J?[31mbicycle")
    del proto.metadata_props[:]
    onnx.helper.set_model_props(proto, {"names": repr(plain)})
    onnx.save(proto, str(tmp_path / "plain.onnx"))
    assert load_onnx(tmp_path / "plain.onnx").meta.names[2] == "car??"


def test_split_json_is_json_and_an_imgsz_off_the_largest_stride_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """ultralytics' own output goes to stderr, so ``split --json`` on a .yaml is JSON; a P6 model (stride 64)
    at 352 is a one-line error naming the sizes to use, not a silent 384."""
    import json

    assert main(["split", "--model", "yolov8n.yaml", "--imgsz", "320", "--json"]) == 0
    assert [s["name"] for s in json.loads(capsys.readouterr().out)["subgraphs"]] == [
        "backbone",
        "neck",
        "head",
        "decode",
    ]
    assert main(["split", "--model", "yolov8n-p6.yaml", "--imgsz", "352"]) == 2
    assert "largest stride 64" in capsys.readouterr().err


def test_ultralytics_first_run_on_a_machine_keeps_stdout_json(tmp_path: Path) -> None:
    """On a machine where ultralytics never ran, its import announces the settings file it makes; that line goes
    to stderr, so ``export --json`` is still JSON (a fresh process: the import is the first in it)."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "YOLO_CONFIG_DIR": str(tmp_path / "fresh-config")}
    cmd = [sys.executable, "-m", "yolo_edge.cli.main", "export", "--model", "yolov8n.yaml", "--imgsz", "160"]
    done = subprocess.run([*cmd, "--out", str(tmp_path / "out"), "--json"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["path"].endswith("yolov8n.onnx")
    assert "Settings" in done.stderr and (tmp_path / "fresh-config").exists()


def test_the_demo_model_defaults_to_its_320_however_it_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from yolo_edge.flows.deploy import DEMO_IMGSZ, demo_imgsz

    demo = demo_model_path()
    monkeypatch.chdir(demo.parent.parent)
    assert demo_imgsz(demo) == demo_imgsz(f"assets/{demo.name}") == demo_imgsz(f"./assets/../assets/{demo.name}")
    assert demo_imgsz(demo) == DEMO_IMGSZ
    assert demo_imgsz(tmp_path / "other.pt") is None  # any other model: the exporter's default
