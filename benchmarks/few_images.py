"""How sure a verdict is on a handful of photos against a few hundred: the tests' second model (YOLOv8n fine-tuned
to coins and sparks) deployed to host-lowp by agreement on N unlabelled photos (the synthetic shapes generator,
seed 9, the second model's classes), and the candidate table with every drift's paired bootstrap interval;
undecided candidates say how many more judging images would decide them. Prints the CPU.

    YOLO_OFFLINE=1 python benchmarks/few_images.py [--photos 11 120]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from yolo_edge.core.host import cpu_name
from yolo_edge.demo.shapes import write_dataset
from yolo_edge.flows.deploy import DeployRequest, deploy
from yolo_edge.flows.report import SEARCH_HEADER, search_rows

SECOND_MODEL = Path(__file__).resolve().parents[1] / "tests" / "data" / "coins_sparks_yolov8n.pt"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", type=int, nargs="+", default=[11, 120])
    args = ap.parse_args()
    print(f"CPU: {cpu_name()}")
    for n in args.photos:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            write_dataset(root / "ds", seed=9, sizes={"val": n}, classes={0: "coin", 3: "spark"})
            photos = root / "photos"
            shutil.copytree(root / "ds" / "images" / "val", photos)
            result = deploy(
                DeployRequest(model=str(SECOND_MODEL), device="host-lowp", data=photos), quiet=True, out=root / "bundle"
            )
            r = result.report
            print(
                f"\n{n} photos: {len(r.calibration.files)} calibrate, {len(r.data.dataset)} judge by agreement; "
                f"chosen {r.chosen.name} ({r.placement.label}), {r.chosen.status}"
            )
            print(" | ".join(SEARCH_HEADER))
            for row in search_rows(r.search):
                print(" | ".join(row))
            for line in r.search.undecided_lines(r.limits):
                print(line)


if __name__ == "__main__":
    import results_page

    with results_page.page("few-images", "Drift intervals on few judging images"):
        main()
