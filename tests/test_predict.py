"""Predict as a user of ultralytics would: ``yolo_edge.load(bundle)(source)`` and ``yolo-edge run`` with the flags
they type (``--conf --iou --classes --max-det --save-txt --save-json``), on the shared demo bundle."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest

from yolo_edge import load
from yolo_edge.cli.main import main
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.flows.deploy import DeployResult
from yolo_edge.pipeline.annotate import class_color
from yolo_edge.pipeline.preprocess import default_calib_dir


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("photos")
    for p in sorted(default_calib_dir().glob("*.jpg"))[40:44]:
        shutil.copy(p, folder)
    return folder


def test_predict_in_one_line_on_a_path_an_array_a_folder_and_a_list(deployed: DeployResult, photos: Path) -> None:
    first = sorted(photos.iterdir())[0]
    with load(deployed.bundle) as model:
        r = model(first)[0]
        same = model(cv2.imread(str(first)))[0]
        folder = model(photos)
        mixed = model([str(first), cv2.imread(str(first))])
        strict = model(first, conf=0.8, max_det=1)[0]
        k = int(r.boxes.cls[0])
        only = model(photos, classes=[r.names[k]])
        with pytest.raises(YoloEdgeError, match="source not found"):
            model(photos / "missing.jpg")
        with pytest.raises(YoloEdgeError, match="H x W x 3 uint8"):
            model(np.zeros((8, 8), np.float32))
        with pytest.raises(YoloEdgeError, match="not the model's"):
            model(first, classes=[99])
        with pytest.raises(YoloEdgeError, match="stream=True"):
            model(0)
    assert len(r) > 0 and r.boxes.xyxy.shape == (len(r), 4) and r.path == first.name
    assert np.array_equal(r.boxes.xyxy, same.boxes.xyxy) and np.array_equal(r.boxes.cls, same.boxes.cls)
    assert [x.path for x in folder] == sorted(p.name for p in photos.iterdir()) and len(mixed) == 2
    assert set(r.speed) == {"preprocess", "inference", "postprocess"} and all(v >= 0 for v in r.speed.values())
    assert len(strict) <= 1 and all(strict.boxes.conf >= 0.8)
    assert all((x.boxes.cls == k).all() for x in only) and sum(len(x) for x in only) > 0


def test_results_draw_each_class_in_its_colour_and_save_labels_and_json(
    deployed: DeployResult, photos: Path, tmp_path: Path
) -> None:
    with load(deployed.bundle) as model:
        results = model(photos, conf=0.5)
    r = next(x for x in results if len(set(x.boxes.cls.tolist())) >= 2)  # two classes in one image
    drawn = r.plot()
    for box, cls in zip(r.boxes.xyxy, r.boxes.cls):
        x1, y1, x2, y2 = (int(round(v)) for v in box)
        edge = drawn[(y1 + y2) // 2, max(x1, 0)]  # the box's left edge, halfway down: its class's colour
        assert tuple(int(c) for c in edge) == class_color(int(cls))
    assert class_color(int(r.boxes.cls[0])) != class_color(int(r.boxes.cls[0]) + 1)
    saved = Path(r.save(tmp_path / "annotated.png"))
    assert cv2.imread(str(saved)).shape == r.orig_img.shape
    lines = Path(r.save_txt(tmp_path / "labels.txt", save_conf=True)).read_text().splitlines()
    h, w = r.orig_img.shape[:2]
    for line, box, cls in zip(lines, r.boxes.xyxy, r.boxes.cls):
        c, cx, cy, bw, bh, conf = line.split()
        assert int(c) == int(cls) and abs(float(cx) * w - (box[0] + box[2]) / 2) < 0.01 and 0 < float(conf) <= 1
        assert abs(float(bw) * w - (box[2] - box[0])) < 0.01 and abs(float(bh) * h - (box[3] - box[1])) < 0.01
    rows = json.loads(r.to_json())
    assert [row["class"] for row in rows] == r.boxes.cls.tolist() and rows[0]["name"] == r.names[rows[0]["class"]]


def test_run_takes_ultralytics_predict_flags(
    deployed: DeployResult, photos: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, results = tmp_path / "out", tmp_path / "results.json"
    args = ["run", str(deployed.bundle), "--source", str(photos), "--conf", "0.5", "--classes", "0", "1"]
    args += ["--max-det", "2", "--save", str(out), "--save-txt", "--save-json", str(results), "--quiet"]
    assert main(args) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if "ms inference" in x]
    assert len(lines) == 4 and all(
        "ms preprocess" in x and "ms inference" in x and "ms postprocess" in x for x in lines
    )
    frames = json.loads(results.read_text())
    assert [f["source"] for f in frames] == sorted(p.name for p in photos.iterdir())
    for f in frames:
        assert len(f["detections"]) <= 2 and all(d["class_id"] in (0, 1) for d in f["detections"])
        assert all(d["confidence"] >= 0.5 for d in f["detections"])
        labels = (out / "labels" / f"{Path(f['source']).stem}.txt").read_text().splitlines()
        assert [int(x.split()[0]) for x in labels] == [d["class_id"] for d in f["detections"]]
    assert main(["predict", str(deployed.bundle), "--source", str(photos), "--classes", "unicorn"]) == 2
    assert "yolo-edge predict: error: class 'unicorn' is not the model's" in capsys.readouterr().err  # the alias
    assert main(["run", str(deployed.bundle), "--source", str(photos), "--save-txt"]) == 2
    assert "give --save DIR" in capsys.readouterr().err


def test_K_the_python_apis_bad_inputs_are_one_line_errors(
    deployed: DeployResult, photos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #55's class K: each a :class:`YoloEdgeError` saying what was wrong (no ZeroDivisionError, TypeError,
    cv2.error or hidden temporary file's name), and a folder given to ``save`` gets the default name inside it; a
    stream that never opens raises instead of yielding nothing."""
    first = sorted(photos.iterdir())[0]
    with load(deployed.bundle) as model:
        cases: list[tuple[object, str]] = [
            (lambda: model(np.zeros((0, 320, 3), np.uint8)), "H x W x 3 uint8"),
            (lambda: model(p for p in [first]), "a source must be"),
            (lambda: model(None), "a source must be"),
            (lambda: model(b"photo.jpg"), "a source must be"),
            (lambda: model(""), "empty string"),
            (lambda: model(first, max_det=2.5), "max_det must be an integer"),
            (lambda: model(first, conf="0.5"), "conf must be a number"),
        ]
        for call, message in cases:
            with pytest.raises(YoloEdgeError, match=message):
                call()  # type: ignore[operator]
        r = model(first)[0]
        with pytest.raises(YoloEdgeError, match="cannot save an image as '.xyz'"):
            r.save(tmp_path / "x.xyz")
        with pytest.raises(YoloEdgeError, match=r"the folder .*missing does not exist"):
            r.save(tmp_path / "missing" / "x.jpg")
        with pytest.raises(YoloEdgeError, match=r"the folder .*missing does not exist"):
            r.save_txt(tmp_path / "missing" / "x.txt")
        (tmp_path / "dir").mkdir()
        saved = r.save(f"{tmp_path / 'dir'}/")
        assert Path(saved).parent == tmp_path / "dir" and Path(saved).is_file()
        import yolo_edge.flows.predict
        from yolo_edge.pipeline.engine import StreamOptions
        from yolo_edge.pipeline.sources import SourceOptions

        soon = StreamOptions(SourceOptions(open_timeout_s=2))  # the default gives a camera 30 s
        monkeypatch.setattr(yolo_edge.flows.predict, "StreamOptions", lambda: soon)
        with pytest.raises(YoloEdgeError, match="could not open it"):
            list(model("http://127.0.0.1:9/none.mjpg", stream=True))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir"]


