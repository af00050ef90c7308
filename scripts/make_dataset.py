"""Write the synthetic shapes dataset (train/val) and refresh calib_data/.

python scripts/make_dataset.py --out datasets/shapes            # train 2000, val 300, seed 0
python scripts/make_dataset.py --calib-only                      # only calib_data/ (64 images)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from yolo_edge.demo.shapes import write_dataset, write_images

DATA_SEED = 0
CALIB_SEED = 1234  # differs from the train/val seed: calibration never sees a val image


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("datasets/shapes"))
    ap.add_argument("--seed", type=int, default=DATA_SEED)
    ap.add_argument("--train", type=int, default=2000)
    ap.add_argument("--val", type=int, default=300)
    ap.add_argument("--calib-dir", type=Path, default=Path(__file__).resolve().parents[1] / "calib_data")
    ap.add_argument("--calib", type=int, default=64)
    ap.add_argument("--calib-only", action="store_true")
    args = ap.parse_args()
    t0 = time.perf_counter()
    if not args.calib_only:
        yaml_path = write_dataset(args.out, args.seed, {"train": args.train, "val": args.val})
        print(f"dataset: {yaml_path}")
    write_images(args.calib_dir, CALIB_SEED, "calib", args.calib)
    print(f"calib: {args.calib} images in {args.calib_dir} ({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
