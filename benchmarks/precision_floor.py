"""What the precision check sees of working quantizers: per subgraph, each INT8 variant's detector-output figures
(box and class-score cosine, largest class-score error, the share of class scores that cross ``nms.conf``) on the
demo model (320, its calibration images) and on the official COCO YOLOv8n (640, real photos, ``real_photos.py``).

The check refuses only broken numerics: cosine below ``checks.precision.min_cosine`` (0.9) or more than
``max_flips`` (half) of the scores over the operating confidence flipped; this prints how far working quantizers
are from those floors, and the old constants' verdict beside them (cosine 0.99, score error 0.1: tuned on the demo,
they refused the COCO model's INT8 backbone).

    YOLO_OFFLINE=1 python benchmarks/precision_floor.py [--device host-lowp rk3588] [--photos 40]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from real_photos import photos, yolov8n  # noqa: E402

from yolo_edge.core.config import load_deploy_config, load_profile  # noqa: E402
from yolo_edge.core.host import cpu_name  # noqa: E402
from yolo_edge.model.export import export_model  # noqa: E402
from yolo_edge.model.meta import demo_model_path  # noqa: E402
from yolo_edge.model.split import split_model  # noqa: E402
from yolo_edge.pipeline.preprocess import default_calib_dir, load_calibration  # noqa: E402
from yolo_edge.plan.checks import all_int8_variants  # noqa: E402
from yolo_edge.plan.planner import Planner  # noqa: E402
from yolo_edge.plan.results import Precision  # noqa: E402

OLD_COSINE, OLD_SCORE_ERROR = 0.99, 0.1


def measure(model: Path, imgsz: int, images_dir: Path, device: str, work: Path) -> list[tuple[str, ...]]:
    cfg = load_deploy_config()
    split = split_model(export_model(model, imgsz=imgsz, out_dir=work / f"{model.stem}-{imgsz}"))
    images = load_calibration(images_dir, split.exported.meta.imgsz, cfg.calib_images + cfg.checks.precision.images)
    planner = Planner(split, load_profile(device), cfg, images)
    rows = []
    try:
        npu = planner.checker.npu
        for name in ("backbone", "neck", "head"):
            cand = planner.subgraph_candidate(name)
            for variant in all_int8_variants(npu) + all_int8_variants(npu, fallback=True):
                result = planner.checker.precision(cand, variant)
                m = result.measured
                assert isinstance(m, Precision)
                cos = min(m.box_cosine or 0.0, m.score_cosine or 0.0)
                old = cos >= OLD_COSINE and (m.score_max_error or 0.0) <= OLD_SCORE_ERROR
                rows.append(
                    (
                        f"{model.stem}@{imgsz}",
                        name,
                        variant.label,
                        f"{m.box_cosine:.4f}",
                        f"{m.score_cosine:.4f}",
                        f"{m.score_max_error:.3f}",
                        f"{(m.flips or 0.0):.1%} of {m.scores_over}",
                        "pass" if result.passed else "broken",
                        "pass" if old else "refused",
                    )
                )
                print(" | ".join(rows[-1]), flush=True)
    finally:
        planner.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", nargs="+", default=["host-lowp"])
    ap.add_argument("--photos", type=int, default=40)
    args = ap.parse_args()
    print(f"CPU: {cpu_name()}")
    print("model | subgraph | variant | box cos | score cos | score error | flipped at conf | now | old check")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        real = work / "photos"
        photos(args.photos, real)
        for device in args.device:
            print(f"## {device}")
            measure(demo_model_path(), 320, default_calib_dir(), device, work)
            measure(yolov8n(), 640, real, device, work)


if __name__ == "__main__":
    main()
