"""Load to first detection: what a service restart costs before its first frame, against the floor.

For each bundle (default: the demo deployed to ``cpu`` and to ``host-lowp``, and the second model,
``tests/data/coins_sparks_yolov8n.pt``, at 640 on ``host-lowp``, each made in a temp folder), in fresh
processes, alternately:

- **yolo-edge**: ``load_bundle`` + ``detector()`` + the first ``detect`` of ``bus.jpg``;
- **floor**: the same process creating the runtime sessions of the bundle's stored unit files with bare runtime
  calls (onnxruntime for an FP32 or QDQ graph on the CPU; OpenVINO ``compile_model`` for an NNCF IR or a
  precision hint) and running that one letterboxed frame through them.

Each process starts with nothing of either imported: the imports a service restart pays are in the measure
(``import yolo_edge`` loads its public names when first used, so a process that loads a bundle does not import the
planner, deploy or Ray). The ratio is the median of the per-round ratios. Goal: at most 1.3x the floor (issue
#40). What yolo-edge does on top of the floor is the CPU twin of each accelerator unit (its fallback), the
hysteresis' CPU estimate and the accelerator's warm-up (3 calls), the letterbox and NMS; what it no longer does:
re-split the model, re-run FP32 calibration, re-quantize.

yolo-edge's modules are byte-compiled first, as ``pip install`` leaves an installed package: a checkout run with
``PYTHONDONTWRITEBYTECODE=1`` (or from a read-only folder) would otherwise compile every module's source in every
child, about 50 ms that a service never pays and the floor's site-packages do not pay either.

    YOLO_OFFLINE=1 python benchmarks/load_time.py [--rounds 7] [--bundle PATH ...] [--keep DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def bus_image() -> Path:
    """ultralytics' bus.jpg, found without importing ultralytics (the children time their imports)."""
    spec = importlib.util.find_spec("ultralytics")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent / "assets" / "bus.jpg"


def child(mode: str, bundle: Path) -> float:
    """Seconds from an interpreter that has imported nothing of either to the first frame's result, as ``mode`` does
    it: the imports a service restart pays are in the measure."""
    t0 = time.perf_counter()
    if mode == "yolo-edge":
        import cv2

        import yolo_edge

        image = cv2.imread(str(bus_image()))
        detector = yolo_edge.load_bundle(bundle).detector()
        detector.detect(image)
        return time.perf_counter() - t0
    import cv2
    import numpy as np
    import onnxruntime as ort
    import openvino as ov

    image = cv2.imread(str(bus_image()))
    units = json.loads((bundle / "units.json").read_text())
    profile = (bundle / "profile.yaml").read_text()
    meta = json.loads((bundle / "meta.json").read_text())
    tensors = {"images": _letterbox(image, tuple(meta["model"]["imgsz"]))}
    core = ov.Core()
    for unit in units:
        name = "+".join(unit["subgraphs"]) + ("" if unit["piece"] is None else f".{unit['piece']}")
        graph = (bundle / unit["graph"]).read_bytes()
        xml, qdq = bundle / "units" / f"{name}.ov.xml", bundle / "units" / f"{name}.int8.onnx"
        if unit["device"] == "npu" and "runtime: openvino" in profile:
            if xml.is_file():
                model = core.read_model(str(xml))
            else:
                model = core.read_model(qdq.read_bytes() if qdq.is_file() else graph)
            hint = {"bf16": "bf16", "fp16": "f16"}.get(unit["variant"], "f32")
            compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": hint})
            request = compiled.create_infer_request()
            names = [i.get_any_name() for i in compiled.inputs]
            request.infer({n: tensors[n] for n in names})
            tensors.update({o.get_any_name(): np.array(request.get_tensor(o).data) for o in compiled.outputs})
        else:
            session = ort.InferenceSession(graph, providers=["CPUExecutionProvider"])
            names = [i.name for i in session.get_inputs()]
            outs = session.run(None, {n: tensors[n] for n in names})
            tensors.update(zip((o.name for o in session.get_outputs()), outs))
    return time.perf_counter() - t0


