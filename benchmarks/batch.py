"""Batch, sized by memory and run (issue 68): the design document's case, batched throughput on the host, identity.

1. **The design document's case** ("input batch size = 32, the intermediate activations exceed the NPU's largest
   allocation"): the demo (320) with backbone and neck INT8 on a simulated RK3588 (onnxruntime's INT8 numerics) whose
   memory budget is cut to hold 5 frames a call of its units with a context per NPU core, as the planner counts them;
   a stream of the 64 shipped calibration images asked for batch 32. Prints the frames read and delivered, the memory
   events, the accelerator calls by frames a call, and the frames the CPU ran for a failure (goal: every frame, 0 CPU
   fallbacks, one memory event with the batch chosen).
2. **Batched throughput on `host-lowp`** (OpenVINO's INT8 on this CPU): the accelerator unit (backbone, neck and head
   INT8, one unit) of the demo at 320 and of YOLOv8n at 640 (from its yaml: speed needs no trained weights) at batch
   B in {2, 4, 8} against batch 1, in rounds (a round: B calls at batch 1, then one at batch B, so that load slows both
   alike). Prints each round's ratio (frames a second at B over batch 1) and whether the batch pays in every round,
   the rule ``run --batch`` applies (``runtime.build.batch_pays``, with 5 rounds).
3. **Identity**: each frame of a batched call against its batch-1 call, on 8 real images: the largest difference.

    YOLO_OFFLINE=1 python benchmarks/batch.py [--rounds 10] [--batches 2 4 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from yolo_edge.backends.builder import Builder
from yolo_edge.backends.onnxruntime.backend import OnnxRuntimeBackend
from yolo_edge.backends.simulated import SimulatedNpu
from yolo_edge.core.config import load_deploy_config, load_profile
from yolo_edge.core.host import cpu_name
from yolo_edge.devices.limits import Residency, memory_use
from yolo_edge.model.export import export_model
from yolo_edge.model.graph import GraphInfo
from yolo_edge.model.meta import demo_model_path
from yolo_edge.model.split import SplitModel, split_model
from yolo_edge.pipeline.detector import Detector
from yolo_edge.pipeline.engine import StreamRunner
from yolo_edge.pipeline.preprocess import default_calib_dir, load_calibration
from yolo_edge.pipeline.sources import parse_source
from yolo_edge.plan.placement import PlacementPlan, boundary_tensors
from yolo_edge.runtime.build import batch_units, build_units, pay_rounds, row_difference
from yolo_edge.runtime.events import EventLog
from yolo_edge.runtime.executor import SplitExecutor
from yolo_edge.runtime.units import Unit

Tensors = dict[str, np.ndarray]


def sim_units(
    split: SplitModel, tensors: list[Tensors], memory_mb: float | None
) -> tuple[list[Unit], Builder, EventLog]:
    """Backbone and neck INT8 on a simulated RK3588 with onnxruntime's numerics (``memory_mb``: its budget cut)."""
    profile = load_profile("rk3588")
    profile = profile if memory_mb is None else replace(profile, memory_mb=memory_mb)
    builder = Builder(profile, SimulatedNpu(profile, OnnxRuntimeBackend()))
    plan = PlacementPlan.manual(split, {"backbone": "int8", "neck": "int8"}, "rk3588")
    events = EventLog()
    return build_units(split, plan, builder, tensors[:8], events), builder, events


def budget_for(units: list[Unit], builder: Builder, frames: float) -> float:
    """The budget (MiB) at which ``frames`` frames a call of ``units`` fit, a context per NPU core, as planned."""
    profile = builder.profile
    assert profile is not None
    held = Residency(1, profile.npu_cores, builder.npu.memory)
    uses = [
        memory_use(GraphInfo.of(u.graph), u.npu.precision, u.npu.variant.scheme, held)
        for u in units
        if u.npu is not None and u.graph is not None
    ]
    fixed = sum(u.dram_at(0) for u in uses)
    return (fixed + frames * (sum(u.dram_at(1) for u in uses) - fixed)) / 2**20


