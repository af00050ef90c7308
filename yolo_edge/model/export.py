"""Export a YOLOv8 detector to a static, simplified ONNX with the metadata the rest of the toolkit needs.

This is the only module that imports torch/ultralytics, and only inside :func:`export_model` when a
checkpoint (``.pt``) or a model yaml has to be exported. An ONNX that ultralytics already exported is
read without them, so a bundle runs on a board with no torch.

A checkpoint's export is cached (``$YOLO_EDGE_CACHE/exports``, digest-verified), keyed by the checkpoint's
sha256, the size, the opset and the versions of the exporting packages: deploying the same ``.pt`` again (to
another profile, with another config) reads ultralytics' ONNX back without importing torch. A model ``.yaml``
is exported every time: ultralytics draws new random weights for it.

Example:
    >>> exported = export_model("yolov8n.yaml", imgsz=(320, 320), out_dir="out")  # doctest: +SKIP
    >>> exported.meta.nc, exported.meta.strides  # doctest: +SKIP
    (80, (8, 16, 32))
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import onnx

from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import atomic_write, cache_root, package_versions, printable, read_cached, write_cached
from yolo_edge.core.native import native_output
from yolo_edge.core.privacy import no_telemetry
from yolo_edge.model.graph import GraphInfo, yolov8_layout
from yolo_edge.model.meta import (
    META_KEY,
    TASK_NAMES,
    ExportedModel,
    ImgSize,
    ModelMeta,
    load_onnx,
    parse_imgsz,
    sha256_file,
)
from yolo_edge.model.rewrite import apply_rewrites

DEFAULT_OPSET = 17


EXPORT_CACHE = "ultralytics-onnx-1"  # the cache entries' format: a new one never reads an older one's files
EXPORTERS = ("ultralytics", "torch", "onnx", "onnxslim")  # their versions key the cached exports


def _ultralytics_export(source: str, shown: str, imgsz: ImgSize, opset: int, workdir: Path) -> Path:
    """Export ``source`` with ultralytics inside ``workdir``; returns the ONNX path. Errors name ``shown``
    (the user's file, not the private copy ``source``)."""
    # Its first import on a machine announces the settings file it made: on stderr, as its other lines. The logger
    # that import makes keeps stderr for the process (ultralytics' lines are never on this package's stdout).
    no_telemetry()  # before ultralytics imports torch (yolo_edge/core/privacy.py)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            from ultralytics import YOLO
            from ultralytics.utils import LOGGER
    except ImportError:
        raise YoloEdgeError(
            f"exporting {shown} needs ultralytics: pip install 'yolo-edge[export]', or pass an ONNX exported by "
            "ultralytics"
        ) from None
    try:
        yolo = YOLO(source)
    except Exception as exc:
        why = str(exc).replace(source, shown).strip().splitlines()[0] if str(exc).strip() else ""
        why = why.split(" See https://")[0].split(" Please ")[0].rstrip(". ")  # not ultralytics' online advice
        raise YoloEdgeError(
            f"cannot load {shown} as an ultralytics YOLOv8 model ({type(exc).__name__}{': ' + why if why else ''}); "
            "pass a .pt checkpoint saved by ultralytics, a model .yaml or an ONNX it exported"
        ) from None
    task = str(yolo.task)
    if task != "detect":
        raise YoloEdgeError(
            f"{shown} is a {TASK_NAMES.get(task, task)} model; yolo-edge deploys YOLOv8 detection models only"
        )
    stride = int(max(yolo.model.stride))  # type: ignore[union-attr]
    if imgsz[0] % stride or imgsz[1] % stride:
        fit = [max(stride, round(s / stride) * stride) for s in imgsz]
        raise YoloEdgeError(
            f"--imgsz {imgsz[0]},{imgsz[1]} is not a multiple of {shown}'s largest stride {stride} (ultralytics would "
            f"round it up silently); use --imgsz {fit[0]},{fit[1]}"
        )
    level = LOGGER.level
    LOGGER.setLevel(logging.WARNING)
    streams = [(h, h.stream) for h in LOGGER.handlers if isinstance(h, logging.StreamHandler)]
    said = io.StringIO()  # ultralytics' own lines: never on stdout (the command's: split --json)
    try:
        for handler, _ in streams:
            handler.stream = said  # not setStream: it flushes the old stream, closed if it was a finished capture
        with contextlib.chdir(workdir), contextlib.redirect_stdout(said), native_output() as native:
            out = yolo.export(format="onnx", imgsz=list(imgsz), opset=opset, simplify=True, dynamic=False, batch=1)
        sys.stderr.write(said.getvalue() + native.read().decode(errors="replace"))  # its warnings, on stderr
    except OSError:
        raise  # a storage fault: the CLI says what to do
    except Exception as exc:  # ultralytics' exporter on a model it cannot trace (YOLO-World's CLIP, ...): its log
        why = (str(exc).strip().splitlines() or [""])[0]  # of the failure is in the one line below
        why = why.split(" Please ")[0].split(" See https://")[0].rstrip(". ")[:200]
        raise YoloEdgeError(
            f"ultralytics could not export {shown} to ONNX ({type(exc).__name__}{': ' + why if why else ''}); "
            "yolo-edge deploys YOLOv8-style detection models that ultralytics exports"
        ) from None
    finally:
        LOGGER.setLevel(level)
        for handler, stream in streams:
            handler.stream = stream
    return Path(workdir, out)


def _cached_export(source: str, shown: str, source_sha: str, imgsz: ImgSize, opset: int, workdir: Path) -> Path:
    """:func:`_ultralytics_export`, read from the export cache for a checkpoint exported before with the same size,
    opset and exporters (a ``.yaml`` gets new random weights each time: never cached)."""
    if Path(source).suffix.lower() != ".pt":
        return _ultralytics_export(source, shown, imgsz, opset, workdir)
    versions = package_versions(*EXPORTERS)
    key = hashlib.sha256(f"{EXPORT_CACHE}/{source_sha}/{imgsz}/{opset}/{versions}".encode()).hexdigest()[:32]
    entry = cache_root() / "exports" / f"{key}.onnx"
    cached = read_cached(entry)
    out = workdir / f"{Path(source).stem}.onnx"
    if cached is not None:
        out.write_bytes(cached)
        return out
    made = _ultralytics_export(source, shown, imgsz, opset, workdir)
    write_cached(entry, made.read_bytes())
    return made


def _from_onnx(path: Path, size: ImgSize | None, out_dir: str | Path | None) -> ExportedModel:
    """An ultralytics ONNX: validated, and with ``out_dir`` rewritten (never in place) into it."""
    exported = load_onnx(path)
    if size is not None and size != exported.meta.imgsz:
        raise YoloEdgeError(
            f"{path} was exported at imgsz {exported.meta.imgsz}, not {size}; re-export the .pt at that size or "
            "drop --imgsz"
        )
    if out_dir is None:
        return exported
    dst = Path(out_dir) / path.name
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    proto = onnx.load(str(path))
    if apply_rewrites(proto) or dst.resolve() != path.resolve():
        atomic_write(dst, proto.SerializeToString())
    return ExportedModel(path=dst, meta=exported.meta, layout=yolov8_layout(GraphInfo.of(proto)))


# What a checkpoint's pickle may name beyond torch's own weights-only allowlist: the classes of ultralytics' and torch's
# network modules (a model is an object tree of them). Anything else, a function above all (``posix.system``,
# ``builtins.eval``, ``subprocess.Popen``), is code the unpickler would run: a .pt is a program, not data.
SAFE_MODULES = ("ultralytics.nn.", "torch.nn.modules.", "numpy.dtypes.")
SAFE_GLOBALS = frozenset(
    {
        "ultralytics.utils.IterableSimpleNamespace",  # train_args in older checkpoints
        "argparse.Namespace",
        "pathlib.PosixPath",
        "pathlib.WindowsPath",
        "numpy.core.multiarray._reconstruct",  # numpy arrays in training metrics
        "numpy._core.multiarray._reconstruct",
        "numpy.core.multiarray.scalar",  # numpy scalars (a training run's metrics)
        "numpy._core.multiarray.scalar",
        "numpy.ndarray",
        "numpy.dtype",
        "_codecs.encode",
    }
)
MAX_INFLATE = 64  # a checkpoint member's declared size over its stored size: beyond this it is a zip bomb


def check_checkpoint(path: Path) -> None:
    """Refuse, before ultralytics unpickles it, a ``.pt`` whose pickle names anything but network classes
    (:data:`SAFE_MODULES`, :data:`SAFE_GLOBALS`): ultralytics loads checkpoints with a full unpickle, which runs
    whatever callable the file names. The names are read with torch's own scanner
    (``torch.serialization.get_unsafe_globals_in_checkpoint``), which unpickles nothing; a member that declares
    far more bytes than it stores (a zip bomb) is refused before torch allocates them."""
    import zipfile

    try:
        import torch.serialization
    except ImportError:  # no exporter here: export_model says what to install
        return
    try:
        with zipfile.ZipFile(path) as zf:
            bomb = [i.filename for i in zf.infolist() if i.file_size > MAX_INFLATE * max(i.compress_size, 1 << 16)]
    except (zipfile.BadZipFile, OSError) as exc:
        raise YoloEdgeError(
            f"cannot load {printable(path)}: it is not the zip torch.save writes ({exc}); pass a .pt saved by "
            "ultralytics"
        ) from None
    if bomb:
        raise YoloEdgeError(
            f"{printable(path)}: {printable(bomb[0])} declares {MAX_INFLATE}x more bytes than it stores"
        )
    try:
        names = torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
    except Exception as exc:  # a malformed pickle: what torch says of it, in one line
        raise YoloEdgeError(
            f"cannot load {printable(path)}: a damaged checkpoint ({type(exc).__name__}); re-save it"
        ) from None
    unsafe = sorted(n for n in names if not _network_class(n))
    if unsafe:
        shown = ", ".join(printable(n, 80) for n in unsafe[:3]) + (
            f" and {len(unsafe) - 3} more" if len(unsafe) > 3 else ""
        )
        raise YoloEdgeError(
            f"{printable(path)} would run code when loaded (its pickle calls {shown}), so it is not loaded: a .pt "
            "is a program; export it to ONNX where you trust its author (yolo export model=FILE format=onnx) and pass "
            "the .onnx"
        )


def _network_class(name: str) -> bool:
    """Whether the pickle global ``name`` is one of :data:`SAFE_GLOBALS` or a class of :data:`SAFE_MODULES`."""
    import importlib

    if name in SAFE_GLOBALS:
        return True
    module, _, attr = name.rpartition(".")
    if not name.startswith(SAFE_MODULES) or not attr.isidentifier():
        return False
    try:
        return isinstance(getattr(importlib.import_module(module), attr, None), type)
    except ImportError:
        return False


def check_model(model: str | Path) -> None:
    """The one-line error :func:`export_model` would give ``model`` before any work: a kind of file it does not take,
    a file that is not there (an ultralytics model name such as ``yolov8n.yaml`` is built, not read), an empty one."""
    model_str = str(model)
    path = Path(model_str)
    suffix = path.suffix.lower()
    if suffix not in (".onnx", ".pt", ".yaml", ".yml"):
        raise YoloEdgeError(f"unsupported model file '{model_str}': pass a .pt checkpoint, a model .yaml or an .onnx")
    if suffix == ".onnx":
        return  # load_onnx says what is wrong with it
    if not path.exists() and suffix == ".pt":
        raise YoloEdgeError(
            f"model not found: {model_str}; pass a .pt checkpoint, a model .yaml or an ultralytics ONNX"
        )
    if path.exists() and path.stat().st_size == 0:
        raise YoloEdgeError(f"{model_str} is empty; pass a valid checkpoint")
    if suffix == ".pt" and path.is_file():
        check_checkpoint(path)


def export_model(
    model: str | Path,
    imgsz: int | str | Sequence[int] | None = None,
    opset: int = DEFAULT_OPSET,
    out_dir: str | Path | None = None,
) -> ExportedModel:
    """Export ``model`` (.pt checkpoint, ultralytics model .yaml, or an ultralytics ONNX) to ``out_dir``.

    A ``.pt``/``.yaml`` goes through ultralytics (static batch 1, onnxslim-simplified, ``imgsz`` default
    640); the metadata (class names, strides, imgsz, reg_max, sha256 of the source) is stored in the
    ONNX. An ``.onnx`` is validated; its imgsz is fixed by the graph. The exact rewrites of
    :mod:`yolo_edge.model.rewrite` are applied to what is written to ``out_dir`` (an ``.onnx`` with no
    ``out_dir`` is used as is).
    """
    model_str = str(model)
    path = Path(model_str)
    size = parse_imgsz(imgsz) if imgsz is not None else None
    check_model(model_str)
    if path.suffix.lower() == ".onnx":
        return _from_onnx(path, size, out_dir)
    size = size or (640, 640)
    source_sha = sha256_file(path) if path.exists() else hashlib.sha256(model_str.encode()).hexdigest()
    out = Path(out_dir) if out_dir is not None else Path.cwd()
    with tempfile.TemporaryDirectory(prefix="yolo-edge-export-") as tmp:
        src = model_str
        if path.exists():  # ultralytics writes the ONNX beside the weights: export a private copy
            src = str(Path(tmp, path.name))
            shutil.copyfile(path, src)
        onnx_path = _cached_export(src, model_str, source_sha, size, opset, Path(tmp))
        exported = load_onnx(onnx_path)
        meta = ModelMeta(
            names=exported.meta.names,
            strides=exported.layout.strides,
            imgsz=exported.layout.imgsz,
            reg_max=exported.layout.reg_max,
            source=model_str,
            source_sha256=source_sha,
        )
        proto = onnx.load(str(onnx_path))
        onnx.helper.set_model_props(
            proto, {**{p.key: p.value for p in proto.metadata_props}, META_KEY: json.dumps(meta.to_dict())}
        )
        apply_rewrites(proto)
        out.mkdir(parents=True, exist_ok=True)  # only now: a model that fails to load leaves no empty --out behind
        dst = out / f"{path.stem}.onnx"
        atomic_write(dst, proto.SerializeToString())
    return ExportedModel(path=dst, meta=meta, layout=yolov8_layout(GraphInfo.of(proto)))
