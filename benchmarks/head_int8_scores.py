"""How far each INT8 quantizer moves the class scores when the head is INT8 on host-lowp: the largest class-score
error the precision check reports (until 2026-12-07 it refused one over 0.1; now it refuses only broken numerics: the
flips at ``nms.conf``, ``benchmarks/precision_floor.py``), measured per quantizer on the tests' second model (a
trained 2-class YOLOv8n) at 640.

    YOLO_OFFLINE=1 python benchmarks/head_int8_scores.py [--photos 60] [--calib 30] [--eval 8]

The second model's own synthetic photos (``write_dataset(seed=9)``, as ``vs_ultralytics_int8.py`` makes them): the
head is quantized by NNCF (u8, s8; its default ranges and min-max ranges) and by onnxruntime's QDQ recipe on the
first ``--calib`` photos' head inputs, run by OpenVINO on ``--eval`` others, the decode in FP32 after it; printed per
quantizer: the largest class-score
error over the images (what the check compares with 0.1), how many scores move by more than 0.1 and 0.05, and the
FP32 and INT8 scores where the error is largest. The CPU is printed first.

``--fused``: the same for the backbone, neck and head as one unit (what the search's one-unit step judges), with
NNCF also keeping the class branch's last convolutions, or all of its convolutions, out of INT8; beside each, its
median time, all variants interleaved over ``--rounds`` rounds on one photo: whether a faster quantizer's unit could
pass the check, and what keeping layers costs.

    YOLO_OFFLINE=1 python benchmarks/head_int8_scores.py --fused [--rounds 60]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.second_model import SECOND_CLASSES, SECOND_MODEL  # noqa: E402
from yolo_edge.backends import cpu_backend  # noqa: E402
from yolo_edge.backends.base import Executable  # noqa: E402
from yolo_edge.backends.openvino.backend import OpenVinoBackend  # noqa: E402
from yolo_edge.core.config import Variant  # noqa: E402
from yolo_edge.core.host import cpu_name  # noqa: E402
from yolo_edge.demo.shapes import write_dataset  # noqa: E402
from yolo_edge.model.export import export_model  # noqa: E402
from yolo_edge.model.split import SplitModel, split_model  # noqa: E402
from yolo_edge.pipeline.preprocess import load_calibration  # noqa: E402
from yolo_edge.plan.placement import boundary_tensors  # noqa: E402

VARIANTS = ("int8/u8/nncf", "int8/s8/nncf", "int8/u8/nncf-minmax", "int8/s8/nncf-minmax", "int8/u8/qdq")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--photos", type=int, default=60)
    ap.add_argument("--calib", type=int, default=30)
    ap.add_argument("--eval", type=int, default=8)
    ap.add_argument("--fused", action="store_true", help="backbone+neck+head as one unit, with timings")
    ap.add_argument("--rounds", type=int, default=60)
    args = ap.parse_args()
    print(f"CPU: {cpu_name()}")
    with tempfile.TemporaryDirectory() as tmp:
        write_dataset(Path(tmp) / "photos", seed=9, sizes={"val": args.photos}, classes=SECOND_CLASSES)
        split = split_model(export_model(SECOND_MODEL, imgsz=640, out_dir=tmp))
        images = load_calibration(Path(tmp) / "photos" / "images" / "val", (640, 640), args.calib + args.eval)
        tensors = boundary_tensors(split, images)
        if args.fused:
            fused(split, tensors, args.calib, args.rounds)
            return
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


def fused(split: SplitModel, tensors: list[dict[str, np.ndarray]], n_calib: int, rounds: int) -> None:
    """Backbone+neck+head as one OpenVINO unit per variant: the largest class-score error and the median time."""
    maps = [t.name for t in split["decode"].inputs]
    unit = onnx.utils.Extractor(split.exported.load()).extract_model([split.input.name], maps)
    made = {o: n for n in split["head"].model.graph.node for o in n.output}
    last_cls = tuple(made[m].name for m in maps if "cv3" in made[m].name)  # the class maps' own convolutions
    cls_branch = tuple(n.name for n in split["head"].model.graph.node if n.op_type == "Conv" and "cv3" in n.name)
    variants = {
        "int8/u8/qdq": Variant("int8", "u8", "qdq"),
        "int8/u8/nncf": Variant("int8", "u8", "nncf"),
        "int8/s8/nncf": Variant("int8", "s8", "nncf"),
        "int8/u8/nncf-minmax": Variant("int8", "u8", "nncf-minmax"),
        "int8/s8/nncf-minmax": Variant("int8", "s8", "nncf-minmax"),
        f"int8/s8/nncf, {len(last_cls)} last class convs kept": Variant("int8", "s8", "nncf", kept=last_cls),
        f"int8/s8/nncf, {len(cls_branch)} class-branch convs kept": Variant("int8", "s8", "nncf", kept=cls_branch),
    }
    decode = cpu_backend().compile(split["decode"].model, "fp32")
    calib = [{split.input.name: t[split.input.name]} for t in tensors[:n_calib]]
    print(f"backbone+neck+head as one unit, {n_calib} calibration and {len(tensors) - n_calib} eval photos")
    with OpenVinoBackend() as backend:
        exes: dict[str, Executable] = {}
        for label, variant in variants.items():
            exes[label] = exe = backend.compile(unit, variant, calib)
            error = 0.0
            for t in tensors[n_calib:]:
                got = decode.run(exe.run({split.input.name: t[split.input.name]}))["output0"][:, 4:]
                want = decode.run({m: t[m] for m in maps})["output0"][:, 4:]
                error = max(error, float(np.abs(got - want).max()))
            print(f"  {label:<42} max class-score error {error:.3f} ({'passes' if error <= 0.1 else 'fails'} 0.1)")
        feeds = {split.input.name: tensors[-1][split.input.name]}
        times: dict[str, list[float]] = {k: [] for k in exes}
        for r in range(rounds + 5):  # interleaved: one call of each in turn a round, the first 5 untimed
            for label, exe in exes.items():
                t0 = time.perf_counter()
                exe.run(feeds)
                if r >= 5:
                    times[label].append(time.perf_counter() - t0)
        base = statistics.median(times["int8/u8/qdq"])
        for label, got in times.items():
            ms = statistics.median(got)
            print(f"  {label:<42} median {ms * 1e3:6.2f} ms ({ms / base:.3f}x the QDQ recipe's)")


if __name__ == "__main__":
    import results_page

    with results_page.page("head-int8-scores", "How far INT8 recipes move the class scores"):
        main()
