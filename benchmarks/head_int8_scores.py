"""How far each INT8 quantizer moves the class scores when the head is INT8 on host-lowp: the precision check's
``max_score_error`` (0.1) measured per quantizer on the tests' second model (a trained 2-class YOLOv8n) at 640.

    YOLO_OFFLINE=1 python benchmarks/head_int8_scores.py [--photos 60] [--calib 30] [--eval 8]

The second model's own synthetic photos (``write_dataset(seed=9)``, as ``vs_ultralytics_int8.py`` makes them): the
head is quantized by NNCF (u8, s8) and by onnxruntime's QDQ recipe on the first ``--calib`` photos' head inputs,
run by OpenVINO on ``--eval`` others, the decode in FP32 after it; printed per quantizer: the largest class-score
error over the images (what the check compares with 0.1), how many scores move by more than 0.1 and 0.05, and the
FP32 and INT8 scores where the error is largest. The CPU is printed first.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.second_model import SECOND_CLASSES, SECOND_MODEL  # noqa: E402
from yolo_edge.backends import cpu_backend  # noqa: E402
from yolo_edge.backends.openvino import OpenVinoBackend  # noqa: E402
from yolo_edge.demo.shapes import write_dataset  # noqa: E402
from yolo_edge.export import export_model  # noqa: E402
from yolo_edge.host import cpu_name  # noqa: E402
from yolo_edge.pipeline.preprocess import load_calibration  # noqa: E402
from yolo_edge.plan.placement import boundary_tensors  # noqa: E402
from yolo_edge.split import split_model  # noqa: E402

VARIANTS = ("int8/u8/nncf", "int8/s8/nncf", "int8/u8/qdq")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--photos", type=int, default=60)
    ap.add_argument("--calib", type=int, default=30)
    ap.add_argument("--eval", type=int, default=8)
    args = ap.parse_args()
    print(f"CPU: {cpu_name()}")
    with tempfile.TemporaryDirectory() as tmp:
        write_dataset(Path(tmp) / "photos", seed=9, sizes={"val": args.photos}, classes=SECOND_CLASSES)
        split = split_model(export_model(SECOND_MODEL, imgsz=640, out_dir=tmp))
        images = load_calibration(Path(tmp) / "photos" / "images" / "val", (640, 640), args.calib + args.eval)
        tensors = boundary_tensors(split, images)
        head, names = split["head"].model, [t.name for t in split["head"].inputs]
        decode = cpu_backend().compile(split["decode"].model, "fp32")
        print(f"second model at 640, head INT8 on OpenVINO, {args.calib} calibration and {args.eval} eval photos")
        print(f"{'variant':<14} {'max error':>9} {'> 0.1':>6} {'> 0.05':>7}  FP32 -> INT8 at the largest error")
        for variant in VARIANTS:
            calib = [{n: t[n] for n in names} for t in tensors[: args.calib]]
            with OpenVinoBackend() as backend:
                exe = backend.compile(head, variant, calib)
                errors, worst = [], (0.0, 0.0, 0.0)
                for t in tensors[args.calib :]:
                    got = decode.run(exe.run({n: t[n] for n in names}))["output0"][:, 4:].ravel()
                    want = decode.run({i.name: t[i.name] for i in split["decode"].inputs})["output0"][:, 4:].ravel()
                    error = np.abs(got - want)
                    errors.append(error)
                    k = int(error.argmax())
                    worst = max(worst, (float(error[k]), float(want[k]), float(got[k])))
                every = np.concatenate(errors)
                print(
                    f"{variant:<14} {every.max():9.3f} {int((every > 0.1).sum()):6d} {int((every > 0.05).sum()):7d}  "
                    f"{worst[1]:.3f} -> {worst[2]:.3f}  (of {every.size} scores)"
                )


if __name__ == "__main__":
    main()
