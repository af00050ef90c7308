"""Arm's Vela on the demo model's units: modelled time, SRAM and operator placement on an Ethos-U55 and an Ethos-U65,
and the integer TFLite's numerics on LiteRT's reference kernels (the NPU's oracle).

    yolo-edge toolchain install ethos-u            # once
    YOLO_OFFLINE=1 python benchmarks/ethos_u.py [--imgsz 320] [--calib 32] [--eval 8]

Each unit (backbone+neck as deploy fuses it, backbone+neck+head with the head's six raw maps, the decode alone and
the whole model with its one concatenated output) is converted by onnx2tf and TensorFlow Lite's full-integer
quantization on its own FP32 inputs from the first ``--calib`` calibration images (as deploy calibrates), compiled by
Vela for the ``ethos-u55`` and ``ethos-u65`` profiles (their system configs and memory modes), and run on ``--eval``
other images. Printed: Vela's estimate and SRAM use per profile, the operators it places on the NPU and leaves to the
CPU, and the lowest cosine to onnxruntime FP32 over images and outputs (for the whole model, the boxes and class
scores of output0 apart: one int8 scale for pixels and scores rounds every score to zero). Then the same at w8a16
(int16 activations). The CPU is printed first; Vela's figures do not depend on it.
"""

from __future__ import annotations

import numpy as np
import onnx
from rknn_units import demo_units_data

from yolo_edge.backends import cpu_backend
from yolo_edge.backends.base import cosine, io_infos
from yolo_edge.backends.ethos_u.backend import EthosUBackend, TfliteExecutable
from yolo_edge.core.config import Variant, load_profile
from yolo_edge.model.graph import SUBGRAPHS
from yolo_edge.model.split import SplitModel, cut

PROFILES = ("ethos-u55", "ethos-u65")


def units(split: SplitModel) -> dict[str, onnx.ModelProto]:
    """backbone+neck (deploy's fused unit), backbone+neck+head (six raw maps), the decode, the whole model."""
    subgraph_of = split.exported.layout.subgraph_of
    model = split.exported.load()

    def front(parts: tuple[str, ...]) -> onnx.ModelProto:
        inside = [i for i, s in enumerate(subgraph_of) if SUBGRAPHS[s] in parts]
        rest = [i for i, s in enumerate(subgraph_of) if SUBGRAPHS[s] not in parts]
        return cut(model, [inside, rest], "front")[0].model

    return {
        "backbone+neck": front(("backbone", "neck")),
        "backbone+neck+head": front(("backbone", "neck", "head")),
        "decode": split["decode"].model,
        "whole model": model,
    }


def measure(
    name: str,
    model: onnx.ModelProto,
    scheme: str,
    backends: dict[str, EthosUBackend],
    calib: list[dict[str, np.ndarray]],
    evals: list[dict[str, np.ndarray]],
) -> str:
    names = [t.name for t in io_infos(model)[0]]
    first = next(iter(backends.values()))
    data, io = first.convert(model, scheme, [{n: t[n] for n in names} for t in calib])
    cells, ops = [], ""
    for backend in backends.values():
        report, _ = backend.vela(data)
        over = " over" if backend.refusal(report) is not None else ""
        cells.append(f"{report['inference_s'] * 1e3:7.2f} ms {report['sram_kib']:6.0f} KiB{over:5}")
        ops = f"{report['npu_ops']} / {report['cpu_ops']}"
    exe = TfliteExecutable(data, io, model, Variant("int8", scheme, "tflite"), "litert-ref")
    ref = cpu_backend().compile(model, "fp32")
    cos, boxes, scores = [], [], []
    for t in evals:
        feeds = {n: t[n] for n in names}
        want, got = ref.run(feeds), exe.run(feeds)
        for k in want:
            cos.append(cosine(got[k], want[k]))
            if k == "output0":
                boxes.append(cosine(got[k][:, :4], want[k][:, :4]))
                scores.append(cosine(got[k][:, 4:], want[k][:, 4:]))
    extra = f"  boxes {min(boxes):.4f}, class scores {min(scores):.4f}" if boxes else ""
    return f"{name:<20} {scheme:<6} {'  '.join(cells)}  {ops:>9}  {min(cos):10.4f}{extra}"


def main() -> None:
    with demo_units_data(__doc__ or "") as (args, split, calib, evals):
        print("(the CPU computes the numerics only: Vela's figures are modelled for the boards)")
        backends = {name: EthosUBackend(load_profile(name)) for name in PROFILES}
        budgets = ", ".join(f"{n} {load_profile(n).sram_kb:.0f} KiB" for n in PROFILES)
        print(f"demo model {args.imgsz}, {args.calib} calibration images, {args.eval} eval images; SRAM: {budgets}")
        print(f"{'unit':<20} {'scheme':<6} {'ethos-u55 (Vela)':>28}  {'ethos-u65 (Vela)':>28}  NPU / CPU  min cosine")
        try:
            for scheme in ("w8a8", "w8a16"):
                for name, model in units(split).items():
                    print(measure(name, model, scheme, backends, calib, evals), flush=True)
        finally:
            for backend in backends.values():
                backend.close()


if __name__ == "__main__":
    import results_page

    with results_page.page("ethos-u", "Arm Ethos-U units: Vela time, SRAM, cosine"):
        main()
