"""Deployment bundles: written atomically (temp dir, then rename), loaded without torch or ultralytics.

Layout::

    bundle/
      meta.json          model metadata, device, yolo-edge version, chosen plan, data used, unit fusion
      plan.json          the chosen PlacementPlan (devices, precisions, INT8 schemes, every check's numbers)
      deploy.yaml        the deploy settings it was proven with (thresholds, NMS, runtime): check/val/bench/run use them
      calib/*            the calibration sample deploy used (the images; agreement data when no labels were given)
      model.onnx         the monolithic FP32 model: the reference for val/check
      subgraphs/<s>.onnx each subgraph in FP32 (the CPU twin); units/<unit>.ov.xml + .ov.bin an NPU unit
                         NNCF quantized for OpenVINO (a subgraph, or fused ones: backbone+neck.ov.xml);
                         units/<unit>.int8.onnx one quantized by onnxruntime's quantizer (QDQ); units/<unit>.rknn
                         the unit as Rockchip's compiler built it, for RKNNLite on the board
      profile.yaml       the device profile used
      events.jsonl       the runtime fallback events of the deployed plan's validation and benchmark runs
      report.json, report.md, plots/*.png

Every path inside is relative: a bundle copied to another directory or machine works as it is.

Example:
    >>> b = load_bundle("out/bundle")  # doctest: +SKIP
    >>> dets, timing = b.detector().detect(cv2.imread("img.jpg"))  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from yolo_edge.backends.base import ARTIFACT_SUFFIXES
from yolo_edge.config import DeployConfig, DeviceProfile, build, load_deploy_config, read_yaml
from yolo_edge.errors import YoloEdgeError
from yolo_edge.export import ExportedModel, ModelMeta, load_onnx
from yolo_edge.files import read_regular
from yolo_edge.pipeline.detector import Detector
from yolo_edge.pipeline.engine import StreamOptions, StreamRunner
from yolo_edge.pipeline.preprocess import load_calibration
from yolo_edge.pipeline.sources import parse_source
from yolo_edge.plan.placement import PlacementPlan, boundary_tensors
from yolo_edge.runtime import EventLog, SplitExecutor, Unit, build_units, plan_units
from yolo_edge.split import SplitModel, split_model

FORMAT = 4  # 4: precision variants (quantizer, kept layers) in plan.json, OpenVINO IR units, calibration left out
MODEL = "model.onnx"
CALIB = "calib"


def is_bundle(path: Path) -> bool:
    """Whether ``path`` is a folder that yolo-edge wrote as a bundle (any format): its meta.json says so."""
    try:
        meta = json.loads((path / "meta.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and "yolo_edge" in meta and (path / "plan.json").is_file()


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
    if os.path.ismount(os.path.realpath(out)):
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
            shown = ", ".join(entries[:3]) + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")
            raise YoloEdgeError(
                f"cannot write the bundle to {out}: it is a folder that is not a yolo-edge bundle ({shown}), "
                "and deploy only ever replaces a bundle; pick another --out"
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
    units: list[Unit],
    meta: BundleMeta,
    report_json: dict[str, Any],
    report_md: str,
    plots: Mapping[str, bytes],
    events: EventLog,
) -> dict[str, bytes]:
    files: dict[str, bytes] = {
        "meta.json": json.dumps(meta.to_dict(), indent=2).encode(),
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
    path: Path
    meta: BundleMeta
    plan: PlacementPlan
    profile: DeviceProfile
    config: DeployConfig  # the settings deploy proved it with
    exported: ExportedModel
    split: SplitModel
    report: dict[str, Any]

    @property
    def calib_dir(self) -> Path:
        return self.path / CALIB

    def executor(self, plan: PlacementPlan | None = None, events: EventLog | None = None) -> SplitExecutor:
        """Compile the bundle's units (stored INT8 artifacts run as they are, units fused as deployed) into an
        executor. Where a unit cannot be placed as the plan says, ``executor.placement_problems`` says so."""
        plan = plan or self.plan
        events = events or EventLog()
        sample = boundary_tensors(
            self.split, load_calibration(self.calib_dir, self.exported.meta.imgsz, self.config.calib_images)
        )
        artifacts = read_unit_artifacts(self.path / "units")
        fuse = self.meta.fuse_units
        units = build_units(self.split, plan, self.profile, sample, events, artifacts=artifacts, fuse=fuse)
        executor = SplitExecutor(units, self.config.runtime, self.profile, events)
        built = {u.name: u for u in units}
        for planned in plan_units(self.split, plan, fuse):
            unit = built.get(planned.name)
            if planned.device == "npu" and (unit is None or unit.npu is None):
                why = next(
                    (e.detail for e in events.events if e.unit == planned.name and e.action == "compile_on_cpu"),
                    "the accelerator refused it as one graph",
                )
                executor.placement_problems.append(
                    f"unit {planned.name} was proven on {self.profile.name} at {planned.precision} "
                    f"but cannot be placed there now ({why})"
                )
        return executor

    def detector(self, events: EventLog | None = None) -> Detector:
        return Detector(self.executor(events=events), self.exported.meta, self.config.nms)

    def stream(self, sources: Sequence[str], options: StreamOptions | None = None) -> StreamRunner:
        """A pipelined run over ``sources`` (files, folders, videos, camera indices, stream URLs):
        ``with bundle.stream(["cam.mp4", "rtsp://..."]) as s: for result in s: ...``; ``s.stats`` and
        ``summarize(s)`` account for every frame. A bad source is a one-line error here, before compiling."""
        parsed = [parse_source(s) for s in sources]
        return StreamRunner(self.detector(), parsed, options or StreamOptions(), close_detector=True)

    def reference_detector(self) -> Detector:
        """The monolithic model's FP32 result on the CPU: the drift reference."""
        return Detector(self.executor(plan=self.plan.all_cpu()), self.exported.meta, self.config.nms)


