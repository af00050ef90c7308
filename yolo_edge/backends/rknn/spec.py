"""Rockchip's spec: its options, what its executables store and its toolchain, rknn-toolkit2 in a pinned environment
(light: the registry reads it at start)."""

from __future__ import annotations

from dataclasses import dataclass

from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.registry import BackendSpec, RuntimeOptions, Toolchain

RKNN_SUFFIX = ".rknn"  # Rockchip's compiled graph, for RKNNLite on the board
# Rockchip's quantizer by its quantization algorithm (rknn-toolkit2's config(quantized_algorithm=...)): "normal"
# (min-max ranges; its model zoo's recipe for YOLOv8), and its two stronger ones, tried where the verdict finds
# normal's drift too large: "mmse" (ranges minimising the mean squared error; slower to quantize) and "kl_divergence"
ALGORITHMS = {"rknn": "normal", "rknn-mmse": "mmse", "rknn-kl": "kl_divergence"}
CORE_MASKS = ("auto", "0", "1", "2", "0_1", "0_1_2", "all")


@dataclass(frozen=True)
class RknnOptions(RuntimeOptions):
    target: str = ""  # the chip the compiler builds for (target_platform), e.g. rk3588; default: the profile's name
    # on the board, with npu_cores 1: the cores the one context runs on (RKNNLite.NPU_CORE_<mask>); with several
    # npu_cores, a stream has one context pinned to each core instead
    core_mask: str = "auto"

    def __post_init__(self) -> None:
        if self.core_mask not in CORE_MASKS:
            raise YoloEdgeError(
                f"runtime_options.core_mask must be one of {', '.join(CORE_MASKS)}, got '{self.core_mask}'"
            )


TOOLCHAIN = Toolchain(
    name="rknn",
    version="2.5.0",
    what="Rockchip rknn-toolkit2: RKNPU2 compiler, INT8 quantizer and simulator (RK3588, RK3576, RK3566, ...)",
    python="3.11",
    steps=(
        (
            "numpy==1.26.4",
            "onnx==1.18.0",
            "protobuf==4.25.4",
            "onnxruntime<1.21",
            "scipy",
            "fast-histogram",
            "ruamel.yaml",
            "psutil",
            "tqdm",
            "opencv-python<4.11",
            "torch==2.4.0",
        ),
        ("rknn-toolkit2==2.5.0",),
    ),
    worker="yolo_edge.backends.rknn.worker",
    size="about 5.6 GB with torch's CUDA libraries",
)

SPEC = BackendSpec(
    "rknn", "yolo_edge.backends.rknn.backend", RknnOptions, (RKNN_SUFFIX,), ("w8a8",), tuple(ALGORITHMS), TOOLCHAIN
)
