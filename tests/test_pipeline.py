"""Detection pipeline: letterbox and NMS identical to ultralytics; detections match YOLO(onnx).predict."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from yolo_edge.backends import cpu_backend
from yolo_edge.backends.builder import Builder
from yolo_edge.core.config import NmsConfig
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.model.decode import HeadOutputs
from yolo_edge.model.meta import ExportedModel
from yolo_edge.pipeline.postprocess import Detections, nms, postprocess
from yolo_edge.pipeline.preprocess import letterbox, list_images, load_calibration, read_image


@pytest.mark.parametrize("shape", [(240, 320), (320, 240), (480, 640), (1080, 810), (100, 37)])
@pytest.mark.parametrize("imgsz", [(320, 320), (384, 640)])
def test_letterbox_matches_ultralytics(shape: tuple[int, int], imgsz: tuple[int, int]) -> None:
    from ultralytics.data.augment import LetterBox

    image = np.random.default_rng(0).integers(0, 255, (*shape, 3), dtype=np.uint8)
    ref = LetterBox(imgsz, auto=False)(image=image)
    ours = letterbox(image, imgsz)
    assert np.array_equal(ours.pixels[0], ref)  # resized straight into the padded frame, either orientation
    assert np.array_equal((ours.tensor[0].transpose(1, 2, 0)[..., ::-1] * 255).round().astype(np.uint8), ref)


@pytest.mark.parametrize("algorithm", ["pairs", "blocks"])
def test_nms_matches_torchvision(algorithm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both NMS algorithms (same-class pairs; the bounded dense blocks a huge class takes) keep exactly
    torchvision's boxes in its order, one class or many, a few boxes or several blocks' worth."""
    import torch
    import torchvision

    from yolo_edge.pipeline import postprocess as pp

    if algorithm == "blocks":
        monkeypatch.setattr(pp, "NMS_PAIRS", 0)
        monkeypatch.setattr(pp, "NMS_BLOCK", 64)
    rng = np.random.default_rng(0)
    grid = np.array([[x, y, x + 10, y + 10] for x in range(0, 50, 10) for y in range(0, 30, 10)], np.float32)
    crafted = np.concatenate([grid, grid, grid + 0.5])  # touching edges, exact duplicates, near duplicates
    for n, nc in ((500, 1), (1200, 5), (40, 3), (1, 1), (len(crafted), 2)):
        xy = rng.uniform(-20, 300, (n, 2)).astype(np.float32)
        boxes = np.concatenate([xy, xy + rng.uniform(5, 80, (n, 2)).astype(np.float32)], axis=1)
        boxes = crafted if n == len(crafted) else boxes
        scores = rng.random(n).astype(np.float32)
        classes = rng.integers(0, nc, n)
        for iou in (0.3, 0.5, 0.7):
            tb, ts = torch.from_numpy(boxes), torch.from_numpy(scores)
            ref = torchvision.ops.batched_nms(tb, ts, torch.from_numpy(classes), iou).numpy()
            assert np.array_equal(nms(boxes, scores, iou, classes), ref)
            assert np.array_equal(nms(boxes, scores, iou), torchvision.ops.nms(tb, ts, iou).numpy())


def _images() -> list[Path]:
    from ultralytics.utils import ASSETS

    from yolo_edge.demo.shapes import demo_val_data

    val = sorted((demo_val_data().parent / "images" / "val").glob("*.jpg"))[:12]
    return [ASSETS / "bus.jpg", ASSETS / "zidane.jpg", *val]


def test_detections_match_ultralytics_predict(demo: ExportedModel) -> None:
    """All-CPU FP32: same boxes within 1 px, confidences within 0.01, same classes as YOLO(onnx).predict."""
    from ultralytics import YOLO

    yolo = YOLO(str(demo.path), task="detect")
    exe = cpu_backend().compile(demo.load(), "fp32")
    compared = 0
    for path in _images():
        image = read_image(path)
        lb = letterbox(image, demo.meta.imgsz)
        ours = postprocess(exe.run({"images": lb.tensor}), lb, demo.meta.names, NmsConfig(0.25, 0.7, 300))
        ref = yolo.predict(image, imgsz=list(demo.meta.imgsz), conf=0.25, iou=0.7, verbose=False)[0].boxes
        assert len(ours) == len(ref), path
        order = np.lexsort((ours.xyxy[:, 0], -ours.confidence))
        ref_order = np.lexsort((ref.xyxy.numpy()[:, 0], -ref.conf.numpy()))
        assert np.abs(ours.xyxy[order] - ref.xyxy.numpy()[ref_order]).max(initial=0) <= 1.0
        assert np.abs(ours.confidence[order] - ref.conf.numpy()[ref_order]).max(initial=0) <= 0.01
        assert np.array_equal(ours.class_id[order], ref.cls.numpy().astype(int)[ref_order])
        compared += len(ours)
    assert compared >= 20  # the demo val images carry many objects: the comparison is not vacuous


