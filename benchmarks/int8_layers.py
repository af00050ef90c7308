"""Where the time of an INT8 YOLOv8 goes on this CPU: ultralytics' one-line OpenVINO INT8 export against
yolo-edge's all-INT8 unit (backbone+neck+head compiled as one OpenVINO graph, ``s8`` and ``u8``, the decode
outside it), the bare networks timed interleaved, then OpenVINO's own per-layer profile of each
(``PERF_COUNT``) summed by layer type and kernel.

It answers one question of issue #37's host goal (yolo-edge <= 0.90x ultralytics' INT8 predict, end to end):
how much of a frame is left to win once both run the same INT8 convolutions. With equal networks, the ratio
cannot go below ultralytics' inference share of its own end to end (``vs_ultralytics_int8.py`` prints it).

    YOLO_OFFLINE=1 python benchmarks/int8_layers.py [--model yolov8s.yaml] [--rounds 30]
"""

from __future__ import annotations

import argparse
import collections
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from side_by_side import interleave  # noqa: E402
from vs_ultralytics_int8 import IMGSZ, ultralytics_int8  # noqa: E402

from tests.second_model import SECOND_CLASSES  # noqa: E402
from yolo_edge.backends.builder import Builder  # noqa: E402
from yolo_edge.core.config import load_deploy_config, load_profile  # noqa: E402
from yolo_edge.core.host import cpu_name  # noqa: E402
from yolo_edge.demo.shapes import write_dataset  # noqa: E402
from yolo_edge.model.export import export_model  # noqa: E402
from yolo_edge.model.split import split_model  # noqa: E402
from yolo_edge.pipeline.preprocess import default_calib_dir, load_calibration  # noqa: E402
from yolo_edge.plan.placement import boundary_tensors  # noqa: E402
from yolo_edge.plan.planner import plan_space  # noqa: E402
from yolo_edge.runtime.build import build_units  # noqa: E402
from yolo_edge.runtime.events import EventLog  # noqa: E402


def our_int8_units(model: str, work: Path) -> dict[str, Path]:
    """yolo-edge's backbone+neck+head as one INT8 unit on host-lowp, per scheme: the stored IR's path."""
    cfg, profile = load_deploy_config(), load_profile("host-lowp")
    split = split_model(export_model(model, imgsz=IMGSZ, out_dir=work / "ours"))
    images = load_calibration(default_calib_dir(), split.exported.meta.imgsz, cfg.calib_images)
    calib = boundary_tensors(split, images)
    space, planner = plan_space(split, profile, cfg, images)
    found: dict[str, Path] = {}
    with Builder(profile) as builder:
        for scheme in ("s8", "u8"):
            plan = next(
                c
                for c in space.candidates()
                if all(s.device == "npu" and s.variant.scheme == scheme for s in c.subgraphs if s.name != "decode")
            )
            (unit,) = build_units(split, plan, builder, calib, EventLog())
            assert unit.npu is not None
            for suffix, data in unit.npu.artifact_files().items():
                (work / f"{scheme}{suffix}").write_bytes(data)
            found[f"yolo-edge {scheme}"] = work / f"{scheme}.ov.xml"
    planner.close()
    return found


def _compiled(path: Path, profile: bool = False) -> Any:
    from yolo_edge.backends.openvino.model import core

    config = {"PERFORMANCE_HINT": "LATENCY", **({"PERF_COUNT": True} if profile else {})}
    return core().compile_model(core().read_model(str(path)), "CPU", config)


def layer_profile(path: Path, runs: int) -> dict[tuple[str, str], float]:
    """Milliseconds per frame by (layer type, kernel), OpenVINO's profile of ``runs`` calls after a warm-up."""
    request = _compiled(path, profile=True).create_infer_request()
    x = np.random.default_rng(0).random((1, 3, IMGSZ, IMGSZ), np.float32)
    for _ in range(5):
        request.infer({0: x})
    spent: collections.Counter[tuple[str, str]] = collections.Counter()
    for _ in range(runs):
        request.infer({0: x})
        for layer in request.profiling_info:
            if layer.status.name == "EXECUTED":
                spent[(layer.node_type, layer.exec_type)] += layer.real_time.total_seconds() * 1e3 / runs
    return dict(spent)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="yolov8s.yaml")
    p.add_argument("--rounds", type=int, default=30)
    args = p.parse_args()
    print(f"CPU: {cpu_name()}")
    work = Path(tempfile.mkdtemp(prefix="int8-layers-"))
    try:
        data_yaml = write_dataset(work / "photos", seed=9, sizes={"val": 32}, classes=SECOND_CLASSES)
        ultralytics_int8(args.model, data_yaml, work)
        graphs = {"ultralytics int8": _xml(work), **our_int8_units(args.model, work)}
        x = np.random.default_rng(0).random((1, 3, IMGSZ, IMGSZ), np.float32)
        paths: dict[str, Callable[[], object]] = {}
        for name, path in graphs.items():
            request = _compiled(path).create_infer_request()
            paths[name] = lambda request=request: request.infer({0: x})
        for _ in range(3):
            timed = interleave(paths, args.rounds)
            print("bare networks, median ms: " + ", ".join(f"{k} {v:.2f}" for k, v in timed.median_ms.items()))
        for name, path in graphs.items():
            spent = layer_profile(path, args.rounds)
            total = sum(spent.values())
            # OpenVINO names a kernel by its input: "I8" for u8, "i8" for s8 (brgconv_avx512_amx_i8 on AMX)
            convs = sum(ms for (kind, kernel), ms in spent.items() if kind == "Convolution" and "i8" in kernel.lower())
            share = f"INT8 convolutions {convs:.2f} ms ({convs / total:.0%})"
            print(f"\n{name}: {total:.2f} ms in OpenVINO's profile, {share}")
            for (kind, kernel), ms in sorted(spent.items(), key=lambda kv: -kv[1])[:8]:
                print(f"  {kind:<14} {kernel:<26} {ms:7.3f} ms")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _xml(work: Path) -> Path:
    (found,) = work.glob("*_int8_openvino_model/*.xml")
    return found


if __name__ == "__main__":
    import results_page

    with results_page.page("int8-layers", "Two INT8 networks, layer by layer"):
        main()
