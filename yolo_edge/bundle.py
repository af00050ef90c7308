"""Deployment bundles: written atomically (temp dir, then rename), loaded without torch or ultralytics.

Layout::

    bundle/
      meta.json          model metadata, device, yolo-edge version, chosen plan, data used, unit fusion
      plan.json          the chosen PlacementPlan (devices, precisions, INT8 schemes, every check's numbers)
      deploy.yaml        the deploy settings it was proven with (thresholds, NMS, runtime): check/val/bench/run use them
      calib/*            the calibration sample deploy used (the images; agreement data when no labels were given)
      model.onnx         the monolithic FP32 model: the reference for val/check
      units.json         the deployed plan's units in order: subgraphs, device, variant, FP32 graph file
      subgraphs/<s>.onnx each subgraph in FP32; units/<unit>.onnx a fused or op-level unit's FP32 graph (the
                         CPU twin, and what an accelerator compiles when nothing compiled is stored)
      units/<unit>.ov.xml + .ov.bin an NPU unit NNCF quantized for OpenVINO (backbone+neck.ov.xml);
                         units/<unit>.int8.onnx one quantized by onnxruntime's quantizer (QDQ); units/<unit>.rknn
                         the unit as Rockchip's compiler built it, for RKNNLite on the board
      sample.npz         one calibration frame's tensors at every unit's inputs: the warm-up and CPU estimate
      profile.yaml       the device profile used
      events.jsonl       the runtime fallback events of the deployed plan's validation and benchmark runs
      report.json, report.md, plots/*.png

Every path inside is relative: a bundle copied to another directory or machine works as it is. Loading one
compiles nothing it stores: the units' graphs and compiled files are read as they are (no re-split, no
calibration run); only a unit whose backend cannot load its stored form (Rockchip's simulator) is compiled,
calibrated on the stored images through the units before it.

Example:
    >>> b = load_bundle("out/bundle")  # doctest: +SKIP
    >>> dets, timing = b.detector().detect(cv2.imread("img.jpg"))  # doctest: +SKIP
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import yaml

from yolo_edge.backends.base import ARTIFACT_SUFFIXES, io_infos, self_contained
from yolo_edge.backends.builder import Builder
from yolo_edge.build import EXECUTED, UnitFeeds, UnitPlan, compile_units, plan_units, unit_name
from yolo_edge.config import (
    DeployConfig,
    Device,
    DeviceProfile,
    Variant,
    build_profile,
    load_deploy_config,
    read_yaml,
)
from yolo_edge.decode import HeadOutputs
from yolo_edge.errors import YoloEdgeError
from yolo_edge.export import ExportedModel, ModelMeta, load_onnx
from yolo_edge.files import is_mount_point, json_loads, read_regular
from yolo_edge.graph import PARTS, SUBGRAPHS
from yolo_edge.pipeline.detector import Detector
from yolo_edge.pipeline.engine import StreamOptions, StreamRunner
from yolo_edge.pipeline.preprocess import load_calibration
from yolo_edge.pipeline.sources import parse_source
from yolo_edge.plan.placement import PlacementPlan
from yolo_edge.runtime import EventLog, SplitExecutor, Unit
from yolo_edge.split import SplitModel, split_model

# 5: units.json, every unit's FP32 graph and one boundary sample stored; 6: the units end at the head (the decode
# is the detector's candidate-first post-processing); 7: a profile's runtime_options are its backend's own
# (yolo_edge.registry)
FORMAT = 7
MODEL = "model.onnx"
CALIB = "calib"
UNITS = "units.json"
SAMPLE = "sample.npz"


MANIFEST = "files.txt"  # every file write_bundle wrote, one relative path a line: what a redeploy may replace


def is_bundle(path: Path) -> bool:
    """Whether ``path`` is a folder that yolo-edge wrote as a bundle (any format): its meta.json says so."""
    try:
        meta = json_loads((path / "meta.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and "yolo_edge" in meta and (path / "plan.json").is_file()


def foreign_entries(bundle: Path) -> list[str]:
    """What is in the folder ``bundle`` that write_bundle did not put there (by its manifest; every entry when it has
    none): a baseline, annotated images or notes a user saved inside it, which replacing the bundle would delete."""
    try:
        listed = set(read_regular(bundle / MANIFEST, "the bundle's file list", 1 << 20).decode().splitlines())
    except (YoloEdgeError, UnicodeDecodeError):
        listed = set()
    ours = listed | {str(parent) for rel in listed for parent in Path(rel).parents}
    found = []
    for root, dirs, files in os.walk(bundle):  # symlinks are listed, never followed
        for name in [*dirs, *files]:
            rel = os.path.relpath(os.path.join(root, name), bundle)
            if rel not in ours:
                found.append(rel)
    return sorted(found)


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "yolo_edge": self.yolo_edge,
            "model": self.model.to_dict(),
            "device": self.device,
            "chosen_plan": self.chosen_plan,
            "data": asdict(self.data),
            "sla_ms": self.sla_ms,
            "fuse_units": self.fuse_units,
            "calib": list(self.calib),
        }

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
        )


def check_writable(out: Path) -> None:
    """Fail early, before any work, when ``out`` cannot be created (tried for real: root ignores modes), or
    when it exists and is anything but an empty folder or a bundle: deploy replaces a bundle, never a user's folder."""
    if out.exists() and not out.is_dir():
        raise YoloEdgeError(f"cannot write the bundle to {out}: it is a file; pick another --out")
    if is_mount_point(out):
        raise YoloEdgeError(
            f"cannot write the bundle to {out}: it is a mount point, which cannot be replaced as a whole; "
            f"name a folder inside it (--out {Path(out) / 'bundle'})"
        )
    here = Path.cwd()
    if Path(os.path.abspath(out)) in (here, *here.parents):
        raise YoloEdgeError(
            f"cannot write the bundle to {out}: it is the current folder or one above it; pick another --out"
        )
    if out.is_dir() and not is_bundle(out):
        entries = sorted(p.name for p in out.iterdir())
        if entries:
            raise YoloEdgeError(
                f"cannot write the bundle to {out}: it is a folder that is not a yolo-edge bundle ({_few(entries)}), "
                "and deploy only ever replaces a bundle; pick another --out"
            )
    elif out.is_dir():
        foreign = foreign_entries(out)
        if foreign and not (out / MANIFEST).is_file():
            raise YoloEdgeError(
                f"cannot replace the bundle {out}: an older yolo-edge wrote it without a file list, so deploy cannot "
                "tell files saved inside it from its own; delete it yourself or pick another --out"
            )
        if foreign:
            raise YoloEdgeError(
                f"cannot replace the bundle {out}: it holds files deploy did not write ({_few(foreign)}), which "
                "replacing it would delete; move them out of it or pick another --out"
            )
    probe = out.absolute().parent
    while not probe.exists():
        probe = probe.parent
    try:
        if not probe.is_dir():
            raise NotADirectoryError(probe)
        with tempfile.TemporaryDirectory(dir=probe):
            pass
    except OSError:
        raise YoloEdgeError(
            f"cannot write the bundle to {out}: {probe} is not a writable folder; pick another --out"
        ) from None


