"""ONNX Runtime's own partition against yolo-edge's plan, on a Qualcomm profile (default qcs6490).

ONNX Runtime's: the whole model in Qualcomm's QDQ form (ONNX Runtime's QNN recipe, w8a8, calibrated on the
shipped images), one session on the QNN EP with CPU fallback left to ONNX Runtime: every node Qualcomm's
validation takes runs on the HTP simulator, the rest on the CPU. yolo-edge's: ``deploy`` on the same profile
(the shipped config with fewer images, as the README's Qualcomm table). For each: which nodes run where, how
many CPU<->NPU boundaries a frame crosses, the modelled latency on the board (NPU pieces by the profile's cost
model, CPU pieces by its CPU model, each boundary over its link) and the drift in agreement with the FP32
reference on the same images.

    YOLO_OFFLINE=1 python benchmarks/qnn_partition.py [--device qcs6490] [--images 16]
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import onnx

from yolo_edge.backends.builder import Builder  # noqa: E402
from yolo_edge.backends.qnn.backend import QnnExecutable, backend_for, htp_session, quantize_qnn
from yolo_edge.bundle import load_bundle
from yolo_edge.core.config import DeviceProfile, Variant, load_deploy_config, load_profile
from yolo_edge.core.host import cpu_name
from yolo_edge.core.progress import progress_bar
from yolo_edge.data.resolve import resolve_eval_data
from yolo_edge.devices.cost import cpu_time, npu_time, transfer_time
from yolo_edge.flows.deploy import DeployRequest, deploy
from yolo_edge.model.graph import SUBGRAPHS, GraphInfo
from yolo_edge.model.split import cut, split_model
from yolo_edge.pipeline.detector import Detector
from yolo_edge.pipeline.preprocess import default_calib_dir
from yolo_edge.runtime.build import UnitFeeds, UnitPlan, UnitSources, compile_units
from yolo_edge.runtime.events import EventLog
from yolo_edge.runtime.executor import SplitExecutor
from yolo_edge.validate.accuracy import Scorer, detect_all


def cpu_nodes(log: str) -> set[str]:
    """The nodes ONNX Runtime placed on the CPU, from its verbose session log (``  OpType (name)`` lines)."""
    found: set[str] = set()
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if "placed on [CPUExecutionProvider]" in line:
            for follow in lines[i + 1 :]:
                m = re.search(r"^\s+\S+ \((.*)\)\s*$", follow)
                if m is None:
                    break
                found.add(m.group(1))
    return found


def modelled(model: onnx.ModelProto, on_cpu: set[str], profile: DeviceProfile) -> tuple[float, int]:
    """Board latency (ms) of ``model`` run as its nodes are placed, and the boundaries a frame crosses."""
    nodes = list(model.graph.node)
    runs: list[tuple[str, list[int]]] = []
    for i, node in enumerate(nodes):
        dev = "cpu" if node.name in on_cpu else "npu"
        if runs and runs[-1][0] == dev:
            runs[-1][1].append(i)
        else:
            runs.append((dev, [i]))
    pieces = cut(model, [g for _, g in runs], "whole")
    total = 0.0
    info = GraphInfo.of(model)
    assert profile.cpu is not None
    for (dev, _), piece in zip(runs, pieces):
        g = GraphInfo.of(piece.model)
        npu = dev == "npu"
        total += npu_time(g, profile, "int8", scheme="w8a8").total_s if npu else cpu_time(g, profile.cpu).total_s
    for k in range(1, len(pieces)):  # each tensor entering a piece from the other device, at INT8 width
        for name in pieces[k].inputs:
            if name not in info.initializers:
                total += transfer_time(info.tensor(name).bytes // 4, profile.link)
    return total * 1e3, len(runs) - 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="qcs6490")
    ap.add_argument("--images", type=int, default=16)
    ap.add_argument("--bundle", type=Path, default=None, help="a bundle deployed to the device (default: deploy one)")
    args = ap.parse_args()
    profile = load_profile(args.device)
    cfg = load_deploy_config()
    checks = replace(cfg.checks, precision=replace(cfg.checks.precision, images=4))
    timing = replace(cfg.validate, latency_warmup=2, latency_runs=12)
    cfg = replace(cfg, calib_images=12, checks=checks, validate=timing)
    print(f"host_cpu: {cpu_name()}; device {profile.name}; latency modelled for the board")
    bar = progress_bar(False)
    with tempfile.TemporaryDirectory() as tmp:
        photos = Path(tmp, "photos")
        photos.mkdir()
        for p in sorted(default_calib_dir().glob("*.jpg"))[40 : 40 + args.images]:
            shutil.copy(p, photos)
        made = (
            args.bundle
            or deploy(
                DeployRequest(device=profile.name, data=photos, config=cfg), out=Path(tmp, "b"), quiet=True
            ).bundle
        )
        bundle = load_bundle(made)
        split = split_model(bundle.exported)
        model = bundle.exported.load()
        calib = [{"images": x} for x in bundle.calibration()]
        qdq, options = quantize_qnn(model, calib, "w8a8").SerializeToString(), backend_for(profile).options
        log = htp_session(qdq, options, True, verbose=True)[1]  # what ONNX Runtime placed where
        session = htp_session(qdq, options, True)[0]  # the same partition, quiet at run time
        on_cpu = cpu_nodes(log) & {n.name for n in model.graph.node}
        ort_ms, ort_boundaries = modelled(model, on_cpu, profile)
        variant = Variant("int8", "w8a8", "qnn")
        whole = UnitPlan(SUBGRAPHS, model, "cpu", Variant("fp32"))  # its CPU twin; the HTP session set below
        units = compile_units(
            [whole], UnitSources(UnitFeeds([]), dict(calib[0]), lambda _n: model), Builder(None), EventLog()
        )
        units[0].npu = QnnExecutable(session, model, variant, b"")
        ev = resolve_eval_data(photos, bundle.meta.model.names)
        with bundle.reference_detector() as reference, bundle.detector() as deployed:
            ref = detect_all(reference, ev.dataset, cfg.val_nms, bar, "reference")
            ours = detect_all(deployed, ev.dataset, cfg.val_nms, bar, "yolo-edge")
        events = EventLog()
        slow = replace(cfg.runtime, unit_timeout_s=600.0)  # the simulator's whole-model call takes seconds
        with Detector(SplitExecutor(units, slow, profile, events), bundle.meta.model, cfg.nms) as ort_detector:
            theirs = detect_all(ort_detector, ev.dataset, cfg.val_nms, bar, "onnxruntime")
        assert not events.events, f"ONNX Runtime's partition fell back to the CPU: {events.summary()}"
        scorer = Scorer(ev, ref, cfg.validate, cfg.nms)
        base = scorer.score(ref)
        plan = bundle.plan
        placed = [plan[sg.name].device for sg in split.subgraphs]
        our_npu = sum(sg.nodes for sg in split.subgraphs if plan[sg.name].device == "npu")
        n_nodes = sum(sg.nodes for sg in split.subgraphs)
        rows = [
            ("ONNX Runtime's (QNN EP, CPU fallback)", n_nodes - len(on_cpu), ort_boundaries, ort_ms, theirs),
            (
                f"yolo-edge's ({plan.label})",
                our_npu,
                sum(a != b for a, b in zip(placed, placed[1:])),
                plan.estimated_ms,
                ours,
            ),
        ]
        print("| partition | nodes NPU / CPU | boundaries | modelled model ms | drift agreement50 / 50-95 |")
        print("|---|---|---|---|---|")
        for name, npu_nodes, boundaries, ms, dets in rows:
            drift = scorer.score(dets).minus(base).map
            print(
                f"| {name} | {npu_nodes} / {n_nodes - npu_nodes} | {boundaries} | {ms:.2f} | "
                f"{drift.map50:+.4f} / {drift.map50_95:+.4f} |"
            )


if __name__ == "__main__":
    import results_page

    with results_page.page("qnn-partition", "Against ONNX Runtime's own QNN partition"):
        main()
