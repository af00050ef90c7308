"""The DFL softmax rewrite: the same function as ultralytics' own ONNX, and gone from the exported graph."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from yolo_edge.model.export import export_model
from yolo_edge.model.meta import ExportedModel
from yolo_edge.model.rewrite import REWRITES_KEY, apply_rewrites, dfl_softmax_last_axis
from yolo_edge.model.split import split_model


def _ultralytics_onnx(source: str, imgsz: int, workdir: Path) -> onnx.ModelProto:
    from ultralytics import YOLO

    with contextlib.chdir(workdir):
        return onnx.load(YOLO(source).export(format="onnx", imgsz=imgsz, simplify=True, batch=1))


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"images": x})[0]


def _dfl_softmax_axes(model: onnx.ModelProto) -> list[int]:
    return [
        a.i
        for n in model.graph.node
        if n.op_type == "Softmax" and "/dfl/" in n.name
        for a in n.attribute
        if a.name == "axis"
    ]


@pytest.mark.parametrize("imgsz", [320, 640])
def test_rewritten_demo_model_equals_ultralytics_onnx(demo: ExportedModel, tmp_path: Path, imgsz: int) -> None:
    from yolo_edge.model.meta import demo_model_path
    from yolo_edge.pipeline.preprocess import default_calib_dir, load_calibration

    src = tmp_path / "demo.pt"
    src.write_bytes(demo_model_path().read_bytes())
    original = _ultralytics_onnx(str(src), imgsz, tmp_path)
    assert _dfl_softmax_axes(original) == [1], "ultralytics' DFL export changed: the rewrite no longer matches"
    rewritten = onnx.load(str(export_model(src, imgsz=imgsz, out_dir=tmp_path / "out").path))
    assert _dfl_softmax_axes(rewritten) == [-1]
    assert dict((p.key, p.value) for p in rewritten.metadata_props)[REWRITES_KEY] == "dfl_softmax_last_axis"
    for x in load_calibration(default_calib_dir(), (imgsz, imgsz), 4):
        a, b = _run(original, x), _run(rewritten, x)
        assert a.shape == b.shape
        assert float(np.abs(a - b).max()) <= 1e-4


def test_rewrite_on_other_models_and_idempotent(exported, tmp_path: Path, yaml_nc3: str) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    for source in ("yolov8s.yaml", yaml_nc3):
        original = _ultralytics_onnx(source, 320, tmp_path)
        model = onnx.ModelProto()
        model.CopyFrom(original)
        assert apply_rewrites(model) == ["dfl_softmax_last_axis"]
        onnx.checker.check_model(model, full_check=True)
        assert apply_rewrites(model) == [] and not dfl_softmax_last_axis(model)  # nothing left to match
        x = rng.random((1, 3, 320, 320), dtype=np.float32)
        assert float(np.abs(_run(original, x) - _run(model, x)).max()) <= 1e-4
    split = split_model(exported("yolov8n.yaml", (320, 320)))
    assert [n.op_type for n in split["decode"].model.graph.node if "/dfl/" in n.name][:4] == [
        "Reshape",
        "Transpose",
        "Softmax",
        "MatMul",
    ]


def test_foreign_onnx_is_rewritten_into_out_dir_and_left_alone_without(tmp_path: Path) -> None:
    original = _ultralytics_onnx("yolov8n.yaml", 320, tmp_path)
    path = tmp_path / "plain.onnx"
    onnx.save(original, str(path))
    as_is = export_model(path)
    assert as_is.path == path and _dfl_softmax_axes(onnx.load(str(path))) == [1]
    copied = export_model(path, out_dir=tmp_path / "out")
    assert copied.path != path and _dfl_softmax_axes(copied.load()) == [-1]
    assert _dfl_softmax_axes(onnx.load(str(path))) == [1], "the user's file must not be touched"
