"""The split: four subgraphs whose sequential FP32 run equals the monolithic model."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.conftest import ExportFn
from yolo_edge.cli.main import main
from yolo_edge.model.split import SplitModel, split_model


def _session(model: onnx.ModelProto | str) -> ort.InferenceSession:
    src = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(src, providers=["CPUExecutionProvider"])


def _run_split(split: SplitModel, image: np.ndarray) -> np.ndarray:
    tensors = {split.input.name: image}
    for sg in split.subgraphs:
        outs = _session(sg.model).run([t.name for t in sg.outputs], {t.name: tensors[t.name] for t in sg.inputs})
        tensors.update(zip([t.name for t in sg.outputs], outs))
    return tensors[split.output.name]


# The cut points come from the graph's topology, which the scale sets (the n/s/m depth and width multipliers); the
# input size only sets the boundary tensors' shapes. So every size, square and not, on n; each larger scale at the
# size that differs most from its training shape (not square), and s at 320 as well.
EXACTNESS = [
    pytest.param("yolov8n.yaml", (320, 320), id="n-320"),
    pytest.param("yolov8n.yaml", (640, 640), id="n-640"),
    pytest.param("yolov8n.yaml", (1280, 1280), id="n-1280"),
    pytest.param("yolov8n.yaml", (384, 640), id="n-384x640"),
    pytest.param("yolov8s.yaml", (320, 320), id="s-320"),
    pytest.param("yolov8s.yaml", (384, 640), id="s-384x640"),
    pytest.param("yolov8m.yaml", (384, 640), id="m-384x640", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("cfg", "imgsz"), EXACTNESS)
def test_split_reproduces_monolithic_output(exported: ExportFn, cfg: str, imgsz: tuple[int, int]) -> None:
    model = exported(cfg, imgsz)
    split = split_model(model)
    image = np.random.default_rng(0).random((1, 3, *imgsz), dtype=np.float32)
    full = _session(str(model.path)).run(None, {split.input.name: image})[0]
    got = _run_split(split, image)
    assert (
        got.shape == full.shape == (1, 4 + model.meta.nc, sum((imgsz[0] // s) * (imgsz[1] // s) for s in (8, 16, 32)))
    )
    assert np.abs(got - full).max() <= 1e-4


def test_split_other_class_count(exported: ExportFn, yaml_nc3: str) -> None:
    model = exported(yaml_nc3, (320, 320))
    assert model.meta.nc == 3
    split = split_model(model)
    image = np.random.default_rng(1).random((1, 3, 320, 320), dtype=np.float32)
    full = _session(str(model.path)).run(None, {"images": image})[0]
    assert full.shape == (1, 7, 2100)
    assert np.abs(_run_split(split, image) - full).max() <= 1e-4
    assert [t.shape[1] for t in split["head"].outputs] == [64, 3] * 3


def test_boundaries_are_found_from_the_graph(exported: ExportFn) -> None:
    split = split_model(exported("yolov8s.yaml", (384, 640)))
    b = {(a, c): ts for a, c, ts in split.boundaries()}
    assert set(b) == {("backbone", "neck"), ("neck", "head"), ("head", "decode")}
    p3, p4, p5 = sorted(b[("backbone", "neck")], key=lambda t: -t.shape[2])
    assert (p3.shape[2:], p4.shape[2:], p5.shape[2:]) == ((48, 80), (24, 40), (12, 20))
    assert len(b[("neck", "head")]) == 3
    raw = b[("head", "decode")]
    assert len(raw) == 6
    assert sorted(t.shape[1] for t in raw) == [64, 64, 64, 80, 80, 80]  # 4*reg_max box distribution, nc logits
    for sg in split.subgraphs:
        onnx.checker.check_model(sg.model, full_check=True)
    assert sum(sg.nodes for sg in split.subgraphs) == len(split.exported.load().graph.node)


def test_flops_match_ultralytics(exported: ExportFn) -> None:
    """Conv FLOPs counted from the graph agree with ultralytics' own GFLOPs figure (8.7 for v8n, 28.6 for v8s
    at 640)."""
    for cfg, ref in (("yolov8n.yaml", 8.7), ("yolov8s.yaml", 28.6)):
        split = split_model(exported(cfg, (640, 640)))
        total = sum(sg.flops for sg in split.subgraphs) / 1e9
        assert total == pytest.approx(ref, rel=0.03)


def test_split_cli_json(exported: ExportFn, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    onnx_path = exported("yolov8n.yaml", (320, 320)).path
    assert main(["split", "--model", str(onnx_path), "--out", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    names = [s["name"] for s in doc["subgraphs"]]
    assert names == ["backbone", "neck", "head", "decode"]
    for s in doc["subgraphs"]:
        assert {"name", "path", "inputs", "outputs", "nodes", "params", "flops"} <= set(s)
        assert all({"name", "shape", "bytes"} <= set(t) for t in s["inputs"] + s["outputs"])
        onnx.checker.check_model(onnx.load(s["path"]), full_check=True)
    assert [len(s["outputs"]) for s in doc["subgraphs"]] == [3, 3, 6, 1]
    assert (tmp_path / "split.json").is_file()


def test_split_cli_table(exported: ExportFn, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["split", "--model", str(exported("yolov8n.yaml", (320, 320)).path)]) == 0
    out = capsys.readouterr().out
    for word in ("backbone", "neck", "head", "decode", "GFLOPs", "1x3x320x320", "1x64x40x40"):
        assert word in out


def test_a_table_wraps_its_last_column_to_the_width() -> None:
    """``yolo-edge devices``' reasons were 240 columns: the last column wraps under itself, nothing is lost."""
    from yolo_edge.cli.common import table

    why = "no: onnxruntime execution provider CUDAExecutionProvider is not available in this build; install it"
    text = table(("device", "n", "usable here"), [("cuda", 1, why), ("cpu", 22, "yes")], width=60)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 60 and len(lines) > 4
    start = lines[0].index("usable here")
    assert " ".join(line[start:] for line in lines[2:] if "cpu" not in line) == why
    assert lines[2][:start].split() == ["cuda", "1"] and lines[-1].split() == ["cpu", "22", "yes"]


