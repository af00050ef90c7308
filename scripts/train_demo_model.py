"""Train the shipped demo model: YOLOv8n from yolov8n.yaml (random init) on the synthetic shapes set, CPU.

    YOLO_OFFLINE=1 python scripts/make_dataset.py --out datasets/shapes
    YOLO_OFFLINE=1 python scripts/train_demo_model.py --data datasets/shapes/data.yaml --epochs 25

Writes runs/demo/weights/best.pt and, with --ship, copies it (optimizer stripped, FP16) to
yolo_edge/assets/demo_yolov8n_shapes.pt. Needs the `export` extra (ultralytics, torch).
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

os.environ.setdefault("YOLO_OFFLINE", "1")

import torch  # noqa: E402
import ultralytics.engine.trainer as ul_trainer  # noqa: E402
from ultralytics import YOLO  # noqa: E402
from ultralytics.models.yolo.detect import DetectionTrainer  # noqa: E402

WORKERS = 1
ASSET = Path(__file__).resolve().parents[1] / "yolo_edge" / "assets" / "demo_yolov8n_shapes.pt"


def _cpu_autocast(enabled: bool | torch.dtype, device: str = "cuda") -> torch.autocast:
    """bf16 autocast on the CPU (AMX): ultralytics only allows bf16 on CUDA. Halves the step time here."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(enabled))


class CpuTrainer(DetectionTrainer):
    """Ultralytics forces workers=0 on the CPU; one worker overlaps mosaic augmentation with the step."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.args.workers = WORKERS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path("datasets/shapes/data.yaml"))
    ap.add_argument("--epochs", type=int, default=25)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--imgsz", type=int, default=320)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--project", type=Path, default=Path("runs").resolve())
    ap.add_argument("--ship", action="store_true", help="copy best.pt into the package assets")
    args = ap.parse_args()
    t0 = time.perf_counter()
    model = YOLO("yolov8n.yaml")
    ul_trainer.autocast = _cpu_autocast
    model.train(
        trainer=CpuTrainer,
        data=str(args.data.resolve()),
        imgsz=args.imgsz,
        epochs=args.epochs,
        batch=args.batch,
        device="cpu",
        workers=2,
        seed=args.seed,
        deterministic=True,
        pretrained=False,
        amp="bf16",
        plots=False,
        cache="ram",
        val=False,
        project=str(args.project),
        name="demo",
        exist_ok=True,
        close_mosaic=5,
        patience=0,
    )
    best = args.project / "demo" / "weights" / "best.pt"
    print(f"trained in {time.perf_counter() - t0:.0f} s -> {best}")
    if args.ship:
        ASSET.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(best, ASSET)
        print(f"shipped {ASSET} ({ASSET.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
