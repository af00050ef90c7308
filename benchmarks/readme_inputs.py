"""The inputs the README's examples name, made in a folder (default: the current one), so that each example runs as
written on a fresh clone:

- ``small.yaml``: the shipped deploy config with 12 calibration images, 4 precision-check images, 3 timed
  performance rounds and 12 timed latency frames (what the tests' small config is);
- ``few/``: the shipped calibration images 40-55, as unlabelled photos (agreement data);
- ``val40/``: the first 40 labelled images of the demo's val split, with their ``data.yaml``;
- stand-ins for the user's own files the examples name: ``best.pt`` (a user's trained model: the tests' YOLOv8n
  fine-tuned to 2 classes the demo does not have, coin and spark), ``photos/`` (16 unlabelled photos of its
  classes) and ``photo.jpg``, ``video.mp4`` and ``a.mp4`` (2 s of those photos at 8 fps), ``a.pt`` and ``b.pt`` (two
  models to sweep: the demo model and ``best.pt``).

    YOLO_OFFLINE=1 python benchmarks/readme_inputs.py [--out DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import cv2
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.second_model import SECOND_CLASSES, SECOND_MODEL  # noqa: E402
from yolo_edge.core.config import configs_dir  # noqa: E402
from yolo_edge.demo.shapes import demo_val_data, write_dataset  # noqa: E402
from yolo_edge.model.meta import demo_model_path  # noqa: E402
from yolo_edge.pipeline.preprocess import default_calib_dir  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("."))
    out = ap.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    cfg = yaml.safe_load((configs_dir() / "default.yaml").read_text())
    cfg["calib_images"] = 12
    cfg["checks"]["precision"]["images"] = 4
    cfg["checks"]["performance"].update(warmup=1, runs=3)
    cfg["validate"].update(latency_warmup=2, latency_runs=12)
    (out / "small.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    few = out / "few"
    few.mkdir(exist_ok=True)
    for p in sorted(default_calib_dir().glob("*.jpg"))[40:56]:
        shutil.copy(p, few)
    val = demo_val_data().parent
    val40 = out / "val40"
    for sub in ("images", "labels"):
        (val40 / sub / "val").mkdir(parents=True, exist_ok=True)
    for image in sorted((val / "images" / "val").iterdir())[:40]:
        shutil.copy(image, val40 / "images" / "val")
        label = val / "labels" / "val" / f"{image.stem}.txt"
        if label.exists():
            shutil.copy(label, val40 / "labels" / "val")
    meta = yaml.safe_load((val / "data.yaml").read_text())
    (val40 / "data.yaml").write_text(yaml.safe_dump({**meta, "val": "images/val"}, sort_keys=False))
    _users_files(out)
    print(
        f"wrote {out / 'small.yaml'}, {few}/ (16 photos), {val40}/ (40 labelled images), and best.pt, photos/, "
        "photo.jpg, video.mp4, a.mp4, a.pt, b.pt"
    )


def _users_files(out: Path) -> None:
    """Stand-ins for the files the README's examples take to be the user's own."""
    shutil.copy(SECOND_MODEL, out / "best.pt")
    shutil.copy(demo_model_path(), out / "a.pt")
    shutil.copy(SECOND_MODEL, out / "b.pt")
    with tempfile.TemporaryDirectory() as tmp:
        data = write_dataset(tmp, seed=11, sizes={"val": 16}, classes=SECOND_CLASSES)
        photos = out / "photos"
        photos.mkdir(exist_ok=True)
        for image in sorted((data.parent / "images" / "val").iterdir()):
            shutil.copy(image, photos)
    frames = [cv2.imread(str(p)) for p in sorted(photos.iterdir())]
    shutil.copy(sorted(photos.iterdir())[0], out / "photo.jpg")
    for name in ("video.mp4", "a.mp4"):
        height, width = frames[0].shape[:2]
        writer = cv2.VideoWriter(str(out / name), cv2.VideoWriter.fourcc(*"mp4v"), 8.0, (width, height))
        for frame in frames:
            writer.write(cv2.resize(frame, (width, height)))
        writer.release()


if __name__ == "__main__":
    main()
