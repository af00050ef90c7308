"""What ``benchmarks/run_all.py`` measures is what it says it measures (no timings asserted here): its GEMM
models compute the product at each precision, its synthetic decode output looks like a trained detector's
and both post-processing paths find the same detections on it, its interleaving rotates the paths."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import limits  # noqa: E402
import side_by_side  # noqa: E402

from yolo_edge.backends import cpu_backend  # noqa: E402
from yolo_edge.plan.checks import cosine  # noqa: E402


@pytest.mark.parametrize("conv", [False, True])
def test_gemm_models_compute_the_product(conv: bool) -> None:
    model, x, flops = limits._gemm_model(False, conv)
    weight = next(t for t in model.graph.initializer if t.name == "w")
    from onnx import numpy_helper

    w = numpy_helper.to_array(weight)
    got = cpu_backend().compile(model, "fp32").run({"a": x})["y"]
    ref = np.einsum("oc,bchw->bohw", w[:, :, 0, 0], x) if conv else x @ w
    assert np.allclose(got, ref, rtol=1e-3, atol=1e-2)
    assert flops == 2 * ref.size * (w.shape[1] if conv else x.shape[1])  # one MAC per weight per output
    quantized, xq, _ = limits._gemm_model(True, conv)
    assert cosine(cpu_backend().compile(quantized, "int8").run({"a": xq})["y"], ref) > 0.99


def test_synthetic_output_is_like_a_trained_detectors() -> None:
    import torch
    from ultralytics.utils.nms import non_max_suppression

    from yolo_edge.core.config import NmsConfig
    from yolo_edge.pipeline.postprocess import postprocess
    from yolo_edge.pipeline.preprocess import Letterboxed

    out = side_by_side.synthetic_output()
    scores = out[0, 4:]
    assert out.shape == (1, 84, 8400) and np.array_equal(out, side_by_side.synthetic_output())  # seeded
    assert 100 <= int((scores.max(0) > 0.25).sum()) <= 2000  # a few hundred candidates at the predictor's conf
    assert 1000 <= int((scores > 0.001).sum()) <= 30000  # thousands at the validator's, under max_nms
    identity = Letterboxed(np.zeros((1, 3, 640, 640), np.float32), (640, 640), (1.0, 1.0), (0, 0))
    names = tuple(str(i) for i in range(80))
    for conf, multi in ((0.25, False), (0.001, True)):
        ours = postprocess({"output0": out}, identity, names, NmsConfig(conf, 0.7, 300, multi))
        ref = non_max_suppression(torch.from_numpy(out), conf, 0.7, multi_label=multi, max_det=300)[0].numpy()
        assert len(ours) == len(ref) > 10
        assert np.abs(np.sort(ours.confidence) - np.sort(ref[:, 4])).max() < 1e-6


def test_interleave_rotates_and_takes_ratios_per_round() -> None:
    order: list[str] = []
    paths = {name: (lambda name=name: order.append(name)) for name in ("a", "b", "c")}
    timed = side_by_side.interleave(paths, rounds=3, block=2)
    runs = [order[i] for i in range(0, len(order), 3)]  # each path: one untimed call, then 2 timed, in a row
    assert runs == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert timed.ratio["a"] == 1.0 and set(timed.median_ms) == {"a", "b", "c"} and timed.rounds == 3
