"""Which images calibrate a model, which prove it, and against what: labels in the model's own classes, or
agreement with the FP32 reference.

Calibration and evaluation never share an image (the images that set the INT8 ranges would flatter the
plan that judges them):

* ``--calib DIR``: its first images (by name) calibrate; any of them also in the evaluation data is left out
  of the evaluation;
* no ``--calib``, the demo model (its classes are the shipped shapes): the shipped calibration set;
* no ``--calib``, any other model: images spread evenly over ``--data`` calibrate (at most half of them),
  the rest judge; a warning when there are fewer than the config asks for. Without ``--data`` either, a
  one-line error: the shipped synthetic shapes say nothing about another model's inputs.

A model is never scored against labels whose class names are not its own:

* ``--data`` a data.yaml or COCO JSON: its class names must equal the model's, in order, or the user
  maps them (``--class-map data_name=model_name,...`` or by index ``0=1,...``); data classes left out
  of the map are dropped from the labels. Anything else is a one-line error showing both name lists.
* ``--data`` a folder of images: no labels, so accuracy is the **agreement** of each plan with the
  FP32 reference (the reference's confident detections are the pseudo ground truth).
* no ``--data``: the demo val split when the model's classes are the demo's shapes; otherwise
  agreement on the ``--calib`` folder's images beyond those that calibrate, with a warning that no labels
  were given.

Example:
    >>> ev, calib = resolve_data("photos/", None, ("coin", "spark"), images=40)  # doctest: +SKIP
    >>> ev.kind, len(ev.dataset), len(calib.files)  # doctest: +SKIP
    ('agreement', 60, 40)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np

from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.data.dataset import Dataset, image_folder, load_dataset
from yolo_edge.demo import CLASS_NAMES

EvalKind = Literal["labels", "agreement"]  # mAP against labels, or agreement with the FP32 reference

DEMO = "demo"  # EvalData.origin: the demo val split


@dataclass(frozen=True)
class EvalData:
    """The images accuracy is measured on. ``dataset.names`` are the model's class names and its labels
    use the model's class ids (after any class map); ``labelled`` False means agreement mode."""

    dataset: Dataset
    source: str  # what to show: a path, or a description
    origin: str  # DEMO, or the path the user gave (a bundle records it to re-validate)
    labelled: bool
    class_map: dict[str, str] | None = None  # data class name -> model class name, as applied
    warning: str | None = None
    excluded: tuple[str, ...] = ()  # names of the origin's images left out because they calibrate

    @property
    def kind(self) -> EvalKind:
        return "labels" if self.labelled else "agreement"

    @property
    def kind_text(self) -> str:
        return "mAP vs labels" if self.labelled else "agreement with the FP32 reference (no labels)"


@dataclass(frozen=True)
class DataSource:
    """``--data`` read before the model is known (a bad one fails before any export): a labelled data set (a
    data.yaml or COCO JSON, in its own classes), or a folder of images (``labelled`` False)."""

    path: Path
    dataset: Dataset
    labelled: bool


def read_data(data: str | Path) -> DataSource:
    """``data`` read and checked as far as it can be without the model (files, format, labels)."""
    path = Path(data)
    if path.is_dir():
        return DataSource(path, image_folder(path), False)
    return DataSource(path, load_dataset(path), True)


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


@dataclass(frozen=True)
class Calibration:
    """The images that calibrate (INT8 ranges, then the precision check), and where they came from."""

    files: tuple[Path, ...]
    source: str
    warning: str | None = None


def resolve_eval_data(
    data: str | Path | DataSource | None,
    model_names: Sequence[str],
    class_map: str | Mapping[str, str] | None = None,
    exclude: Sequence[str] = (),
) -> EvalData:
    """The evaluation images for a model with ``model_names`` (see the module docstring), without the images
    named in ``exclude`` (they calibrated). ``data`` None is the demo val split (the demo's classes only)."""
    names = tuple(model_names)
    _map_needs_data(data, class_map)
    if isinstance(class_map, str):
        class_map = parse_class_map(class_map)
    if data is None:
        if names != CLASS_NAMES:
            raise YoloEdgeError(
                f"the model's classes {_show(names, 6)} are not the demo's: pass --data with its own images "
                "(a data.yaml or COCO JSON labelled with its classes, or a folder of images for agreement)"
            )
        from yolo_edge.demo.shapes import demo_val_data  # the generator: imported only where the demo is judged

        path = demo_val_data()
        shown = str(path).replace(str(Path.home()), "~", 1)  # the user cache's copy: not a path to copy into a report
        return _labelled(load_dataset(path), names, f"demo val split ({shown})", DEMO, class_map)
    source = data if isinstance(data, DataSource) else read_data(data)
    path = source.path
    if not source.labelled:
        if class_map:
            raise YoloEdgeError(
                f"--class-map maps the classes of a labelled data set, but {path} is a folder of unlabelled images"
            )
        ev = EvalData(Dataset(names, source.dataset.records), str(path), str(path.resolve()), False)
    else:
        ev = _labelled(source.dataset, names, str(path), str(path.resolve()), class_map)
    return _without(ev, exclude)


