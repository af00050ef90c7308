"""Model-only latency of the demo model: all-CPU FP32 (onnxruntime, monolithic) vs the split plan with
backbone+neck in low precision on a profile (default host-lowp: OpenVINO's CPU plugin, INT8 on
VNNI/AMX; ``--device rk3588``: onnxruntime's INT8 kernels), the head FP32 on the CPU, run by the SplitExecutor with
its fallback machinery on, and the decode as the detector runs it (candidates first, at conf 0.25; the monolithic
model decodes every anchor in its graph). Prints, per image size and precision, both medians, the
ratio, where the split's time goes, and the output fidelity.

The two run alternately, frame by frame (and in alternating order), so a change in the machine's speed
during the run (these machines are shared) lands on both; the ratio printed is the median of the
per-frame ratios. Ratios are from one run on one machine, whose CPU is printed first: which INT8
scheme is faster, and whether symmetric s8 activations are accurate, differ between CPUs.

    YOLO_OFFLINE=1 python benchmarks/split_vs_cpu.py [--frames 200] [--imgsz 320 640] [--precision int8/u8 int8/s8 bf16]
        [--device host-lowp] [--no-fuse]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import replace

import numpy as np

from yolo_edge.backends import cpu_backend
from yolo_edge.backends.builder import Builder  # noqa: E402
from yolo_edge.core.config import DeviceProfile, Variant, load_deploy_config, load_profile
from yolo_edge.core.host import cpu_name
from yolo_edge.model.decode import HeadOutputs, head_candidates, head_xywh
from yolo_edge.model.export import export_model
from yolo_edge.model.meta import demo_model_path
from yolo_edge.model.split import split_model
from yolo_edge.pipeline.preprocess import default_calib_dir, load_calibration
from yolo_edge.plan.checks import cosine
from yolo_edge.plan.placement import PlacementPlan, boundary_tensors
from yolo_edge.runtime.build import build_units
from yolo_edge.runtime.events import EventLog
from yolo_edge.runtime.executor import SplitExecutor


def measure(imgsz: int, precisions: list[str], profile: DeviceProfile, frames: int, fuse: bool) -> None:
    cfg = load_deploy_config()
    with tempfile.TemporaryDirectory() as tmp:
        split = split_model(export_model(demo_model_path(), imgsz=imgsz, out_dir=tmp))
        tensors = boundary_tensors(split, load_calibration(default_calib_dir(), (imgsz, imgsz), 64))
        full = cpu_backend().compile(split.exported.load(), "fp32")
        output0 = cpu_backend().compile(split["decode"].model, "fp32")  # fidelity: the head's outputs to output0
        names = [t.name for t in output0.inputs]
        for precision in precisions:
            plan = PlacementPlan.manual(split, {"backbone": precision, "neck": precision}, profile.name)
            ex = SplitExecutor(
                build_units(split, plan, Builder(profile), tensors[:32], EventLog(), fuse=fuse), cfg.runtime, profile
            )
            head = HeadOutputs.find({t.name: t.shape for t in ex.outputs}, imgsz)
            assert head is not None
            held_out = tensors[32:]
            for t in held_out[:10]:  # warm-up
                full.run({"images": t["images"]})
                ex.run({"images": t["images"]})
            cpu_ms: list[float] = []
            split_ms: list[float] = []
            parts: dict[str, list[float]] = defaultdict(list)
            outs = []
            for i in range(frames):
                t = held_out[i % len(held_out)]
                for which in ("cpu", "split") if i % 2 else ("split", "cpu"):
                    if which == "cpu":
                        t0 = time.perf_counter()
                        full.run({"images": t["images"]})
                        cpu_ms.append((time.perf_counter() - t0) * 1e3)
                        continue
                    r = ex.run({"images": t["images"]}, i)
                    t0 = time.perf_counter()
                    head_xywh(r.outputs, head, head_candidates(r.outputs, head, cfg.nms.conf, False)[0])
                    decode_ms = (time.perf_counter() - t0) * 1e3
                    split_ms.append(r.model_ms + decode_ms)
                    for s in r.units:
                        parts[f"{s.unit} ({s.device})"].append(s.ms)
                    parts["decode (cpu, candidates first)"].append(decode_ms)
                    outs.append((r.outputs, t["output0"]))
            events = ex.events.summary().total
            ex.close()
            outs = [(output0.run({n: o[n] for n in names})["output0"], ref) for o, ref in outs]  # the ONNX decode
            cos_box = min(
                cosine(o[:, :4], ref[:, :4]) for o, ref in outs
            )  # after the timing: nothing runs between frames
            cos_cls = min(cosine(o[:, 4:], ref[:, 4:]) for o, ref in outs)
            c, sp = statistics.median(cpu_ms), statistics.median(split_ms)
            ratio = statistics.median(np.array(cpu_ms) / np.array(split_ms))
            where = ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in parts.items())
            print(
                f"{imgsz:>5} {precision:>7} {c:9.2f} {sp:9.2f} {ratio:6.2f}x   boxes {cos_box:.5f} scores "
                f"{cos_cls:.5f}   "
                f"p90 ratio {np.percentile(cpu_ms, 90) / np.percentile(split_ms, 90):.2f}x   events {events}"
            )
            print(f"{'':>12} split median ms: {where}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument(
        "--precision",
        nargs="+",
        default=["int8/u8", "int8/s8", "bf16"],
        choices=("int8/u8", "int8/s8", "bf16"),
        help="backbone+neck precision; int8/u8 and int8/s8 name the INT8 activation scheme",
    )
    ap.add_argument(
        "--device",
        default="host-lowp",
        help="profile name or .yaml whose runtime runs backbone+neck (rk3588: onnxruntime INT8 kernels)",
    )
    ap.add_argument("--imgsz", type=int, nargs="+", default=[320, 640], help="the demo model was trained at 320")
    ap.add_argument(
        "--no-fuse",
        action="store_true",
        help="run backbone, neck, head as three units (runtime.fuse_units: false)",
    )
    args = ap.parse_args()
    profile = load_profile(args.device)
    if profile.runtime == "openvino":  # NNCF (the default) or onnxruntime's QDQ recipe, as --precision names them
        profile = replace(profile, runtime_options=replace(profile.runtime_options, int8_quantizer="auto"))
    schemes = profile.runtime_options.int8_schemes if profile.runtime == "openvino" else ("u8",)
    variants = [Variant.parse(p) for p in args.precision]
    precisions = [
        p
        for p, v in zip(args.precision, variants)
        if v.precision in profile.precisions and v.scheme in (None, *schemes)
    ]
    print(f"CPU: {cpu_name()}")
    print(
        f"backbone+neck on {profile.name} ({profile.runtime}), head FP32 on the CPU (onnxruntime), decode candidates "
        "first; "
        f"all-CPU = the monolithic FP32 model on onnxruntime; medians over {args.frames} frames"
    )
    print(
        f"{'imgsz':>5} {'prec':>7} {'all-CPU':>9} {'split':>9} {'ratio':>7}   output cosine vs FP32 (min over frames)"
    )
    for imgsz in args.imgsz:
        measure(imgsz, precisions, profile, args.frames, not args.no_fuse)


if __name__ == "__main__":
    import results_page

    with results_page.page("split-vs-cpu", "Split against all-CPU"):
        main()
