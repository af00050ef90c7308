"""Train the tests' second model: a 2-class YOLOv8n that is *not* the demo model, fine-tuned from it.

The shapes set relabelled to two classes with names the demo does not have (``coin`` = circles,
``spark`` = stars; the other shapes are unlabelled background), a few epochs at imgsz 256. The tests
deploy it to check what a user's own model gets: agreement mode without ``--data``, a class-name
mismatch refused, ``--class-map``.

    YOLO_OFFLINE=1 python scripts/train_second_model.py --ship

Writes runs/second/weights/best.pt and, with --ship, copies it to tests/data/coins_sparks_yolov8n.pt.
Needs the `export` extra (ultralytics, torch).
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

os.environ.setdefault("YOLO_OFFLINE", "1")

from ultralytics import YOLO  # noqa: E402

from yolo_edge.demo.shapes import write_dataset  # noqa: E402
from yolo_edge.model.meta import demo_model_path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ASSET = ROOT / "tests" / "data" / "coins_sparks_yolov8n.pt"
CLASSES = {0: "coin", 3: "spark"}  # shape class id (circle, star) -> this model's class name
SEED = 7  # not the demo's data seed: the train images are new


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=Path("datasets/coins_sparks"))
    ap.add_argument("--train", type=int, default=800)
    ap.add_argument("--val", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--imgsz", type=int, default=256)
    ap.add_argument("--project", type=Path, default=Path("runs").resolve())
    ap.add_argument("--ship", action="store_true", help="copy best.pt to tests/data/")
    args = ap.parse_args()
    t0 = time.perf_counter()
    data = write_dataset(args.data_dir, SEED, {"train": args.train, "val": args.val}, classes=CLASSES)
    model = YOLO(str(demo_model_path()))
    model.train(
        data=str(data.resolve()),
        imgsz=args.imgsz,
        epochs=args.epochs,
        batch=16,
        device="cpu",
        workers=1,
        seed=0,
        deterministic=True,
        plots=False,
        cache="ram",
        val=True,
        project=str(args.project),
        name="second",
        exist_ok=True,
        close_mosaic=2,
        patience=0,
        amp=False,
    )
    best = args.project / "second" / "weights" / "best.pt"
    print(f"trained in {time.perf_counter() - t0:.0f} s -> {best}")
    if args.ship:
        ASSET.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(best, ASSET)
        print(f"shipped {ASSET} ({ASSET.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