def _letterbox(image: Any, imgsz: tuple[int, int]) -> Any:
    """The floor's own letterbox (OpenCV and numpy, nothing of yolo-edge imported): resize keeping the aspect ratio,
    pad with 114, BGR HWC uint8 -> RGB NCHW float32 in [0, 1]."""
    import cv2
    import numpy as np

    h, w = image.shape[:2]
    r = min(imgsz[0] / h, imgsz[1] / w)
    new_w, new_h = round(w * r), round(h * r)
    top, left = (imgsz[0] - new_h) // 2, (imgsz[1] - new_w) // 2
    resized = cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    bottom, right = imgsz[0] - new_h - top, imgsz[1] - new_w - left
    padded = cv2.copyMakeBorder(resized, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(114, 114, 114))
    return np.ascontiguousarray(padded[..., ::-1].transpose(2, 0, 1)[None], dtype=np.float32) / np.float32(255)


def measure(bundle: Path, rounds: int) -> dict[str, float]:
    times: dict[str, list[float]] = {"yolo-edge": [], "floor": []}
    ratios = []
    for r in range(rounds):
        got = {}
        for mode in ("yolo-edge", "floor") if r % 2 == 0 else ("floor", "yolo-edge"):
            out = subprocess.run(
                [sys.executable, __file__, "--child", mode, str(bundle)], capture_output=True, text=True, check=True
            )
            got[mode] = float(out.stdout.strip().splitlines()[-1])
            times[mode].append(got[mode])
        ratios.append(got["yolo-edge"] / got["floor"])
    return {
        "yolo_edge_s": statistics.median(times["yolo-edge"]),
        "floor_s": statistics.median(times["floor"]),
        "ratio": statistics.median(ratios),
    }


def deploy_defaults(tmp: Path) -> list[Path]:
    from yolo_edge.flows.deploy import DeployRequest, deploy
    from yolo_edge.pipeline.preprocess import default_calib_dir

    images = tmp / "images"  # agreement data for the second model: images the calibration does not use
    images.mkdir(exist_ok=True)
    for p in sorted(default_calib_dir().glob("*.jpg"))[40:]:
        (images / p.name).write_bytes(p.read_bytes())
    second = HERE.parent / "tests" / "data" / "coins_sparks_yolov8n.pt"
    made = []
    for name, kwargs in (  # deployed once into ``tmp`` (kept there with --keep)
        ("demo-cpu", {"device": "cpu"}),
        ("demo-host-lowp", {"device": "host-lowp"}),
        ("second-640-host-lowp", {"device": "host-lowp", "model": second, "imgsz": 640, "data": images}),
    ):
        out = tmp / name
        made.append(out if (out / "units.json").is_file() else deploy(DeployRequest(**kwargs), out, quiet=True).bundle)  # type: ignore[arg-type]
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--keep", type=Path, default=None, help="deploy the default bundles here and keep them")
    parser.add_argument("--bundle", nargs="*", type=Path, help="bundles to measure (default: deploy three)")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "BUNDLE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(child(args.child[0], Path(args.child[1])))
        return
    import compileall

    import yolo_edge
    from yolo_edge.core.host import cpu_name

    compileall.compile_dir(Path(yolo_edge.__file__).parent, quiet=1)  # as pip install does
    print(f"host_cpu: {cpu_name()}")
    with tempfile.TemporaryDirectory(prefix="yolo-edge-load-") as tmp:
        where = args.keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        bundles = args.bundle or deploy_defaults(where)
        print("| bundle | deployed | units | yolo-edge s | floor s | ratio | goal <= 1.3x |")
        print("|---|---|---|---|---|---|---|")
        for bundle in bundles:
            meta = json.loads((bundle / "meta.json").read_text())
            units = json.loads((bundle / "units.json").read_text())
            shown = ", ".join(f"{'+'.join(u['subgraphs'])}={u['device']}/{u['variant']}" for u in units)
            m = measure(bundle, args.rounds)
            print(
                f"| {bundle.name} ({meta['device']}) | {meta['chosen_plan']} | {shown} | {m['yolo_edge_s']:.3f} | "
                f"{m['floor_s']:.3f} | {m['ratio']:.2f}x | {'met' if m['ratio'] <= 1.3 else 'not met'} |"
            )


if __name__ == "__main__":
    import results_page

    with results_page.page("load-time", "Load to first detection"):
        main()