def _snippet(results: list) -> list[tuple]:  # type: ignore[type-arg]
    """Code written for ultralytics' ``Results``, run unchanged on ultralytics' and on yolo-edge's."""
    rows = []
    for r in results:
        h, w = r.orig_shape
        assert len(r.boxes) == r.boxes.data.shape[0] and r.boxes.data.shape[1] == 6 and r.boxes.id is None
        for box in r.boxes:
            x, y, bw, bh = box.xywhn[0].tolist()
            x1, y1, x2, y2 = box.xyxy[0].tolist()
            cx, cy = box.xywh[0].tolist()[:2]
            assert abs(cx - (x1 + x2) / 2) < 1e-3 and abs(x * w - cx) < 1e-2 and abs(y * h - cy) < 1e-2
            assert box.xyxyn[0].tolist()[2] * w == pytest.approx(x2, abs=1e-2)
            assert int(box.cls) == int(box.cls[0]) and float(box.conf) == float(box.conf[0])  # a (1,) tensor's
            rows.append((r.names[int(box.cls[0])], float(box.conf[0]), x, y, bw, bh))
        assert [d["name"] for d in r.summary()] == [r.names[int(c)] for c in r.boxes.cls.tolist()]
        assert r.verbose().endswith(", ")
        xyxy = r.boxes.xyxy.cpu().numpy()
        assert type(xyxy) is np.ndarray and xyxy.shape == (len(r.boxes), 4)
        assert r.plot(conf=False, line_width=1).shape == r.orig_img.shape
    return sorted(rows, key=lambda row: -row[1])