def _without(ev: EvalData, exclude: Sequence[str]) -> EvalData:
    """``ev`` without the images named in ``exclude``; a one-line error if none is left."""
    if not exclude:
        return ev
    skip = set(exclude)
    kept = tuple(r for r in ev.dataset.records if r.path.name not in skip)
    if not kept:
        raise YoloEdgeError(
            f"every evaluation image of {ev.source} also calibrates: pass --data with images that --calib does not hold"
        )
    gone = tuple(sorted(r.path.name for r in ev.dataset.records if r.path.name in skip))
    return replace(ev, dataset=Dataset(ev.dataset.names, kept), excluded=gone)


def _map_needs_data(data: object, class_map: object) -> None:
    """A class map without the data set it maps would be silently ignored: a one-line error instead."""
    if data is None and class_map:
        raise YoloEdgeError("--class-map maps the classes of --data's data set: pass --data with it, or drop it")


def resolve_data(
    data: str | Path | DataSource | None,
    calib: str | Path | None,
    model_names: Sequence[str],
    images: int,
    class_map: str | Mapping[str, str] | None = None,
) -> tuple[EvalData, Calibration]:
    """The evaluation images and the (disjoint) calibration images for a model with ``model_names``, ``images``
    calibration images wanted: see the module docstring."""
    from yolo_edge.pipeline.preprocess import default_calib_dir, list_images

    _map_needs_data(data, class_map)
    names = tuple(model_names)
    if calib is not None or names == CLASS_NAMES:
        folder = Path(calib) if calib is not None else default_calib_dir()
        files = tuple(list_images(folder, "calibration folder")[:images])
        shown = str(folder) if calib is not None else "the shipped calibration set (yolo_edge/calib_data)"
        if data is None and names != CLASS_NAMES:
            ev = _rest_of_calib(folder, names, files)
        else:
            ev = resolve_eval_data(data, names, class_map, [f.name for f in files])
        return ev, Calibration(files, shown, _fewer(len(files), images, shown))
    if data is None:
        resolve_eval_data(None, names)  # the one-line error: another model needs its own images
    ev = resolve_eval_data(data, names, class_map)
    records = ev.dataset.records
    if len(records) < 3:
        raise YoloEdgeError(
            f"{ev.source} has {len(records)} image(s): calibrating and judging needs at least 3 (2 to calibrate, "
            "1 to judge), or pass --calib DIR"
        )
    n = min(images, len(records) // 2)
    picked = sorted({round(i * (len(records) - 1) / max(n - 1, 1)) for i in range(n)})
    files = tuple(records[i].path for i in picked)
    shown = f"{len(files)} of the {len(records)} images of {ev.source}"
    return _without(ev, [f.name for f in files]), Calibration(files, shown, _fewer(len(files), images, shown))


def _rest_of_calib(folder: Path, names: tuple[str, ...], files: tuple[Path, ...]) -> EvalData:
    """Agreement on the ``--calib`` folder's images beyond the ones that calibrate (no ``--data``)."""
    ev = EvalData(Dataset(names, image_folder(folder).records), str(folder), str(folder.resolve()), False)
    warning = (
        f"no --data: accuracy is agreement with the FP32 reference on the --calib images that do not calibrate "
        f"({folder}); pass --data with labelled images of the model's classes for mAP"
    )
    try:
        return replace(_without(ev, [f.name for f in files]), warning=warning)
    except YoloEdgeError:
        raise YoloEdgeError(
            f"no --data, and all {len(files)} images of --calib {folder} calibrate: pass --data with images of the "
            "model's own to judge it on"
        ) from None


def _fewer(found: int, wanted: int, shown: str) -> str | None:
    if found >= wanted:
        return None
    return f"calibrating on {found} images ({shown}), fewer than the {wanted} the config asks for"


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
