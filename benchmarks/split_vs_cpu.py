"""Model-only latency of the demo model: all-CPU FP32 (onnxruntime) vs the split plan with backbone+neck
INT8 on host-lowp (OpenVINO CPU plugin, VNNI/AMX; or ``--device rk3588``: onnxruntime's INT8 kernels)
and head+decode FP32 on the CPU. Prints the ratio and the output fidelity. Ratios from one run on one
machine; run it on a quiet machine.

    YOLO_OFFLINE=1 python benchmarks/split_vs_cpu.py [--frames 200] [--precision int8|bf16] [--imgsz 320] [--device host-lowp]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from yolo_edge.backends import cpu_backend
from yolo_edge.config import load_deploy_config, load_profile
from yolo_edge.export import demo_model_path, export_model
from yolo_edge.pipeline.preprocess import default_calib_dir, load_calibration
from yolo_edge.plan.checks import cosine
from yolo_edge.plan.placement import PlacementPlan, stage_tensors
from yolo_edge.runtime import EventLog, SplitExecutor, build_stages
from yolo_edge.split import split_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--precision", default="int8", choices=("int8", "bf16"))
    ap.add_argument("--device", default="host-lowp", help="profile whose runtime runs backbone+neck (rk3588: onnxruntime INT8 kernels)")
    ap.add_argument("--imgsz", type=int, default=320, help="the demo model was trained at 320; larger sizes show where INT8 pays")
    args = ap.parse_args()
    cfg = load_deploy_config()
    profile = load_profile(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        split = split_model(export_model(demo_model_path(), imgsz=args.imgsz, out_dir=tmp))
        images = load_calibration(default_calib_dir(), (args.imgsz, args.imgsz), 64)
        tensors = stage_tensors(split, images)
        full = cpu_backend().compile(split.exported.load(), "fp32")
        lowp = {"backbone": args.precision, "neck": args.precision}
        ex = SplitExecutor(build_stages(split, PlacementPlan.manual(split, lowp, profile.name), profile, tensors[:32], EventLog()),
                           cfg.runtime, profile)
        for t in tensors[:10]:  # warm-up
            full.run({"images": t["images"]})
            ex.run({"images": t["images"]})
        cpu_ms, split_ms, cos_box, cos_cls = [], [], [], []
        for i in range(args.frames):  # one engine at a time: interleaving lets one runtime's threads slow the other
            t = tensors[32 + i % 32]
            t0 = time.perf_counter()
            full.run({"images": t["images"]})
            cpu_ms.append((time.perf_counter() - t0) * 1e3)
        for i in range(args.frames):
            t = tensors[32 + i % 32]
            r = ex.run({"images": t["images"]}, i)
            split_ms.append(r.model_ms)
            out = r.outputs["output0"]
            cos_box.append(cosine(out[:, :4], t["output0"][:, :4]))
            cos_cls.append(cosine(out[:, 4:], t["output0"][:, 4:]))
        ex.close()
    c, s = statistics.median(cpu_ms), statistics.median(split_ms)
    print(f"all-CPU FP32 (onnxruntime, monolithic): {c:.2f} ms median over {args.frames} frames")
    print(f"split, backbone+neck {args.precision} on {profile.name} ({profile.runtime}), head+decode FP32 CPU: {s:.2f} ms median (host time)")
    print(f"speed-up (CPU / split): {c / s:.2f}x")
    print(f"output cosine vs FP32: boxes min {min(cos_box):.5f}, class scores min {min(cos_cls):.5f}")


if __name__ == "__main__":
    main()
