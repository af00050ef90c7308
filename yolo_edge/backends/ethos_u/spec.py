"""Arm Ethos-U's spec: its options, what its executables store and its toolchain, Vela with the TFLite converter in a
pinned environment (light: the registry reads it at start)."""

from __future__ import annotations

from dataclasses import dataclass

from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.registry import BackendSpec, RuntimeOptions, Toolchain

# the integer TFLite, Vela's build of it, and which TFLite tensor each ONNX tensor is
TFLITE_SUFFIX, VELA_SUFFIX, TFLITE_IO_SUFFIX = ".tflite", "_vela.tflite", ".tflite.json"


@dataclass(frozen=True)
class EthosUOptions(RuntimeOptions):
    accelerator: str = "ethos-u55-128"  # Vela's --accelerator-config
    vela_config: str = "ethos-u.vela.ini"  # the board's Vela .ini (a shipped one by name, or a path)
    system_config: str = "Ethos_U55_High_End_Embedded"  # a [System_Config.<name>] of it: clocks, AXI ports, latencies
    memory_mode: str = "Shared_Sram"  # a [Memory_Mode.<name>] of it: where the arena, weights and cache live
    int8_activations: str = "auto"  # w8a8 (int8), w8a16 (TFLite's 16x8: int16 activations), or auto (both)
    device: str = "/dev/ethosu0"  # the NPU's driver node: where it exists, this is the board
    delegate: str = "libethosu_delegate.so"  # LiteRT's Ethos-U delegate on the board

    SCHEMES = ("w8a8", "w8a16")
    ACCELERATORS = ("ethos-u55-32", "ethos-u55-64", "ethos-u55-128", "ethos-u55-256", "ethos-u65-256", "ethos-u65-512")

    def __post_init__(self) -> None:
        for what, value, valid in (
            ("int8_activations", self.int8_activations, (*self.SCHEMES, "auto")),
            ("accelerator", self.accelerator, self.ACCELERATORS),
        ):
            if value not in valid:
                raise YoloEdgeError(
                    f"runtime_options.{what} of ethos-u must be one of {', '.join(valid)}, got '{value}'"
                )

    @property
    def int8_schemes(self) -> tuple[str, ...]:
        return self.SCHEMES if self.int8_activations == "auto" else (self.int8_activations,)


TOOLCHAIN = Toolchain(
    name="ethos-u",
    version="5.2.0",
    what="Arm Ethos-U: Vela compiler (U55, U65, U85) with the TFLite converter (onnx2tf, TensorFlow) and LiteRT",
    python="3.11",
    steps=(
        (
            "tensorflow==2.19.1",
            "tf-keras==2.19.0",
            "onnx==1.17.0",
            "onnxruntime==1.18.1",
            "onnx-graphsurgeon==0.6.1",
            "sng4onnx==2.0.1",
            "psutil",
            "ml_dtypes==0.5.1",
            "h5py",
            "flatbuffers",
        ),
        ("onnx2tf==1.28.8", "ethos-u-vela==5.2.0", "ai-edge-litert==2.3.0"),
    ),
    worker="yolo_edge.backends.ethos_u.worker",
    size="about 2.2 GiB with TensorFlow",
)

SPEC = BackendSpec(
    "ethos-u",
    "yolo_edge.backends.ethos_u.backend",
    EthosUOptions,
    (VELA_SUFFIX, TFLITE_IO_SUFFIX, TFLITE_SUFFIX),  # _vela.tflite first: a bundle file takes the first match
    EthosUOptions.SCHEMES,
    ("tflite",),
    TOOLCHAIN,
)
