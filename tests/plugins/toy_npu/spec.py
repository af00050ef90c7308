"""What the entry point names: the toy backend's spec (imports nothing heavy: the registry reads it at start)."""

from __future__ import annotations

from dataclasses import dataclass

from yolo_edge.core.registry import QDQ_SUFFIX, BackendSpec, RuntimeOptions


@dataclass(frozen=True)
class ToyOptions(RuntimeOptions):
    threads: int = 0  # the toy's own option (0: the runtime's default), parsed with the strict checks of any other


SPEC = BackendSpec("toy-npu", "toy_npu.backend", ToyOptions, (QDQ_SUFFIX,), ("u8",), ("qdq",))
