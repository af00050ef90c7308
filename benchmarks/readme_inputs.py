"""The inputs the README's examples name, made in a folder (default: the current one), so that each example runs as
written on a fresh clone:

- ``small.yaml``: the shipped deploy config with 12 calibration images, 4 precision-check images, 3 timed
  performance rounds and 12 timed latency frames (what the tests' small config is);
- ``few/``: the shipped calibration images 40-55, as unlabelled photos (agreement data);
- ``val40/``: the first 40 labelled images of the demo's val split, with their ``data.yaml``.

    YOLO_OFFLINE=1 python benchmarks/readme_inputs.py [--out DIR]
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import yaml

from yolo_edge.config import configs_dir
from yolo_edge.demo.shapes import demo_val_data
from yolo_edge.pipeline.preprocess import default_calib_dir


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
    print(f"wrote {out / 'small.yaml'}, {few}/ (16 photos), {val40}/ (40 labelled images)")


if __name__ == "__main__":
    main()
