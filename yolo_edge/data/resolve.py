"""Which images prove a model, and against what: labels in the model's own classes, or agreement with
the FP32 reference.

A model is never scored against labels whose class names are not its own:

* ``--data`` a data.yaml or COCO JSON: its class names must equal the model's, in order, or the user
  maps them (``--class-map data_name=model_name,...`` or by index ``0=1,...``); data classes left out
  of the map are dropped from the labels. Anything else is a one-line error showing both name lists.
* ``--data`` a folder of images: no labels, so accuracy is the **agreement** of each plan with the
  FP32 reference (the reference's confident detections are the pseudo ground truth).
* no ``--data``: the demo val split when the model's classes are the demo's shapes; otherwise
  agreement on the calibration images, with a warning that no labels were given.

Example:
    >>> ev = resolve_eval_data(None, ("coin", "spark"), default_calib_dir(), images=40)  # doctest: +SKIP
    >>> ev.kind, ev.warning is not None  # doctest: +SKIP
    ('agreement', True)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from yolo_edge.data.dataset import Dataset, image_folder, load_dataset
from yolo_edge.data.synthetic import CLASS_NAMES, demo_val_data
from yolo_edge.errors import YoloEdgeError

DEMO = "demo"  # EvalData.origin: the demo val split
CALIB = "calib"  # the calibration images (agreement)


@dataclass(frozen=True)
class EvalData:
    """The images accuracy is measured on. ``dataset.names`` are the model's class names and its labels
    use the model's class ids (after any class map); ``labelled`` False means agreement mode."""

    dataset: Dataset
    source: str  # what to show: a path, or a description
    origin: str  # DEMO, CALIB, or the path the user gave (a bundle records it to re-validate)
    labelled: bool
    class_map: dict[str, str] | None = None  # data class name -> model class name, as applied
    warning: str | None = None

    @property
    def kind(self) -> str:
        return "labels" if self.labelled else "agreement"

    @property
    def kind_text(self) -> str:
        return "mAP vs labels" if self.labelled else "agreement with the FP32 reference (no labels)"


def parse_class_map(text: str) -> dict[str, str]:
    """``"car=vehicle,1=0"`` -> ``{"car": "vehicle", "1": "0"}`` (names or indices, resolved later)."""
    pairs: dict[str, str] = {}
    for item in (p.strip() for p in text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise YoloEdgeError(
                f"--class-map: '{item}' is not DATA=MODEL; write e.g. --class-map car=vehicle,truck=vehicle or 0=1,2=0"
            )
        if key.strip() in pairs:
            raise YoloEdgeError(f"--class-map: data class '{key.strip()}' is mapped twice")
        pairs[key.strip()] = value.strip()
    return pairs


def _index(token: str, names: Sequence[str], what: str) -> int:
    if token in names:
        return names.index(token)
    if token.isdigit() and int(token) < len(names):
        return int(token)
    raise YoloEdgeError(f"--class-map: '{token}' is not a {what} class; {what} classes: {_show(names)}")


def _show(names: Sequence[str], limit: int = 12) -> str:
    shown = ", ".join(f"{i}={n}" for i, n in enumerate(names[:limit]))
    return f"[{shown}{', ...' if len(names) > limit else ''}] ({len(names)})"


def apply_class_map(
    dataset: Dataset, model_names: Sequence[str], class_map: Mapping[str, str]
) -> tuple[Dataset, dict[str, str]]:
    """``dataset`` relabelled into the model's class ids; objects of unmapped data classes are dropped.
    Returns it and the map by name."""
    ids = {_index(k, dataset.names, "data"): _index(v, model_names, "model") for k, v in class_map.items()}
    lut = np.full(len(dataset.names), -1, np.int64)
    for src, dst in ids.items():
        lut[src] = dst
    records = []
    for r in dataset.records:
        new = lut[r.classes] if len(r.classes) else r.classes
        keep = new >= 0
        records.append(replace(r, boxes=r.boxes[keep], classes=new[keep]))
    return Dataset(tuple(model_names), tuple(records)), {dataset.names[s]: model_names[d] for s, d in ids.items()}


def resolve_eval_data(
    data: str | Path | None,
    model_names: Sequence[str],
    calib_dir: Path,
    images: int,
    class_map: str | Mapping[str, str] | None = None,
) -> EvalData:
    """The evaluation images for a model with ``model_names``: see the module docstring. ``images``
    calibration images (the first, by name) are used when agreement falls back on them."""
    names = tuple(model_names)
    if isinstance(class_map, str):
        class_map = parse_class_map(class_map)
    if data is None:
        if names == CLASS_NAMES:
            path = demo_val_data()
            return _labelled(load_dataset(path), names, f"demo val split ({path})", DEMO, class_map)
        if class_map:
            raise YoloEdgeError("--class-map maps the classes of a labelled --data set; pass --data too")
        folder = image_folder(calib_dir, limit=images)
        warning = (
            f"no --data: the model's classes {_show(names, 6)} are not the demo's, so accuracy is its agreement "
            f"with the FP32 reference on {len(folder)} calibration images (no labels); pass --data with labelled "
            "images for mAP"
        )
        return EvalData(
            Dataset(names, folder.records), f"calibration images ({calib_dir})", CALIB, False, None, warning
        )
    path = Path(data)
    if path.is_dir():
        if class_map:
            raise YoloEdgeError(
                f"--class-map maps the classes of a labelled data set, but {path} is a folder of unlabelled images"
            )
        return EvalData(Dataset(names, image_folder(path).records), str(path), str(path.resolve()), False)
    return _labelled(load_dataset(path), names, str(path), str(path.resolve()), class_map)


def _labelled(
    dataset: Dataset, names: tuple[str, ...], source: str, origin: str, class_map: Mapping[str, str] | None
) -> EvalData:
    if class_map:
        mapped, by_name = apply_class_map(dataset, names, class_map)
        return EvalData(mapped, source, origin, True, by_name)
    if dataset.names != names:
        same = sorted(dataset.names) == sorted(names)
        hint = (
            "--class-map " + ",".join(f"{n}={n}" for n in dataset.names) + " (the same names in another order)"
            if same
            else "--class-map DATA=MODEL,... (names or indices; data classes left out are dropped)"
        )
        raise YoloEdgeError(
            f"{source} is labelled with classes {_show(dataset.names)} but the model has {_show(names)}: "
            f"a model is only scored on labels of its own classes; pass {hint}, or --data with a folder "
            "of images to measure agreement with the FP32 reference instead"
        )
    return EvalData(dataset, source, origin, True)
