"""Qualcomm's spec: its options, schemes and what its executables store (light: the registry reads it at start)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from yolo_edge.core.bounds import Range
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.registry import BackendSpec, RuntimeOptions

QNN_SUFFIX = ".qnn.onnx"  # Qualcomm's HTP: an EPContext model, its context binary embedded


@dataclass(frozen=True)
class QnnOptions(RuntimeOptions):
    htp_arch: str = ""  # the Hexagon NPU's architecture, as the QNN EP's htp_arch option names it (68, 73)
    vtcm_mb: Annotated[int, Range(0)] = 0  # its VTCM (the NPU's tightly coupled memory), in MB
    int8_activations: str = "auto"  # w8a8 (uint8), w8a16 (uint16 activations), or auto (both are candidates)

    SCHEMES = ("w8a8", "w8a16")

    def __post_init__(self) -> None:
        if self.int8_activations not in (*self.SCHEMES, "auto"):
            raise YoloEdgeError(
                f"runtime_options.int8_activations of qnn must be one of {', '.join(self.SCHEMES)}, auto; got "
                f"'{self.int8_activations}'"
            )

    @property
    def int8_schemes(self) -> tuple[str, ...]:
        return self.SCHEMES if self.int8_activations == "auto" else (self.int8_activations,)


SPEC = BackendSpec("qnn", "yolo_edge.backends.qnn.backend", QnnOptions, (QNN_SUFFIX,), QnnOptions.SCHEMES, ("qnn",))