def test_detections_validate_their_arrays() -> None:
    with pytest.raises(ValueError, match="inconsistent"):
        Detections(np.zeros((2, 4), np.float32), np.zeros(3, np.float32), np.zeros(2, np.int64), ("a",))
    with pytest.raises(ValueError, match="class ids"):
        Detections(np.zeros((1, 4), np.float32), np.zeros(1, np.float32), np.array([3]), ("a",))
    assert len(Detections.empty(("a",))) == 0


def test_image_errors(tmp_path: Path) -> None:
    with pytest.raises(YoloEdgeError, match="image not found"):
        read_image(tmp_path / "x.jpg")
    (tmp_path / "bad.jpg").write_bytes(b"not an image")
    with pytest.raises(YoloEdgeError, match="not a readable image"):
        read_image(tmp_path / "bad.jpg")
    with pytest.raises(YoloEdgeError, match="calibration folder not found"):
        load_calibration(tmp_path / "nope", (320, 320))
    (tmp_path / "empty").mkdir()
    with pytest.raises(YoloEdgeError, match="has no images"):
        load_calibration(tmp_path / "empty", (320, 320))
    cv2.imwrite(str(tmp_path / "empty" / "a.png"), np.zeros((10, 20, 3), np.uint8))
    assert [p.name for p in list_images(tmp_path / "empty")] == ["a.png"]
    assert load_calibration(tmp_path / "empty", (64, 64))[0].shape == (1, 3, 64, 64)


@pytest.mark.parametrize("multi_label", [False, True])
def test_nms_matches_ultralytics_non_max_suppression(demo: ExportedModel, multi_label: bool) -> None:
    """Best-class (predict) and multi-label (validator) NMS give ultralytics' detections, box for box."""
    import torch
    from ultralytics.utils.nms import non_max_suppression

    from yolo_edge.pipeline.preprocess import Letterboxed

    exe = cpu_backend().compile(demo.load(), "fp32")
    identity = Letterboxed(np.zeros((1, 3, 320, 320), np.float32), (320, 320), (1.0, 1.0), (0, 0))
    for path in _images()[2:6]:
        out = exe.run({"images": letterbox(read_image(path), demo.meta.imgsz).tensor})["output0"]
        ours = postprocess({"output0": out}, identity, demo.meta.names, NmsConfig(0.001, 0.7, 300, multi_label))
        ref = non_max_suppression(torch.from_numpy(out), 0.001, 0.7, multi_label=multi_label, max_det=300)[0].numpy()
        assert len(ours) == len(ref)
        assert np.abs(ours.xyxy - np.clip(ref[:, :4], 0, 320)).max() <= 1e-3
        assert np.array_equal(ours.class_id, ref[:, 5].astype(int))


def test_plans_are_timed_frame_by_frame_in_turn(demo: ExportedModel, calib_images: list) -> None:  # type: ignore[type-arg]
    """measure_latencies interleaves the detectors (rotating the order), so machine noise hits all alike."""
    from yolo_edge.core.config import load_deploy_config, load_profile
    from yolo_edge.model.split import split_model
    from yolo_edge.pipeline.detector import Detector
    from yolo_edge.plan.placement import PlacementPlan, boundary_tensors
    from yolo_edge.runtime.build import build_units
    from yolo_edge.runtime.events import EventLog
    from yolo_edge.runtime.executor import SplitExecutor
    from yolo_edge.validate.latency import measure_latencies

    cfg = load_deploy_config()
    split = split_model(demo)
    calls: list[str] = []

    class Recording(Detector):
        name = ""

        def detect(self, image, nms=None):  # type: ignore[no-untyped-def]
            calls.append(self.name)
            return super().detect(image, nms)

    detectors = {}
    for name, fuse in (("fused", True), ("four", False)):
        units = build_units(
            split,
            PlacementPlan.manual(split, {}, "cpu"),
            Builder(load_profile("cpu")),
            boundary_tensors(split, calib_images[:1]),
            EventLog(),
            fuse=fuse,
        )
        detectors[name] = Recording(SplitExecutor(units, cfg.runtime), demo.meta, cfg.nms)
        detectors[name].name = name
    images = [(x[0].transpose(1, 2, 0) * 255).astype(np.uint8) for x in calib_images[:3]]
    result = measure_latencies(detectors, images, warmup=1, runs=4)
    assert calls == ["fused", "four"] + ["fused", "four", "four", "fused"] * 2
    assert list(result["fused"].phases) == ["preprocess", "backbone+neck+head", "transfers", "decode+nms"]
    assert list(result["four"].phases) == ["preprocess", "backbone", "neck", "head", "transfers", "decode+nms"]
    assert all(len(r.samples_ms) == 4 and r.end_to_end.p50 > 0 for r in result.values())


