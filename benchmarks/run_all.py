"""Every speed comparison in one run: yolo-edge against ultralytics' ONNX predictor and a bare onnxruntime
session, the split's overhead, post-processing, the accelerator's gain, the distance from this machine's
peak, and how cost grows. Writes ``benchmarks/results.json``, ``benchmarks/growth.png`` and regenerates
``benchmarks/README.md`` (tables, goals met or not, and the CPU every figure comes from).

    YOLO_OFFLINE=1 python benchmarks/run_all.py [--quick]

About 8 minutes on 2 cores; ``--quick`` (fewer rounds, a smaller growth grid) about 3, for trying it out.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import limits
import side_by_side as sbs
from render import render

from yolo_edge.core.host import cpu_name
from yolo_edge.pipeline.preprocess import letterbox, read_image

HERE = Path(__file__).parent
TRAINED = HERE.parent / "tests" / "data" / "coins_sparks_yolov8n.pt"  # a trained 2-class YOLOv8n, not the demo


def _say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _versions() -> dict[str, str]:
    import numpy
    import onnxruntime
    import openvino
    import ultralytics

    return {
        "python": platform.python_version(),
        "onnxruntime": onnxruntime.__version__,
        "openvino": openvino.__version__,
        "ultralytics": ultralytics.__version__,
        "numpy": numpy.__version__,
    }


def _demo_tensor() -> tuple[Any, Any]:
    """The demo model's real decode output on one of its validation images (a trained model's scores)."""
    from yolo_edge.backends import cpu_backend
    from yolo_edge.demo.shapes import demo_val_data
    from yolo_edge.model.export import export_model
    from yolo_edge.model.meta import demo_model_path

    with tempfile.TemporaryDirectory() as tmp:
        exported = export_model(demo_model_path(), imgsz=320, out_dir=tmp)
        image = read_image(sorted((demo_val_data().parent / "images" / "val").glob("*.jpg"))[0])
        lb = letterbox(image, exported.meta.imgsz)
        return cpu_backend().compile(exported.load(), "fp32").run({"images": lb.tensor})["output0"], lb


def run(quick: bool) -> dict[str, Any]:
    k = 2 if quick else 1
    cores = len(os.sched_getaffinity(0))
    results: dict[str, Any] = {"cpu": cpu_name(), "cores": cores, "versions": _versions(), "quick": quick}
    image = sbs.bus_image()
    _say("1/6 end to end per image")
    models = ["yolov8n.yaml", "yolov8s.yaml", str(TRAINED)]
    results["end_to_end"] = [sbs.end_to_end(m, 640, image, 8 // k) for m in models]
    _say("2/6 split overhead")
    results["split_overhead"] = [sbs.split_overhead(f"{m}.yaml", 640, 8 // k) for m in ("yolov8n", "yolov8s")]
    _say("3/6 post-processing")
    lb640 = letterbox(image, (640, 640))
    demo_out, demo_lb = _demo_tensor()
    results["postprocess"] = [
        *sbs.postprocessing("8400 anchors x 80 classes (synthetic)", sbs.synthetic_output(), lb640, 40 // k),
        *sbs.postprocessing("demo model, a validation image", demo_out, demo_lb, 40 // k),
    ]
    _say("5/6 the machine's peak (GEMM)")
    peaks = limits.gemm_peaks(6 // k)
    results["peaks"] = peaks
    _say("4/6 the accelerator pays: deploying the demo on host-lowp (head_on_npu: auto)")
    with tempfile.TemporaryDirectory() as tmp:
        bundle, deployed = limits.deploy_demo(Path(tmp, "bundle"))
        npu = limits.npu_placement(bundle.plan, head=True)
        results["accelerator"] = {"demo_deploy": deployed, "demo": limits.demo_end_to_end(bundle, 16 // k)}
    results["accelerator"]["placement"] = npu
    _say("4/6 and 5/6 on yolov8s at 640")
    e2e, limit = limits.model_end_to_end("yolov8s.yaml", 640, npu, 8 // k, peaks)
    results["accelerator"]["yolov8s"] = e2e
    results["limit"] = limit
    _say("6/6 cost of growth")
    models = ["yolov8n.yaml", "yolov8s.yaml"] if quick else ["yolov8n.yaml", "yolov8s.yaml", "yolov8m.yaml"]
    sizes = [320, 640] if quick else [320, 640, 960, 1280]
    results["growth"] = limits.growth(models, sizes, npu, _say)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer rounds and a smaller growth grid (about 3 min)")
    ap.add_argument("--out", type=Path, default=HERE, help="where results.json, growth.png and README.md go")
    ap.add_argument("--render-only", action="store_true", help="regenerate README.md from results.json")
    args = ap.parse_args()
    t0 = time.perf_counter()
    path = args.out / "results.json"
    if args.render_only:
        results = json.loads(path.read_text())
    else:
        results = run(args.quick)
        results["wall_s"] = round(time.perf_counter() - t0, 1)
        results["date"] = datetime.date.today().isoformat()
        args.out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=1) + "\n")
    render(results, args.out)
    _say(f"wrote {path}, {args.out / 'README.md'}, {args.out / 'growth.png'} in {results['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