def design_case(split: SplitModel, tensors: list[Tensors]) -> None:
    print("### 1. Batch 32 asked, a budget that holds 5 frames a call (simulated RK3588)\n")
    probe, builder, _ = sim_units(split, tensors, None)
    budget = budget_for(probe, builder, 5.5)
    builder.close()
    units, builder, events = sim_units(split, tensors, budget)
    chosen = batch_units(units, builder, 32, events)
    executor = SplitExecutor(units, load_deploy_config().runtime, builder.profile, events)
    detector = Detector(executor, split.exported.meta, load_deploy_config().nms)
    with detector, StreamRunner(detector, [parse_source(str(default_calib_dir()))]) as runner:
        delivered = sum(1 for _ in runner)
        read = sum(s.read for s in runner.stats)
    builder.close()
    memory = [e for e in events.events if e.trigger == "memory"]
    cpu = [e for e in events.events if e.action == "retry_cpu"]
    calls = ", ".join(f"{n} of {b}" for b, n in sorted(executor.batch_calls.items(), reverse=True))
    print(f"- budget {budget:.1f} MiB; batch asked {chosen.asked}, run at {chosen.runs_at}")
    print(f"- frames read {read}, delivered {delivered}; frames the CPU ran for a failure: {len(cpu)}")
    print(f"- accelerator calls by frames a call: {calls}")
    for e in memory:
        print(f"- memory event ({e.action}): {e.detail}")
    met = delivered == read == 64 and not cpu and len(memory) == 1 and chosen.runs_at == 5
    print(
        f"\nGoal (every frame, 0 CPU fallbacks, one memory event with the batch chosen): {'met' if met else 'NOT met'}"
    )


def host_unit(split: SplitModel, tensors: list[Tensors]) -> tuple[Unit, Builder]:
    """Backbone, neck and head INT8 on host-lowp (OpenVINO): the one accelerator unit, and its builder."""
    builder = Builder(load_profile("host-lowp"))
    plan = PlacementPlan.manual(split, {"backbone": "int8", "neck": "int8", "head": "int8"}, "host-lowp")
    units = build_units(split, plan, builder, tensors[:8], EventLog())
    return next(u for u in units if u.npu is not None), builder


def throughput(name: str, split: SplitModel, tensors: list[Tensors], batches: list[int], rounds: int) -> None:
    unit, builder = host_unit(split, tensors)
    npu = unit.npu
    assert npu is not None and unit.graph is not None
    print(f"#### {name}: unit {unit.name} at {npu.variant.label} on OpenVINO\n")
    print("| batch | rounds | ratio min | median | max | pays in every round | largest difference from batch 1 |")
    print("|---|---|---|---|---|---|---|")
    row = {n: tensors[0][n] for n in unit.input_names}
    for b in batches:
        batched = builder.compile(unit.graph, npu.variant, None, npu.artifact_files(), b)
        ratios = pay_rounds(npu, batched, row, rounds)
        diff = row_difference(unit, batched, tensors[8 : 8 + b])
        print(
            f"| {b} | {rounds} | {min(ratios):.2f}x | {statistics.median(ratios):.2f}x | {max(ratios):.2f}x "
            f"| {'yes' if min(ratios) >= 1.0 else 'no'} | {diff:.1e} of the output's range |"
        )
    print()
    builder.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batches", type=int, nargs="+", default=[2, 4, 8])
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores\n")
    with tempfile.TemporaryDirectory() as tmp:
        models = [
            (str(demo_model_path()), 320, "the demo @320"),
            ("yolov8n.yaml", 640, "YOLOv8n @640 (random weights)"),
        ]
        for i, (model, size, name) in enumerate(models):
            split = split_model(export_model(model, imgsz=size, out_dir=Path(tmp) / str(i)))
            tensors = boundary_tensors(split, load_calibration(default_calib_dir(), split.exported.meta.imgsz, 16))
            if i == 0:
                design_case(split, tensors)
                print("\n### 2. Batched throughput and identity on host-lowp (OpenVINO INT8, measured)\n")
            throughput(name, split, tensors, args.batches, args.rounds)
    return 0


if __name__ == "__main__":
    import results_page

    with results_page.page("batch", "Batch: sized by memory, run, and whether it pays"):
        code = main()
    raise SystemExit(code)
