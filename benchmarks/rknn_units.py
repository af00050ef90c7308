"""Rockchip's toolchain on the demo model's units: compile time and simulator numerics, per unit.

    yolo-edge toolchain install rknn            # once
    YOLO_OFFLINE=1 python benchmarks/rknn_units.py [--imgsz 320] [--calib 32] [--eval 8]

Each unit (backbone, neck, backbone+neck as deploy fuses them, head, and the whole model) is quantized to
INT8 by rknn-toolkit2 for the RK3588 on the unit's own FP32 inputs from the first ``--calib`` calibration
images (as deploy calibrates), built, and run on Rockchip's simulator on ``--eval`` other images. Printed:
the build time (quantization included), the simulator's wall time per call (the host simulating, not
the board), and the lowest cosine to onnxruntime FP32 over images and outputs; for the whole model the
boxes and the class scores of output0 separately. The CPU is printed first.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator

import numpy as np
import onnx

from yolo_edge.backends import cpu_backend
from yolo_edge.backends.rknn.backend import RknnBackend, RknnExecutable
from yolo_edge.core.host import cpu_name
from yolo_edge.model.export import export_model
from yolo_edge.model.graph import SUBGRAPHS
from yolo_edge.model.meta import demo_model_path
from yolo_edge.model.split import SplitModel, cut, split_model
from yolo_edge.pipeline.preprocess import default_calib_dir, load_calibration
from yolo_edge.plan.placement import boundary_tensors


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def units(split: SplitModel) -> dict[str, onnx.ModelProto]:
    """The subgraphs, the fused backbone+neck unit deploy builds, and the whole model."""
    subgraph_of = split.exported.layout.subgraph_of
    front = [i for i, s in enumerate(subgraph_of) if SUBGRAPHS[s] in ("backbone", "neck")]
    back = [i for i, s in enumerate(subgraph_of) if SUBGRAPHS[s] not in ("backbone", "neck")]
    fused = cut(split.exported.load(), [front, back], "bn")[0]
    return {
        "backbone": split["backbone"].model,
        "neck": split["neck"].model,
        "backbone+neck": fused.model,
        "head": split["head"].model,
        "whole": split.exported.load(),
    }


def measure(
    name: str, model: onnx.ModelProto, rknn: RknnBackend, calib: list[dict[str, np.ndarray]], evals: list[dict]
) -> str:  # type: ignore[type-arg]
    names = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    t0 = time.perf_counter()
    exe = rknn.compile(model, "int8", [{n: t[n] for n in names} for t in calib])
    wall = time.perf_counter() - t0
    assert isinstance(exe, RknnExecutable)
    ref = cpu_backend().compile(model, "fp32")
    cos: list[float] = []
    boxes: list[float] = []
    scores: list[float] = []
    calls = []
    for t in evals:
        feeds = {n: t[n] for n in names}
        want = ref.run(feeds)
        got = exe.run(feeds)
        calls.append(exe.last_run_s)
        for k in want:
            cos.append(cosine(got[k], want[k]))
            if k == "output0":
                boxes.append(cosine(got[k][:, :4], want[k][:, :4]))
                scores.append(cosine(got[k][:, 4:], want[k][:, 4:]))
    exe.close()
    extra = f"  boxes {min(boxes):.4f}, class scores {min(scores):.4f}" if boxes else ""
    return (
        f"{name:<14} {exe.build_s:7.2f} s {wall:7.2f} s {statistics.median(calls) * 1e3:8.1f} ms "
        f"{min(cos):10.4f}{extra}"
    )


@contextlib.contextmanager
def demo_units_data(doc: str) -> Iterator[tuple[argparse.Namespace, SplitModel, list[dict], list[dict]]]:  # type: ignore[type-arg]
    """The unit benchmarks' command line (``--imgsz``, ``--calib``, ``--eval``; the CPU printed), the demo model
    exported and split at ``--imgsz``, and every boundary tensor of the calibration and evaluation images."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--imgsz", type=int, default=320)
    ap.add_argument("--calib", type=int, default=32)
    ap.add_argument("--eval", type=int, default=8)
    args = ap.parse_args()
    print(f"CPU: {cpu_name()}")
    with tempfile.TemporaryDirectory() as tmp:
        split = split_model(export_model(demo_model_path(), imgsz=args.imgsz, out_dir=tmp))
        images = load_calibration(default_calib_dir(), split.exported.meta.imgsz, args.calib + args.eval)
        tensors = boundary_tensors(split, images)
        yield args, split, tensors[: args.calib], tensors[args.calib :]


def main() -> None:
    with demo_units_data(__doc__ or "") as (args, split, calib, evals):
        rknn = RknnBackend("rk3588")
        print(f"demo model {args.imgsz}, RK3588 INT8 (w8a8), {args.calib} calibration images, {args.eval} eval images")
        print(f"{'unit':<14} {'build':>9} {'compile':>9} {'sim/call':>11} {'min cosine':>10}")
        for name, model in units(split).items():
            print(measure(name, model, rknn, calib, evals), flush=True)


if __name__ == "__main__":
    import results_page

    with results_page.page("rknn-units", "Rockchip units: build time and simulator cosine"):
        main()