def test_K_code_written_for_ultralytics_results_runs_unchanged_and_agrees(deployed_cpu: Path, photos: Path) -> None:
    """The same snippet on ultralytics' YOLO(checkpoint) and on the bundle deployed from it to ``cpu`` (FP32), with
    the keywords ultralytics users pass (``imgsz`` the bundle's, ``verbose``): the same boxes, classes and
    confidences within what a letterbox of another padding and another runtime move; keywords asking for what the
    bundle fixed are one line each."""
    from ultralytics import YOLO

    from yolo_edge.model.meta import demo_model_path

    images = [str(p) for p in sorted(photos.iterdir())[:3]]
    theirs = _snippet(YOLO(str(demo_model_path()))(images, imgsz=320, conf=0.5, verbose=False, device="cpu"))
    with load(deployed_cpu) as model:
        ours = _snippet(model(images, imgsz=320, conf=0.5, verbose=False))
        for kwargs, message in (
            ({"imgsz": 640}, "deployed and proven at 320x320"),
            ({"device": "cpu"}, "fixes where each unit runs"),
            ({"half": True}, "fixes each unit's precision"),
        ):
            with pytest.raises(YoloEdgeError, match=message):
                model(images[0], **kwargs)
    assert len(ours) == len(theirs) > 0, (ours, theirs)
    for a, b in zip(ours, theirs):
        assert a[0] == b[0] and abs(a[1] - b[1]) < 0.05 and max(abs(u - v) for u, v in zip(a[2:], b[2:])) < 0.02, (a, b)


def test_the_sources_and_keywords_ultralytics_takes(
    deployed_cpu: Path, photos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PIL image (RGB) as its BGR array; a glob as its files; one class alone (``classes=0``, by name) as a list of
    it; ``imgsz=320.0`` as 320; ``save=True`` into ``runs/detect/predict``, then ``predict2``."""
    from PIL import Image

    first = sorted(photos.iterdir())[0]
    monkeypatch.chdir(tmp_path)
    with load(deployed_cpu) as model:
        (array,) = model(str(first))
        (pil,) = model(Image.open(first))
        assert np.array_equal(pil.boxes.xyxy, array.boxes.xyxy) and np.array_equal(pil.orig_img, array.orig_img)
        globbed = model(str(photos / "*"))
        assert [r.path for r in globbed] == [p.name for p in sorted(photos.iterdir())]
        name = model.names[0]
        for one in (0, name, [0]):
            assert {int(c) for r in model(str(first), classes=one) for c in r.boxes.cls} <= {0}
        assert len(model(str(first), imgsz=320.0)) == 1
        for folder in ("predict", "predict2"):
            saved = model([str(first), array.orig_img], save=True)
            assert sorted(p.name for p in (tmp_path / "runs/detect" / folder).iterdir()) == sorted(
                f"{Path(r.path).stem}.jpg" for r in saved
            )
        with pytest.raises(YoloEdgeError, match="no file matches"):
            model(str(photos / "*.none"))
        with pytest.raises(YoloEdgeError, match="a class is an id or a name"):
            model(str(first), classes=[0.5])


def test_the_cli_takes_the_source_as_ultralytics_does_and_predicts_errors_say_predict(
    deployed_cpu: Path, photos: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``yolo-edge predict BUNDLE photos/`` and ``... source=photos/`` (ultralytics' forms) as ``--source``; with no
    source the error names the command the user typed."""
    for form in ([str(photos)], [f"source={photos}"], ["--source", str(photos)]):
        assert main(["predict", str(deployed_cpu), *form, "--json"]) == 0, capsys.readouterr().err
        assert len(capsys.readouterr().out.splitlines()) == len(list(photos.iterdir())), form
    assert main(["predict", str(deployed_cpu)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("yolo-edge predict: error: no source") and "run" not in err, err
