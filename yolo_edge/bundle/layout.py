"""What a bundle holds: its layout (the package docstring), meta.json, units.json, the boundary sample, and the
bytes deploy writes for a proven plan (:func:`bundle_files`)."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from yolo_edge.backends.base import io_infos
from yolo_edge.core.codec import dumps, exact, plain
from yolo_edge.core.config import DeployConfig, Device, DeviceProfile, Variant
from yolo_edge.model.meta import ExportedModel, ModelMeta
from yolo_edge.model.split import SplitModel
from yolo_edge.plan.placement import PlacementPlan
from yolo_edge.runtime.audit import Lighting
from yolo_edge.runtime.build import UnitPlan, unit_name
from yolo_edge.runtime.events import EventLog
from yolo_edge.runtime.units import Unit

# 5: units.json, every unit's FP32 graph and one boundary sample stored; 6: the units end at the head (the decode
# is the detector's candidate-first post-processing); 7: a profile's runtime_options are its backend's own
# (yolo_edge.core.registry)
FORMAT = 7
MODEL = "model.onnx"
CALIB = "calib"
UNITS = "units.json"
SAMPLE = "sample.npz"
MANIFEST = "files.txt"  # every file write_bundle wrote, one relative path a line: what a redeploy may replace


@dataclass(frozen=True)
class DataRecord:
    """What the bundle was validated on, so that check/val/bench can do it again."""

    origin: str  # "demo" or the path the user gave
    kind: str  # "labels" or "agreement"
    class_map: dict[str, str] | None  # data class name -> model class name, as applied
    excluded: tuple[str, ...] = ()  # the origin's images left out of the evaluation because they calibrated


@dataclass(frozen=True)
class BundleMeta:
    """meta.json: what the bundle holds and what it was proven with."""

    yolo_edge: str  # the version that wrote it
    model: ModelMeta
    device: str  # the profile's name
    chosen_plan: str  # "split" or "whole-cpu"
    data: DataRecord
    sla_ms: float
    fuse_units: bool
    calib: tuple[str, ...]  # the calibration sample's file names, in calib/
    kept: tuple[int, int] | None = None  # the plan's boxes kept of the FP32 reference's, as deploy judged (audit.py)
    lighting: Lighting | None = None  # the brightness and contrast of the images it was proven on (audit.py)
    added: tuple[int, int] | None = None  # the plan's boxes no FP32 box keeps, of its boxes, as deploy judged

    def to_dict(self) -> dict[str, Any]:
        return plain(
            {
                "format": FORMAT,
                "yolo_edge": self.yolo_edge,
                "model": self.model.to_dict(),
                "device": self.device,
                "chosen_plan": self.chosen_plan,
                "data": self.data,
                "sla_ms": self.sla_ms,
                "fuse_units": self.fuse_units,
                "calib": list(self.calib),
                "boxes_kept": None if self.kept is None else list(self.kept),
                "lighting": None if self.lighting is None else self.lighting.to_dict(),
                "boxes_added": None if self.added is None else list(self.added),
            }
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BundleMeta:
        """Raises KeyError naming the first missing key (``data.origin`` for a nested one)."""
        data = d["data"]
        for key in ("origin", "kind", "class_map", "excluded"):
            if key not in data:
                raise KeyError(f"data.{key}")
        return cls(
            d["yolo_edge"],
            ModelMeta.from_dict(d["model"]),
            d["device"],
            d["chosen_plan"],
            DataRecord(data["origin"], data["kind"], data["class_map"], tuple(data["excluded"])),
            float(d["sla_ms"]),
            bool(d["fuse_units"]),
            tuple(d["calib"]),
            _kept(d.get("boxes_kept"), "boxes_kept"),
            _lighting(d.get("lighting")),
            _kept(d.get("boxes_added"), "boxes_added"),
        )


MAX_PROVEN_BOXES = 10_000_000  # boxes a deploy's judging images hold: 33,000 images at the 300 boxes NMS keeps


def _kept(value: object, key: str) -> tuple[int, int] | None:
    """meta.json's ``boxes_kept`` (or ``boxes_added``): ``[kept, of]``, whole numbers with 0 <= kept <= of, of at
    most :data:`MAX_PROVEN_BOXES` (untrusted input; the runtime audit's statistics are computed from them)."""
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        or not 0 <= value[0] <= value[1] <= MAX_PROVEN_BOXES
    ):
        raise ValueError(f"{key} {str(value)[:60]} is not [n, of] with 0 <= n <= of <= {MAX_PROVEN_BOXES:,}")
    return value[0], value[1]


def _lighting(value: object) -> Lighting | None:
    """meta.json's ``lighting``: ``{"mean": [lo, hi], "std": [lo, hi]}``, finite with 0 <= lo <= hi <= 255
    (untrusted input)."""
    if value is None:
        return None
    ranges = [value.get(k) for k in ("mean", "std")] if isinstance(value, dict) and len(value) == 2 else []
    if len(ranges) != 2 or not all(
        isinstance(r, list)
        and len(r) == 2
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in r)
        and 0 <= r[0] <= r[1] <= 255
        and r[1] > 0
        for r in ranges
    ):
        raise ValueError(
            f"lighting {str(value)[:60]} is not {{mean: [lo, hi], std: [lo, hi]}} within 0 to 255, each hi over 0"
        )
    (m0, m1), (s0, s1) = ranges  # type: ignore[misc]
    return Lighting((float(m0), float(m1)), (float(s0), float(s1)))