def test_a_wide_table_fits_100_columns_with_every_cell_whole() -> None:
    """deploy's search table was up to 332 columns and broke a status mid-phrase: the widest text columns wrap at
    word boundaries until the table fits (deploy shows the columns that decide; report.md has them all), and every
    cell reads back whole from its column."""
    from yolo_edge.cli.common import table
    from yolo_edge.cli.deploy import SEARCH_COLUMNS
    from yolo_edge.flows.report import SEARCH_HEADER

    full = (
        "3 *",
        "backbone=npu/int8/u8s8/nncf, neck=npu/int8/u8s8/nncf, head=cpu/fp32",
        "relaxed: neck to the CPU after drift",
        "4.40",
        "12.93",
        "0.31",
        "-0.0018 [-0.0033, -0.0004] / -0.0044 [-0.0057, -0.0026]",
        "labels",
        "-",
        "305 of 307",
        "75",
        "fails drift, SLA undecided",
    )
    row = tuple(full[SEARCH_HEADER.index(c)] for c in SEARCH_COLUMNS)  # the terminal's columns; all: report.md
    text = table(SEARCH_COLUMNS, [row, row], width=100)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 100, text
    dashes = lines[lines.index(next(line for line in lines if line.startswith("---")))]
    starts = [i for i, c in enumerate(dashes) if c == "-" and (i == 0 or dashes[i - 1] == " ")]
    body = lines[lines.index(dashes) + 1 :]
    first = body[: len(body) // 2]  # the two rows are alike: the first one's lines
    for k, cell in enumerate(row):
        end = starts[k + 1] if k + 1 < len(starts) else None
        read = "".join(line[starts[k] : end].strip() for line in first).replace(" ", "")
        assert read == cell.replace(" ", ""), (k, text)  # whole, in order (a word longer than its column is cut)