def load_bundle(path: str | Path) -> Bundle:
    """Open the bundle at ``path`` (any folder or machine: its paths are relative); a one-line error if it
    is not a bundle, is damaged, or was written by a yolo-edge with another bundle format."""
    path = Path(path)
    if not (path / "meta.json").exists() or not (path / "plan.json").exists():
        raise YoloEdgeError(
            f"{path} is not a yolo-edge bundle (no meta.json/plan.json); make one with yolo-edge deploy --out {path}"
        )
    try:
        raw = json.loads(_bundle_bytes(path, "meta.json", MAX_DOC_BYTES))
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            found = raw.get("format") if isinstance(raw, dict) else None
            raise YoloEdgeError(f"{path}: bundle format {found} is not {FORMAT}; deploy it again with this yolo-edge")
        meta = BundleMeta.from_dict(raw)
    except KeyError as exc:
        raise YoloEdgeError(f"{path}: damaged bundle (meta.json has no {exc.args[0]}); deploy it again") from None
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError, ValueError) as exc:
        raise YoloEdgeError(f"{path}: damaged bundle (meta.json: {type(exc).__name__}); deploy it again") from None
    try:
        plan = PlacementPlan.from_dict(json.loads(_bundle_bytes(path, "plan.json", MAX_DOC_BYTES)))
        has_report = (path / "report.json").exists()
        report = json.loads(_bundle_bytes(path, "report.json", MAX_DOC_BYTES)) if has_report else {}
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as exc:
        raise YoloEdgeError(f"{path}: damaged bundle ({type(exc).__name__}: {exc}); deploy it again") from None
    for rel in ("profile.yaml", "deploy.yaml", MODEL, CALIB):
        if not (path / rel).exists():
            raise YoloEdgeError(f"{path}: damaged bundle (no {rel}); deploy it again")
    for calib in sorted((path / CALIB).iterdir()) if (path / CALIB).is_dir() else []:
        bundle_file(path, f"{CALIB}/{calib.name}")
    profile_path, config_path, model_path = (bundle_file(path, rel) for rel in ("profile.yaml", "deploy.yaml", MODEL))
    try:
        profile = build(DeviceProfile, read_yaml(profile_path, "profile.yaml"), str(profile_path))
        config = load_deploy_config(config_path)
        exported = load_onnx(model_path)
        split = split_model(exported)
        check_plan(plan, split, profile)
    except (YoloEdgeError, yaml.YAMLError) as exc:
        text = str(exc).replace("; re-export it", "")
        raise YoloEdgeError(f"{path}: damaged bundle ({text}); deploy it again") from None
    return Bundle(path, meta, plan, profile, config, exported, split, report)


def check_plan(plan: PlacementPlan, split: SplitModel, profile: DeviceProfile) -> None:
    """A stored plan must place exactly the model's subgraphs, in order, on ``npu`` or ``cpu``, the CPU ones in
    FP32, the accelerator ones at a precision of the profile, and the decode on the CPU (its rule)."""
    names = [sg.name for sg in split.subgraphs]
    got = [s.name for s in plan.subgraphs]
    if got != names:
        raise YoloEdgeError(f"plan.json places {got}, but the model's subgraphs are {names}")
    if plan["decode"].device != "cpu":
        raise YoloEdgeError("plan.json puts the decode on the accelerator; the decode runs FP32 on the CPU by rule")
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


def stream(bundle: str | Path | Bundle, sources: Sequence[str], options: StreamOptions | None = None) -> StreamRunner:
    """``for result in yolo_edge.stream("out/bundle", ["a.mp4", "rtsp://cam/1"]): ...``, or as a context manager
    that stops the threads: the bundle's pipelined run over ``sources`` (see :meth:`Bundle.stream`)."""
    return (bundle if isinstance(bundle, Bundle) else load_bundle(bundle)).stream(sources, options)
