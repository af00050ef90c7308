"""Reading a bundle someone else wrote, as untrusted input: only regular files inside it, size-bounded; the plan,
units.json, the graphs' chain and the sample's headers checked before anything is compiled or allocated."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import yaml

from yolo_edge.backends.base import io_infos, self_contained
from yolo_edge.bundle.layout import CALIB, FORMAT, MODEL, SAMPLE, UNITS, BundleMeta, StoredUnit
from yolo_edge.core.config import DeployConfig, DeviceProfile, build_profile, load_stored_config, read_yaml
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import json_loads, read_regular
from yolo_edge.core.registry import artifact_suffixes, backends, unregistered
from yolo_edge.model.decode import HeadOutputs
from yolo_edge.model.graph import PARTS, SUBGRAPHS
from yolo_edge.model.meta import ModelMeta
from yolo_edge.plan.placement import PlacementPlan
from yolo_edge.runtime.build import EXECUTED, UnitPlan

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
    suffixes = artifact_suffixes()
    for path in sorted(folder.glob("*")) if folder.is_dir() else []:
        suffix = next((s for s in suffixes if path.name.endswith(s)), None)
        if suffix is not None:
            data = _bundle_bytes(folder.parent, f"{folder.name}/{path.name}", MAX_UNIT_BYTES)
            found.setdefault(path.name.removesuffix(suffix), {})[suffix] = data
    return found


def damaged(path: Path, why: str) -> YoloEdgeError:
    return YoloEdgeError(f"{path}: damaged bundle ({why}); deploy it again")


def read_graph(path: Path, rel: str) -> tuple[onnx.ModelProto, bytes]:
    """The ONNX graph at ``rel`` in the bundle, and its bytes: a regular file inside it, readable, carrying its
    own weights."""
    data = _bundle_bytes(path, rel, MAX_UNIT_BYTES)
    try:
        model = onnx.load_from_string(data)
    except Exception as exc:  # protobuf's DecodeError and its other errors
        raise damaged(path, f"{rel} is not a readable ONNX graph ({type(exc).__name__})") from None
    try:
        return self_contained(model, rel), data
    except YoloEdgeError as exc:
        raise damaged(path, str(exc)) from None


Stored = tuple[BundleMeta, PlacementPlan, DeviceProfile, DeployConfig, tuple[UnitPlan, ...], dict[str, np.ndarray]]


def read_bundle(path: Path) -> Stored:
    """What the bundle at ``path`` stores, read and checked (meta.json, plan.json, profile, settings, the units with
    their FP32 graphs, the sample); a one-line error if it is not a bundle, is damaged, or was written by a yolo-edge
    with another bundle format. Compiles nothing."""
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
        raise damaged(path, f"meta.json has no {exc.args[0]}") from None
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError, ValueError) as exc:
        said = (str(exc).strip().splitlines() or [""])[0][:200]
        raise damaged(path, f"meta.json: {type(exc).__name__}: {said}") from None
    for rel in ("profile.yaml", "deploy.yaml", MODEL, CALIB, UNITS, SAMPLE):
        if not (path / rel).exists():
            raise damaged(path, f"no {rel}")
    profile_path, config_path = (bundle_file(path, rel) for rel in ("profile.yaml", "deploy.yaml"))
    try:
        profile_data = read_yaml(profile_path, "profile.yaml")
    except (YoloEdgeError, yaml.YAMLError) as exc:
        raise damaged(path, str(exc)) from None
    runtime = profile_data.get("runtime") if isinstance(profile_data, dict) else None
    if isinstance(runtime, str) and runtime not in backends():  # not damaged: a backend this install lacks
        raise YoloEdgeError(f"{path}: its device's backend is not installed here: {unregistered(runtime)}")
    try:
        plan = PlacementPlan.from_dict(json_loads(_bundle_bytes(path, "plan.json", MAX_DOC_BYTES)))
        units = tuple(StoredUnit.from_dict(u) for u in json_loads(_bundle_bytes(path, UNITS, MAX_DOC_BYTES)))
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as exc:
        raise damaged(path, f"{type(exc).__name__}: {exc}") from None
    try:
        profile = build_profile(profile_data, str(profile_path))
        config = load_stored_config(config_path)
        check_plan(plan, units, profile)
    except (YoloEdgeError, yaml.YAMLError) as exc:
        raise damaged(path, str(exc)) from None
    planned = tuple(_unit_plan(path, u) for u in units)
    try:
        check_chain(meta.model, planned)
    except YoloEdgeError as exc:
        raise damaged(path, str(exc)) from None
    return meta, plan, profile, config, planned, read_sample(path, planned)


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
    return UnitPlan(unit.subgraphs, model, unit.device, unit.variant, unit.piece, data, unit.audit_floor)


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
        raise damaged(path, f"{SAMPLE}: {exc}") from None
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