def _same_detections(ref: Detections, ours: Detections, px: float) -> None:
    """The same detections in the same order: boxes within 1e-4 px of the model's input (``px`` image pixels each),
    scores within 1e-5, the same classes. Two whose
    scores are equal within that tolerance may trade places (onnxruntime's sigmoid and numpy's round the last bit
    apart), so each of ``ref``'s is matched with an unused one of ``ours`` no further than its tie."""
    assert len(ours) == len(ref)
    used = np.zeros(len(ours), bool)
    for i in range(len(ref)):
        near = np.flatnonzero(
            ~used
            & (ours.class_id == ref.class_id[i])
            & (np.abs(ours.confidence - ref.confidence[i]) <= 1e-5)
            & (np.abs(ours.xyxy - ref.xyxy[i]).max(1) <= 1e-4 * px)
        )
        assert len(near), f"detection {i} of {len(ref)} ({ref.xyxy[i]}, {ref.confidence[i]}) has no match"
        j = near[0]
        assert np.abs(ours.confidence[i:j] - ref.confidence[i]).max(initial=0) <= 1e-5  # only ties pass it
        used[j] = True


def test_the_decode_reads_class_maps_in_either_layout_for_any_class_count() -> None:
    """The candidates (anchor, class, score) are the same from class maps laid out channel-minor (as OpenVINO writes a
    head's maps, handed over as (1, C, H, W) views) as from maps laid out per channel plane, for 1, 2 and 80 classes,
    multi-label and best-class (random logits: no model's class count or scores assumed)."""
    from yolo_edge.model.decode import head_candidates

    rng = np.random.default_rng(0)
    for nc in (1, 2, 80):
        names = tuple(f"/model.22/cv3.{k}/cv3.{k}.2/Conv_output_0" for k in range(3))
        head = HeadOutputs(tuple(n.replace("cv3", "cv2") for n in names), names, (8, 16, 32), 16)
        planes = {
            n: rng.normal(-3.0, 1.5, (1, nc, side, side)).astype(np.float32) for n, side in zip(names, (40, 20, 10))
        }
        minor = {n: np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2) for n, a in planes.items()}
        assert nc == 1 or all(a.strides[1] == a.itemsize for a in minor.values())  # one class: either layout
        for conf, multi_label in ((0.001, True), (0.001, False), (0.25, True), (0.25, False)):
            got, want = (
                head_candidates(minor, head, conf, multi_label),
                head_candidates(planes, head, conf, multi_label),
            )
            assert len(want[0]) > 0 and all(np.array_equal(a, b) for a, b in zip(got, want)), (nc, conf, multi_label)


@pytest.mark.parametrize("which", ["demo", "second"])
def test_candidate_first_decode_gives_the_onnx_decodes_detections(
    which: str, demo: ExportedModel, second_model: Path, tmp_path: Path
) -> None:
    """The head's raw outputs decoded candidates first (logits against logit(conf), DFL for the candidates only)
    give the detections of the ONNX decode subgraph + NMS, on the demo and on a model that is not the demo, at
    predict's and val's settings (conf 0.001 keeps thousands of candidates)."""
    from yolo_edge.model.export import export_model
    from yolo_edge.model.split import split_model

    model = demo if which == "demo" else export_model(second_model, imgsz=(256, 320), out_dir=tmp_path)
    split = split_model(model)
    whole = cpu_backend().compile(model.load(), "fp32")
    units = [cpu_backend().compile(split[name].model, "fp32") for name in ("backbone", "neck", "head")]
    head = HeadOutputs.find({t.name: t.shape for t in units[-1].outputs}, model.meta.imgsz[0])
    assert head is not None and head.strides == (8, 16, 32) and head.reg_max == 16
    assert HeadOutputs.find({t.name: t.shape for t in whole.outputs}, model.meta.imgsz[0]) is None
    compared = {False: 0, True: 0}
    for path in _images()[:10]:
        lb = letterbox(read_image(path), model.meta.imgsz)
        tensors = {"images": lb.tensor}
        for unit in units:
            tensors.update(unit.run({t.name: tensors[t.name] for t in unit.inputs}))
        raw = {t.name: tensors[t.name] for t in units[-1].outputs}
        output0 = whole.run({"images": lb.tensor})
        for conf, multi_label, max_det in ((0.25, False, 300), (0.001, True, 300), (0.001, False, 20)):
            ref = postprocess(output0, lb, model.meta.names, NmsConfig(conf, 0.7, max_det, multi_label))
            ours = postprocess(raw, lb, model.meta.names, NmsConfig(conf, 0.7, max_det, multi_label), head)
            _same_detections(ref, ours, 1 / min(lb.gain))
            compared[conf < 0.01] += len(ref)
    assert compared[False] >= 5 and compared[True] >= 500  # neither comparison is vacuous