@dataclass(frozen=True)
class StoredUnit:
    """One entry of units.json: a unit of the deployed plan and the file of its FP32 graph."""

    subgraphs: tuple[str, ...]
    piece: int | None
    device: Device
    variant: Variant
    graph: str  # relative path: subgraphs/<s>.onnx, units/<unit>.onnx (fused, or a piece), model.onnx (all four)
    audit_floor: float | None = None  # an accelerator unit's lowest cosine with its FP32 twin at deploy (audit.py)

    @property
    def name(self) -> str:
        return unit_name(self.subgraphs, self.piece)

    def to_dict(self) -> dict[str, Any]:
        return {**plain(self), "variant": self.variant.label}

    @classmethod
    def from_dict(cls, d: Any) -> StoredUnit:
        """Raises KeyError/TypeError/ValueError on a malformed entry (a damaged bundle)."""
        subgraphs = tuple(str(s) for s in d["subgraphs"])
        piece = d["piece"] if d["piece"] is None else int(d["piece"])
        if d["device"] not in ("npu", "cpu"):
            raise ValueError(f"a unit on '{d['device']}'")
        floor = d.get("audit_floor")
        number = isinstance(floor, int | float) and not isinstance(floor, bool)
        if floor is not None and (not number or not 0 < floor <= 1):  # at or under 0 every audit would pass
            raise ValueError(f"audit_floor {floor!r} is not a cosine over 0")
        floor = None if floor is None else float(floor)
        return cls(subgraphs, piece, d["device"], Variant.parse(str(d["variant"])), str(d["graph"]), floor)


def stored_units(planned: Sequence[UnitPlan]) -> tuple[list[StoredUnit], dict[str, bytes]]:
    """units.json's entries for ``planned`` and the graph files it names that subgraphs/ does not hold."""
    entries, files = [], {}
    for u in planned:
        if u.piece is None and len(u.subgraphs) == 1:
            graph = f"subgraphs/{u.subgraphs[0]}.onnx"
        else:
            graph = f"units/{u.name}.onnx"
            files[graph] = u.model.SerializeToString()
        entries.append(StoredUnit(u.subgraphs, u.piece, u.device, u.variant, graph, u.audit_floor))
    return entries, files


def sample_bytes(sample: Mapping[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    arrays: dict[str, Any] = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sample.items()}
    np.savez(buf, **arrays)
    return buf.getvalue()


def unit_artifacts(units: Sequence[Unit]) -> dict[str, bytes]:
    """The compiled files of each NPU unit, as ``units/<unit><suffix>``: the INT8 QDQ graph where it differs
    from the FP32 subgraph, and a vendor's own (``.rknn``) for the board."""
    return {
        f"units/{unit.name}{suffix}": data
        for unit in units
        if unit.npu is not None
        for suffix, data in unit.npu.artifact_files().items()
    }


@dataclass(frozen=True)
class Contents:
    """What deploy hands over to be stored: the deployed plan, its units and what it was built from."""

    meta: BundleMeta
    exported: ExportedModel
    split: SplitModel
    plan: PlacementPlan  # the deployed plan
    profile: DeviceProfile
    config: DeployConfig
    planned: Sequence[UnitPlan]  # the deployed plan's units, with their FP32 graphs
    units: Sequence[Unit]  # the compiled units whose files are stored (the split's, when it is deployed)
    sample: Mapping[str, np.ndarray]  # one frame's tensors at every unit's inputs
    calib_files: Sequence[Path]
    events: EventLog


def bundle_files(contents: Contents, proof: Mapping[str, bytes]) -> dict[str, bytes]:
    """Everything a bundle holds, by relative path: ``contents`` (the plan's units with their FP32 graphs, the
    compiled files of ``contents.units``, the sample of every unit's inputs) and ``proof`` (the report's files)."""
    c = contents
    entries, graphs = stored_units(c.planned)
    files: dict[str, bytes] = {
        "meta.json": dumps(c.meta.to_dict()).encode(),
        UNITS: dumps([e.to_dict() for e in entries]).encode(),
        SAMPLE: sample_bytes({n: c.sample[n] for u in c.planned for n in (t.name for t in io_infos(u.model)[0])}),
        "plan.json": dumps(replace(c.plan, model=MODEL).to_dict()).encode(),
        MODEL: c.exported.path.read_bytes(),
        "deploy.yaml": yaml.safe_dump(exact(c.config), sort_keys=False).encode(),
        "profile.yaml": yaml.safe_dump(exact(c.profile), sort_keys=False).encode(),
        "events.jsonl": c.events.to_jsonl().encode(),
        **proof,
    }
    for p in c.calib_files:
        files[f"{CALIB}/{p.name}"] = p.read_bytes()
    for sg in c.split.subgraphs:
        files[f"subgraphs/{sg.name}.onnx"] = sg.model.SerializeToString()
    files.update(graphs)
    files.update(unit_artifacts(c.units))
    return files
