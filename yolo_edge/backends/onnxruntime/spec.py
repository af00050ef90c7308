"""onnxruntime's spec: its options and what its executables store (light: the registry reads it at start)."""

from __future__ import annotations

from dataclasses import dataclass

from yolo_edge.core.registry import QDQ_SUFFIX, BackendSpec, RuntimeOptions


@dataclass(frozen=True)
class OnnxRuntimeOptions(RuntimeOptions):
    providers: tuple[str, ...] = ()  # onnxruntime execution providers, in priority order (none: the CPU's)


SPEC = BackendSpec(
    "onnxruntime", "yolo_edge.backends.onnxruntime.backend", OnnxRuntimeOptions, (QDQ_SUFFIX,), ("u8",), ("qdq",)
)
