"""The model as yolo-edge reads it, without the exporter: its metadata (:class:`ModelMeta`: classes, strides, input
size, where it came from), an ONNX file on disk validated as a YOLOv8 detector (:func:`load_onnx`), the input size
parsed, the shipped demo. A board that runs a bundle imports this, never ``yolo_edge.model.export`` (torch,
ultralytics).
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import json_loads, printable
from yolo_edge.model.graph import DetectLayout, GraphInfo, control_flow, yolov8_layout

ImgSize = tuple[int, int]  # (height, width)

MAX_IMGSZ = 4096  # per side
META_KEY = "yolo_edge"  # the ONNX metadata entry export_model writes ModelMeta to
TASK_NAMES = {"segment": "segmentation", "pose": "pose", "classify": "classification", "obb": "oriented-box (OBB)"}


def parse_imgsz(value: int | str | Sequence[int]) -> ImgSize:
    """``640`` or ``"640"`` -> (640, 640); ``"384,640"`` or ``(384, 640)`` -> (384, 640) as (height, width).

    Both sides must be positive multiples of 32 (YOLOv8's largest stride), at most ``MAX_IMGSZ``.
    """
    if isinstance(value, str):
        try:
            parts = [int(p) for p in value.replace("x", ",").split(",") if p.strip()]
        except ValueError:
            raise YoloEdgeError(f"imgsz '{value}' is not a number; use e.g. 640 or 384,640 (height,width)") from None
    elif isinstance(value, int):
        parts = [value]
    else:
        parts = [int(v) for v in value]
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or any(p <= 0 or p % 32 for p in parts):
        raise YoloEdgeError(
            f"imgsz {value} is not valid: each side must be a positive multiple of 32 (e.g. 320, 640, 384,640)"
        )
    if max(parts) > MAX_IMGSZ:
        raise YoloEdgeError(
            f"imgsz {value} is too large: at most {MAX_IMGSZ} per side (a YOLOv8n at that size already needs "
            "about 10 GB of activations)"
        )
    return parts[0], parts[1]


@dataclass(frozen=True)
class ModelMeta:
    """What the pipeline must know about an exported detector."""

    names: tuple[str, ...]
    strides: tuple[int, ...]
    imgsz: ImgSize
    reg_max: int
    source: str
    source_sha256: str

    @property
    def nc(self) -> int:
        return len(self.names)

    @property
    def random_weights(self) -> bool:
        """Built from an ultralytics model yaml: fine for shapes and speed, no evidence on precision."""
        return self.source.lower().endswith((".yaml", ".yml"))

    def to_dict(self) -> dict[str, object]:
        return {
            "names": list(self.names),
            "nc": self.nc,
            "strides": list(self.strides),
            "imgsz": list(self.imgsz),
            "reg_max": self.reg_max,
            "source": self.source,
            "source_sha256": self.source_sha256,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelMeta:
        """What ``to_dict`` wrote (meta.json, the ONNX's metadata: untrusted); raises KeyError/TypeError/ValueError."""
        return cls(
            names=tuple(printable(str(n)) for n in d["names"]),
            strides=tuple(int(s) for s in d["strides"]),
            imgsz=(int(d["imgsz"][0]), int(d["imgsz"][1])),
            reg_max=int(d["reg_max"]),
            source=str(d["source"]),
            source_sha256=str(d["source_sha256"]),
        )


@dataclass(frozen=True)
class ExportedModel:
    """A validated YOLOv8 detect ONNX on disk, with its metadata and subgraph layout."""

    path: Path
    meta: ModelMeta
    layout: DetectLayout

    def load(self) -> onnx.ModelProto:
        return onnx.load(str(self.path))


DEMO_WEIGHTS = "demo_yolov8n_shapes.pt"


def demo_model_path() -> Path:
    """The shipped demo detector: YOLOv8n trained on the synthetic shapes set (see assets/MODEL_CARD.md)."""
    from importlib import resources

    return Path(str(resources.files("yolo_edge") / "assets" / DEMO_WEIGHTS))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _names_from_props(props: dict[str, str], nc: int) -> tuple[str, ...]:
    raw = props.get("names")
    if raw:
        try:
            parsed = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            parsed = None
        if isinstance(parsed, dict) and len(parsed) == nc:
            return tuple(printable(str(parsed[k])) for k in sorted(parsed))
    return tuple(str(i) for i in range(nc))


def load_onnx(path: str | Path) -> ExportedModel:
    """Read and validate a YOLOv8 detect ONNX (one exported by ultralytics or by :func:`export_model`)."""
    path = Path(path)
    if not path.is_file():
        raise YoloEdgeError(f"model not found: {path}; pass a .pt checkpoint, a model .yaml or an ultralytics ONNX")
    try:
        model = onnx.load(str(path))
    except Exception as exc:  # onnx raises DecodeError, google.protobuf errors, OSError...
        raise YoloEdgeError(f"{path} is not a readable ONNX file ({type(exc).__name__}); re-export it") from None
    props = {p.key: p.value for p in model.metadata_props}
    task = props.get("task", "detect")
    if task != "detect":
        raise YoloEdgeError(
            f"{path} is a {TASK_NAMES.get(task, task)} model; yolo-edge deploys YOLOv8 detection models only"
        )
    loops = control_flow(model)
    if loops:  # a YOLOv8 export has none; a tampered model.onnx's Loop would never finish a frame
        raise YoloEdgeError(f"{path} holds control flow ({', '.join(loops)}), which no YOLOv8 detect export has")
    info = GraphInfo.of(model)
    layout = yolov8_layout(info)
    if META_KEY in props:
        meta = ModelMeta.from_dict(json_loads(props[META_KEY]))
    else:
        meta = ModelMeta(
            names=_names_from_props(props, layout.nc),
            strides=layout.strides,
            imgsz=layout.imgsz,
            reg_max=layout.reg_max,
            source=str(path),
            source_sha256=sha256_file(path),
        )
    if meta.nc != layout.nc or meta.imgsz != layout.imgsz:
        raise YoloEdgeError(
            f"{path}: metadata says {meta.nc} classes at {meta.imgsz} but the graph has {layout.nc} at "
            f"{layout.imgsz}; re-export it"
        )
    return ExportedModel(path=path, meta=meta, layout=layout)