def _few(names: Sequence[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def write_bundle(out: str | Path, files: Mapping[str, bytes]) -> Path:
    """Write ``files`` (relative path -> bytes) as the directory ``out``, atomically: into a temp dir beside
    it, then renamed over it. A crash leaves the old bundle (or none), never half a bundle."""
    out = Path(os.path.realpath(out))  # through a symlink: the bundle it names is the one replaced
    check_writable(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes it 0700; a bundle is shared like any folder the user makes
        for rel, data in files.items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        (tmp / MANIFEST).write_text("".join(f"{rel}\n" for rel in sorted([*files, MANIFEST])))
        old = None
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            os.replace(out, old)
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@dataclass(frozen=True)
class StoredUnit:
    """One entry of units.json: a unit of the deployed plan and the file of its FP32 graph."""

    subgraphs: tuple[str, ...]
    piece: int | None
    device: Device
    variant: Variant
    graph: str  # relative path: subgraphs/<s>.onnx, units/<unit>.onnx (fused, or a piece), model.onnx (all four)

    @property
    def name(self) -> str:
        return unit_name(self.subgraphs, self.piece)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "subgraphs": list(self.subgraphs), "variant": self.variant.label}

    @classmethod
    def from_dict(cls, d: Any) -> StoredUnit:
        """Raises KeyError/TypeError/ValueError on a malformed entry (a damaged bundle)."""
        subgraphs = tuple(str(s) for s in d["subgraphs"])
        piece = d["piece"] if d["piece"] is None else int(d["piece"])
        if d["device"] not in ("npu", "cpu"):
            raise ValueError(f"a unit on '{d['device']}'")
        return cls(subgraphs, piece, d["device"], Variant.parse(str(d["variant"])), str(d["graph"]))


def stored_units(planned: Sequence[UnitPlan]) -> tuple[list[StoredUnit], dict[str, bytes]]:
    """units.json's entries for ``planned`` and the graph files it names that subgraphs/ does not hold."""
    entries, files = [], {}
    for u in planned:
        if u.piece is None and len(u.subgraphs) == 1:
            graph = f"subgraphs/{u.subgraphs[0]}.onnx"
        else:
            graph = f"units/{u.name}.onnx"
            files[graph] = u.model.SerializeToString()
        entries.append(StoredUnit(u.subgraphs, u.piece, u.device, u.variant, graph))
    return entries, files


def sample_bytes(sample: Mapping[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    arrays: dict[str, Any] = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sample.items()}
    np.savez(buf, **arrays)
    return buf.getvalue()


def unit_artifacts(units: list[Unit]) -> dict[str, bytes]:
    """The compiled files of each NPU unit, as ``units/<unit><suffix>``: the INT8 QDQ graph where it differs
    from the FP32 subgraph, and a vendor's own (``.rknn``) for the board."""
    return {
        f"units/{unit.name}{suffix}": data
        for unit in units
        if unit.npu is not None
        for suffix, data in unit.npu.artifact_files().items()
    }


MAX_DOC_BYTES = 1 << 26  # meta.json, plan.json, report.json
MAX_UNIT_BYTES = 1 << 31  # a compiled unit (protobuf's own limit for an ONNX graph)
MAX_SAMPLE_TENSOR_BYTES = 1 << 30  # one tensor of sample.npz (the largest at imgsz 4096 is about 200 MB)


def bundle_file(root: Path, rel: str) -> Path:
    """``root / rel`` if it is a regular file inside the bundle: a symlink out of it, a FIFO or a device
    (``/dev/zero``) is a damaged bundle, refused before it is opened (it could read another file, hang or
    exhaust memory). A bundle someone else wrote is untrusted input; every file of it is read through here."""
    path, base = root / rel, root.resolve()
    real = path.resolve()
    if not real.is_relative_to(base):
        raise YoloEdgeError(f"{root}: damaged bundle ({rel} points outside it, to {real}); deploy it again")
    if path.exists() and not path.is_file():
        raise YoloEdgeError(f"{root}: damaged bundle ({rel} is not a regular file); deploy it again")
    return path


def _bundle_bytes(root: Path, rel: str, max_bytes: int) -> bytes:
    path = bundle_file(root, rel)
    try:
        return read_regular(path, rel, max_bytes)
    except YoloEdgeError as exc:
        raise YoloEdgeError(f"{root}: damaged bundle ({exc}); deploy it again") from None


def read_unit_artifacts(folder: Path) -> dict[str, dict[str, bytes]]:
    """A bundle's ``units/`` folder: unit name -> {suffix: bytes}, each a regular file inside the bundle."""
    found: dict[str, dict[str, bytes]] = {}
    for path in sorted(folder.glob("*")) if folder.is_dir() else []:
        suffix = next((s for s in ARTIFACT_SUFFIXES if path.name.endswith(s)), None)
        if suffix is not None:
            data = _bundle_bytes(folder.parent, f"{folder.name}/{path.name}", MAX_UNIT_BYTES)
            found.setdefault(path.name.removesuffix(suffix), {})[suffix] = data
    return found


def bundle_files(
    exported: ExportedModel,
    split: SplitModel,
    plan: PlacementPlan,
    profile: DeviceProfile,
    cfg: DeployConfig,
    calib_files: Sequence[Path],
    planned: Sequence[UnitPlan],
    sample: Mapping[str, np.ndarray],
    units: list[Unit],
    meta: BundleMeta,
    report_json: dict[str, Any],
    report_md: str,
    plots: Mapping[str, bytes],
    events: EventLog,
) -> dict[str, bytes]:
    """Everything a bundle holds, by relative path: ``planned`` (the deployed plan's units) with their FP32
    graphs, ``units``' compiled files (the split's, when it is deployed), ``sample`` (every unit's inputs)."""
    entries, graphs = stored_units(planned)
    files: dict[str, bytes] = {
        "meta.json": json.dumps(meta.to_dict(), indent=2).encode(),
        UNITS: json.dumps([e.to_dict() for e in entries], indent=2).encode(),
        SAMPLE: sample_bytes({n: sample[n] for u in planned for n in (t.name for t in io_infos(u.model)[0])}),
        "plan.json": json.dumps(replace(plan, model=MODEL).to_dict(), indent=2).encode(),
        MODEL: exported.path.read_bytes(),
        "deploy.yaml": yaml.safe_dump(_asdict(cfg), sort_keys=False).encode(),
        "profile.yaml": yaml.safe_dump(_asdict(profile), sort_keys=False).encode(),
        "report.json": json.dumps(report_json, indent=2).encode(),
        "report.md": report_md.encode(),
        "events.jsonl": events.to_jsonl().encode(),
    }
    for p in calib_files:
        files[f"{CALIB}/{p.name}"] = p.read_bytes()
    for sg in split.subgraphs:
        files[f"subgraphs/{sg.name}.onnx"] = sg.model.SerializeToString()
    files.update(graphs)
    files.update(unit_artifacts(units))
    files.update({f"plots/{name}": data for name, data in plots.items()})
    return files


def _asdict(obj: Any) -> Any:
    import dataclasses

    if dataclasses.is_dataclass(obj):
        return {f.name: _asdict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple | list):
        return [_asdict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _asdict(v) for k, v in obj.items()}
    return obj


@dataclass
class Bundle:
    """An opened bundle: what it stores, read and checked, nothing compiled yet (``detector()`` compiles)."""

    path: Path
    meta: BundleMeta
    plan: PlacementPlan
    profile: DeviceProfile
    config: DeployConfig  # the settings deploy proved it with
    units: tuple[UnitPlan, ...]  # the deployed plan's units, in order, their FP32 graphs read
    sample: dict[str, np.ndarray]  # one frame's tensors at every unit's inputs

    @property
    def calib_dir(self) -> Path:
        return self.path / CALIB

    @cached_property
    def exported(self) -> ExportedModel:
        """model.onnx, the FP32 reference, read and validated when first asked for."""
        try:
            return load_onnx(bundle_file(self.path, MODEL))
        except YoloEdgeError as exc:
            raise _damaged(
                self.path, str(exc).replace("; re-export it", "").replace(str(self.path / MODEL), MODEL)
            ) from None

    @cached_property
    def split(self) -> SplitModel:
        """The model split anew: only for running a plan other than the stored one."""
        return split_model(self.exported)

    def executor(
        self, plan: PlacementPlan | None = None, events: EventLog | None = None, as_placed: bool = False
    ) -> SplitExecutor:
        """The stored units compiled into an executor (what is compiled is loaded as it is; the rest is compiled,
        calibrated on the stored images), or ``plan``'s units when another plan is asked for. Where a unit cannot
        be placed as the plan says, ``executor.placement_problems`` says so."""
        events = events or EventLog()
        if plan is None or plan == self.plan:
            plan, planned = self.plan, list(self.units)
        else:
            planned = plan_units(self.split, plan, self.meta.fuse_units)
        input_name = planned[0].model.graph.input[0].name
        feeds = UnitFeeds(lambda: [{input_name: image} for image in self.calibration()])
        with ExitStack() as stack:  # closed here if a compile raises; else handed to the executor
            builder = stack.enter_context(Builder(self.profile))
            try:
                units = compile_units(
                    planned,
                    feeds,
                    dict(self.sample),
                    events,
                    builder,
                    self._subgraph,
                    read_unit_artifacts(self.path / "units"),
                    estimate_cpu=self.profile.kind != "cpu",
                    loaded=True,
                )
            except (YoloEdgeError, MemoryError):
                raise
            except Exception as exc:  # a runtime refusing a stored graph or compiled file (an op of a custom
                # domain, renamed IR outputs, a damaged context): the bundle, someone else's, is damaged
                said = (str(exc).strip().splitlines() or [""])[0][:200]
                raise _damaged(self.path, f"a runtime refused its stored units: {type(exc).__name__}: {said}") from None
            executor = SplitExecutor(
                units, self.config.runtime, self.profile, events, owns=stack.pop_all(), as_placed=as_placed
            )
        built = {u.name: u for u in units}
        for unit in planned:
            if unit.device == "npu" and (built.get(unit.name) is None or built[unit.name].npu is None):
                why = next(
                    (e.detail for e in events.events if e.unit == unit.name and e.action == "compile_on_cpu"),
                    "the accelerator refused it as one graph",
                )
                executor.placement_problems.append(
                    f"unit {unit.name} was proven on {self.profile.name} at {unit.precision} "
                    f"but cannot be placed there now ({why})"
                )
        return executor

    def calibration(self) -> list[np.ndarray]:
        """The stored calibration images, letterboxed (each a regular file inside the bundle): read only when a
        unit has to be compiled from its FP32 graph."""
        for image in sorted(self.calib_dir.iterdir()) if self.calib_dir.is_dir() else []:
            bundle_file(self.path, f"{CALIB}/{image.name}")
        return load_calibration(self.calib_dir, self.meta.model.imgsz, self.config.calib_images)

    def _subgraph(self, name: str) -> onnx.ModelProto:
        return read_graph(self.path, f"subgraphs/{name}.onnx")[0]

    def detector(self, events: EventLog | None = None, as_placed: bool = False) -> Detector:
        """The stored plan's detector. ``as_placed``: every unit stays where the plan put it unless its accelerator
        fails (no move to the CPU because the accelerator ran slow on a busy machine): what val and the gate
        measure, so the same bundle and data give the same figures however loaded the machine is."""
        return Detector(self.executor(events=events, as_placed=as_placed), self.meta.model, self.config.nms)

    def stream(self, sources: Sequence[str], options: StreamOptions | None = None) -> StreamRunner:
        """A pipelined run over ``sources`` (files, folders, videos, camera indices, stream URLs):
        ``with bundle.stream(["cam.mp4", "rtsp://..."]) as s: for result in s: ...``; ``s.stats`` and
        ``summarize(s)`` account for every frame. A bad source is a one-line error here, before compiling."""
        parsed = [parse_source(s) for s in sources]
        return StreamRunner(self.detector(), parsed, options or StreamOptions(), close_detector=True)

    def reference_detector(self) -> Detector:
        """The monolithic model's FP32 result on the CPU (model.onnx as one unit): the drift reference."""
        whole = UnitPlan(SUBGRAPHS, self.exported.load(), "cpu", Variant("fp32"))
        with ExitStack() as stack:  # closed here if the compile raises; else handed to the executor
            builder = stack.enter_context(Builder(self.profile))
            units = compile_units([whole], UnitFeeds([]), dict(self.sample), EventLog(), builder, self._subgraph)
            executor = SplitExecutor(units, self.config.runtime, self.profile, owns=stack.pop_all())
        return Detector(executor, self.meta.model, self.config.nms)


def _damaged(path: Path, why: str) -> YoloEdgeError:
    return YoloEdgeError(f"{path}: damaged bundle ({why}); deploy it again")


def read_graph(path: Path, rel: str) -> tuple[onnx.ModelProto, bytes]:
    """The ONNX graph at ``rel`` in the bundle, and its bytes: a regular file inside it, readable, carrying its
    own weights."""
    data = _bundle_bytes(path, rel, MAX_UNIT_BYTES)
    try:
        model = onnx.load_from_string(data)
    except Exception as exc:  # protobuf's DecodeError and its other errors
        raise _damaged(path, f"{rel} is not a readable ONNX graph ({type(exc).__name__})") from None
    try:
        return self_contained(model, rel), data
    except YoloEdgeError as exc:
        raise _damaged(path, str(exc)) from None


def load_bundle(path: str | Path) -> Bundle:
    """Open the bundle at ``path`` (any folder or machine: its paths are relative); a one-line error if it
    is not a bundle, is damaged, or was written by a yolo-edge with another bundle format. Reads and checks
    what it stores; compiles nothing (``Bundle.detector()`` does)."""
    path = Path(path)
    if not (path / "meta.json").exists() or not (path / "plan.json").exists():
        # deploy fills a missing or empty folder, never one of the user's (calib_data/ of images, say)
        empty = not path.exists() or (path.is_dir() and not any(path.iterdir()))
        make = f"yolo-edge deploy --out {path}" if empty else "yolo-edge deploy (it writes out/bundle)"
        raise YoloEdgeError(f"{path} is not a yolo-edge bundle (no meta.json/plan.json); make one with {make}")
    try:
        raw = json_loads(_bundle_bytes(path, "meta.json", MAX_DOC_BYTES))
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            found = raw.get("format") if isinstance(raw, dict) else None
            raise YoloEdgeError(f"{path}: bundle format {found} is not {FORMAT}; deploy it again with this yolo-edge")
        meta = BundleMeta.from_dict(raw)
    except KeyError as exc:
        raise _damaged(path, f"meta.json has no {exc.args[0]}") from None
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError, ValueError) as exc:
        raise _damaged(path, f"meta.json: {type(exc).__name__}") from None
    for rel in ("profile.yaml", "deploy.yaml", MODEL, CALIB, UNITS, SAMPLE):
        if not (path / rel).exists():
            raise _damaged(path, f"no {rel}")
    try:
        plan = PlacementPlan.from_dict(json_loads(_bundle_bytes(path, "plan.json", MAX_DOC_BYTES)))
        units = tuple(StoredUnit.from_dict(u) for u in json_loads(_bundle_bytes(path, UNITS, MAX_DOC_BYTES)))
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as exc:
        raise _damaged(path, f"{type(exc).__name__}: {exc}") from None
    profile_path, config_path = (bundle_file(path, rel) for rel in ("profile.yaml", "deploy.yaml"))
    try:
        profile = build_profile(read_yaml(profile_path, "profile.yaml"), str(profile_path))
        config = load_deploy_config(config_path)
        check_plan(plan, units, profile)
    except (YoloEdgeError, yaml.YAMLError) as exc:
        raise _damaged(path, str(exc)) from None
    planned = tuple(_unit_plan(path, u) for u in units)
    try:
        check_chain(meta.model, planned)
    except YoloEdgeError as exc:
        raise _damaged(path, str(exc)) from None
    return Bundle(path, meta, plan, profile, config, planned, read_sample(path, planned))


def check_chain(model: ModelMeta, planned: Sequence[UnitPlan]) -> None:
    """The stored units must make one chain from the image meta.json describes to the head's outputs of its
    classes: each unit reads the image (1x3xHxW at meta's imgsz) or what an earlier unit makes, at the shape it is
    made; what no unit reads is the head's box and class maps, ``nc`` classes at meta's strides. Swapped or
    reshaped graphs and a meta.json that does not describe them (an imgsz that would allocate gigabytes first) are
    refused here, not a runtime's error at the first frame."""
    h, w = model.imgsz
    image = io_infos(planned[0].model)[0][0].name
    made: dict[str, tuple[int, ...]] = {image: (1, 3, h, w)}
    read: set[str] = {image}
    for unit in planned:
        inputs, outputs = io_infos(unit.model)
        for t in inputs:
            want = made.get(t.name)
            if want is None:
                raise YoloEdgeError(f"unit {unit.name} reads {t.name}, which no unit before it makes")
            if tuple(t.shape) != want:
                raise YoloEdgeError(f"unit {unit.name} takes {t.name} as {list(t.shape)}, but it comes as {list(want)}")
            read.add(t.name)
        made.update({t.name: tuple(t.shape) for t in outputs})
    final = {n: shape for n, shape in made.items() if n not in read}
    head = HeadOutputs.find(final, h)
    if head is None or head.strides != model.strides or head.reg_max != model.reg_max:
        raise YoloEdgeError(f"the units end in {sorted(final)}, not the head's maps at strides {list(model.strides)}")
    classes = {final[n][1] for n in head.classes}
    if classes != {model.nc}:
        raise YoloEdgeError(f"the head's class maps have {sorted(classes)} channels, but meta.json names {model.nc}")


def _unit_plan(path: Path, unit: StoredUnit) -> UnitPlan:
    model, data = read_graph(path, unit.graph)
    return UnitPlan(unit.subgraphs, model, unit.device, unit.variant, unit.piece, data)


def read_sample(path: Path, planned: Sequence[UnitPlan]) -> dict[str, np.ndarray]:
    """sample.npz: a float32 array for every unit input, of the shape its graph takes; each array's header is
    checked before it is read (a hostile header cannot make it allocate more than the file holds)."""
    wanted = {t.name: t.shape for u in planned for t in io_infos(u.model)[0]}
    data = _bundle_bytes(path, SAMPLE, MAX_UNIT_BYTES)
    sample: dict[str, np.ndarray] = {}
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            members = {m.filename.removesuffix(".npy"): m for m in z.infolist()}
            for name, shape in wanted.items():
                if name not in members:
                    raise ValueError(f"no tensor {name}")
                with z.open(members[name]) as f:
                    version = np.lib.format.read_magic(f)
                    header = (
                        np.lib.format.read_array_header_1_0
                        if version == (1, 0)
                        else np.lib.format.read_array_header_2_0
                    )
                    got, fortran, dtype = header(f)
                    if tuple(got) != tuple(shape) or dtype != np.float32 or fortran:
                        raise ValueError(f"{name} is {dtype} {list(got)}, its unit takes float32 {list(shape)}")
                    size = 4 * int(np.prod(shape))
                    if size > MAX_SAMPLE_TENSOR_BYTES:
                        raise ValueError(f"{name} would be {size >> 20} MiB: no unit input of a 4096-pixel model is")
                    values = f.read(size + 1)  # at most one byte past the array: a deflate bomb is not inflated
                    if len(values) != size:
                        raise ValueError(f"{name} does not hold exactly {list(shape)} float32 values")
                sample[name] = np.frombuffer(values, np.float32).reshape(shape)
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise _damaged(path, f"{SAMPLE}: {exc}") from None
    return sample


def check_plan(plan: PlacementPlan, units: Sequence[StoredUnit], profile: DeviceProfile) -> None:
    """A stored plan must place exactly the model's subgraphs, in order, on ``npu`` or ``cpu``, the CPU ones in
    FP32, the accelerator ones at a precision of the profile, and the decode on the CPU (its rule); units.json
    must run those subgraphs in that order, each where and at what the plan says."""
    got = [s.name for s in plan.subgraphs]
    if got != list(SUBGRAPHS):
        raise YoloEdgeError(f"plan.json places {got}, but the model's subgraphs are {list(SUBGRAPHS)}")
    for ruled in (p for p in PARTS if p.rule is not None):
        if plan[ruled.name].device != "cpu":
            raise YoloEdgeError(f"plan.json puts the {ruled.name} on the accelerator; {ruled.rule}")
    for s in plan.subgraphs:
        if s.device not in ("npu", "cpu"):
            raise YoloEdgeError(f"plan.json puts {s.name} on '{s.device}'; a subgraph runs on npu or cpu")
        if s.device == "cpu" and s.precision != "fp32":
            raise YoloEdgeError(f"plan.json runs {s.name} on the CPU at {s.precision}; the CPU runs FP32")
        if s.device == "npu" and s.precision not in profile.precisions:
            raise YoloEdgeError(
                f"plan.json runs {s.name} at {s.precision}, which {profile.name} does not compute "
                f"({', '.join(profile.precisions)})"
            )
    ran: list[str] = []
    for sg in (sg for u in units for sg in u.subgraphs):
        if not ran or ran[-1] != sg:  # the pieces of one subgraph
            ran.append(sg)
    if ran != list(EXECUTED):  # the decode is the detector's post-processing
        raise YoloEdgeError(f"units.json runs {ran}, not the plan's subgraphs {list(EXECUTED)}")
    for u in units:
        placed = plan[u.subgraphs[0]]
        if u.variant != placed.variant or (u.piece is None and u.device != placed.device):
            raise YoloEdgeError(f"units.json runs {u.name} on {u.device} at {u.variant.label}, unlike plan.json")
        if not u.graph.endswith(".onnx") or not u.graph.startswith(("subgraphs/", "units/")):
            raise YoloEdgeError(f"units.json names {u.graph!r} as the graph of {u.name}")


def stream(bundle: str | Path | Bundle, sources: Sequence[str], options: StreamOptions | None = None) -> StreamRunner:
    """``for result in yolo_edge.stream("out/bundle", ["a.mp4", "rtsp://cam/1"]): ...``, or as a context manager
    that stops the threads: the bundle's pipelined run over ``sources`` (see :meth:`Bundle.stream`)."""
    return (bundle if isinstance(bundle, Bundle) else load_bundle(bundle)).stream(sources, options)
