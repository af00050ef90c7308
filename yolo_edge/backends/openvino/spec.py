"""OpenVINO's spec: its options, schemes, quantizers and what its executables store (light: the registry reads it at
start)."""

from __future__ import annotations

from dataclasses import dataclass

from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.registry import QDQ_SUFFIX, BackendSpec, RuntimeOptions

OV_XML_SUFFIX, OV_BIN_SUFFIX = ".ov.xml", ".ov.bin"  # an OpenVINO IR: NNCF's quantized model


@dataclass(frozen=True)
class OpenVinoOptions(RuntimeOptions):
    device: str = "CPU"  # the OpenVINO device (CPU, GPU, NPU)
    # INT8 activations: u8 (asymmetric), s8 (symmetric) or auto (the planner measures both, tries the faster first
    # and keeps it only if its numerics pass; which one wins, and whether s8 is accurate, depends on the CPU)
    int8_activations: str = "auto"
    # INT8 quantizer: nncf (OpenVINO's own; the shipped profiles' choice), nncf-minmax (NNCF with every activation's
    # range its calibration minimum and maximum, no rare value clipped), qdq (onnxruntime's quantize_static with the
    # Q/DQ placed as NNCF places them), or auto (all are candidates: the precision check and the verdict decide, at
    # three times the planning time; benchmarks/quantizers.py compares them). With one chosen, the others are tried in
    # that order for a subgraph whose every INT8 variant fails the precision check, until one passes
    # (benchmarks/head_int8_scores.py measures how far each moves the class scores, and at what speed)
    int8_quantizer: str = "auto"

    SCHEMES = ("u8", "s8")  # what int8_activations: auto considers, in the order tried when their speeds tie
    QUANTIZERS = ("nncf", "nncf-minmax", "qdq")

    def __post_init__(self) -> None:
        for what, value, valid in (
            ("int8_activations", self.int8_activations, (*self.SCHEMES, "auto")),
            ("int8_quantizer", self.int8_quantizer, (*self.QUANTIZERS, "auto")),
        ):
            if value not in valid:
                raise YoloEdgeError(f"runtime_options.{what} must be one of {', '.join(valid)}, got '{value}'")

    @property
    def int8_schemes(self) -> tuple[str, ...]:
        """The INT8 activation schemes to consider, in the order tried when their speeds tie."""
        return self.SCHEMES if self.int8_activations == "auto" else (self.int8_activations,)

    @property
    def int8_quantizers(self) -> tuple[str, ...]:
        """The INT8 quantizers to consider, the preferred first."""
        return self.QUANTIZERS if self.int8_quantizer == "auto" else (self.int8_quantizer,)

    def stand_in(self) -> str | None:
        if self.device.upper().startswith("CPU"):
            return "npu = OpenVINO's CPU plugin on this host, its low-precision kernels (no NPU)"
        return None


SPEC = BackendSpec(
    "openvino",
    "yolo_edge.backends.openvino.backend",
    OpenVinoOptions,
    (QDQ_SUFFIX, OV_XML_SUFFIX, OV_BIN_SUFFIX),
    OpenVinoOptions.SCHEMES,
    OpenVinoOptions.QUANTIZERS,
)
