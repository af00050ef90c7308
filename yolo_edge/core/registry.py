"""The backends a device profile may name, one :class:`BackendSpec` each: the ``runtime:`` name, the module whose
``backend_for(profile)`` builds it (imported when first used: a vendor SDK is loaded only by the profiles that need
it), the artifact suffixes its executables store in a bundle, the INT8 activation schemes and quantizers its
variants may name, its own ``runtime_options`` dataclass (which ``config`` builds from a profile's YAML with the
same strict checks as every other section) and, where its compiler cannot share yolo-edge's environment, its
:class:`Toolchain`.

A vendor is one folder: ``yolo_edge/backends/<vendor>/`` holds its ``spec.py`` (the spec, its options and suffixes,
its toolchain: light, the registry reads it at start), its backend and board runtime, and its toolchain's worker;
its profiles are YAML files and its tests a module. Built in, it is one line of :data:`BUILTIN`; from **another
installed package**, an entry point in the group ``yolo_edge.backends`` whose object is its :class:`BackendSpec` (as
pytest plugins and ExecuTorch's backends register), with no edit to yolo-edge: ``pyproject.toml``'s
``[project.entry-points."yolo_edge.backends"]`` ``my-npu = "my_npu.spec:SPEC"``, and a profile whose ``runtime:`` is
its name. Nothing else names a runtime, a scheme, a quantizer or a toolchain: a profile's ``runtime:``, a variant's
scheme and quantizer, a bundle's unit files and ``yolo-edge toolchain`` are checked against what is registered
(:func:`backends`). Standard library only (and the base's ``files``): ``config`` reads it, every layer may. A
contract test runs every registered backend through the same cases, and a toy backend from a package of its own
through them and a deploy (``tests/test_backends.py``).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import toolchains_root

# artifact suffixes: what a bundle stores of a compiled unit (``Executable.artifact_files``), beside its FP32 graph
QDQ_SUFFIX = ".int8.onnx"  # the INT8 QDQ graph that onnxruntime and OpenVINO run (a vendor's own: in its spec)


@dataclass(frozen=True)
class RuntimeOptions:
    """A profile's ``runtime_options``: each backend's own fields (a subclass), checked when the profile is read."""

    def stand_in(self) -> str | None:
        """What "npu" is where the accelerator is this host's CPU, said wherever the placement is shown; None: a
        real or simulated accelerator."""
        return None


@dataclass(frozen=True)
class Toolchain:
    """A vendor's compiler in a pinned environment of its own (``yolo_edge.toolchains`` installs it and runs
    ``worker`` in it: standard library, numpy and the toolchain only)."""

    name: str
    version: str
    what: str
    python: str  # the interpreter version its wheels are built for
    steps: tuple[tuple[str, ...], ...]  # pip install arguments, one install per step, in order
    worker: str  # the worker module, by its dotted name (run as a file by the toolchain's interpreter)
    size: str  # what a user should expect to download

    @property
    def env_dir(self) -> Path:
        """``$YOLO_EDGE_TOOLCHAINS/<name>-<version>-<pins>``, by default under the user's yolo-edge cache; ``pins``
        hashes the install steps, so changed pins make a new environment instead of reusing a stale one."""
        pins = hashlib.sha256(repr(self.steps).encode()).hexdigest()[:8]
        return toolchains_root() / f"{self.name}-{self.version}-{pins}"

    @property
    def python_path(self) -> Path:
        return self.env_dir / "bin" / "python"

    @property
    def worker_path(self) -> Path:
        found = importlib.util.find_spec(self.worker)
        if found is None or found.origin is None:
            raise YoloEdgeError(f"{self.name}: its worker module {self.worker} is not installed")
        return Path(found.origin)

    @property
    def install_hint(self) -> str:
        return f"install it with `yolo-edge toolchain install {self.name}` ({self.size}, a few minutes)"


@dataclass(frozen=True)
class BackendSpec:
    name: str  # a profile's ``runtime:``
    module: str  # whose ``backend_for(profile)`` builds the backend
    options: type[RuntimeOptions]
    suffixes: tuple[str, ...] = ()  # what its executables store in a bundle
    schemes: tuple[str, ...] = ()  # INT8 activation schemes its variants may name
    quantizers: tuple[str, ...] = ()  # INT8 quantizers its variants may name
    toolchain: Toolchain | None = None  # its compiler's own environment, where it cannot share yolo-edge's


ENTRY_POINTS = "yolo_edge.backends"  # the group another installed package registers its backends' specs in

# the built-in backends, each a folder of yolo_edge/backends/ whose spec module names it as an entry point would
BUILTIN = tuple(
    f"yolo_edge.backends.{folder}.spec:SPEC" for folder in ("onnxruntime", "openvino", "rknn", "qnn", "ethos_u")
)


@functools.cache
def backends() -> dict[str, BackendSpec]:
    """Every registered backend by name: the built-in ones, then each installed package's (read once; an entry
    point that does not load, is not a spec or takes a registered name is a one-line error naming it)."""
    found: dict[str, BackendSpec] = {}
    builtin = [importlib.metadata.EntryPoint(v.split(".")[2], v, ENTRY_POINTS) for v in BUILTIN]  # loaded alike
    for ep in [*builtin, *importlib.metadata.entry_points(group=ENTRY_POINTS)]:
        where = f"the {ENTRY_POINTS} entry point '{ep.name}' ({ep.value})"
        try:
            loaded = ep.load()
        except Exception as exc:  # a plug-in's own bug: said in one line, not a traceback
            raise YoloEdgeError(f"{where} does not load: {type(exc).__name__}: {exc}") from None
        if not isinstance(loaded, BackendSpec):
            raise YoloEdgeError(f"{where} is a {type(loaded).__name__}, not a yolo_edge.core.registry.BackendSpec")
        if loaded.name in found:
            raise YoloEdgeError(f"{where} registers '{loaded.name}', which is registered already")
        found[loaded.name] = loaded
    return found


def spec(runtime: str) -> BackendSpec:
    """The registered backend of a profile's ``runtime:``; a one-line error naming the registered ones."""
    registered = backends()
    try:
        return registered[runtime]
    except KeyError:
        raise YoloEdgeError(f"runtime: must be one of {', '.join(registered)}, got '{runtime}'") from None


def artifact_suffixes() -> tuple[str, ...]:
    """Every suffix a bundle's unit files may have besides ``.onnx``: what some registered backend stores."""
    return tuple(dict.fromkeys(s for b in backends().values() for s in b.suffixes))


def schemes() -> tuple[str, ...]:
    """Every INT8 activation scheme some registered backend compiles."""
    return tuple(dict.fromkeys(s for b in backends().values() for s in b.schemes))


def toolchains() -> dict[str, Toolchain]:
    """Every registered backend's toolchain, by name."""
    return {b.toolchain.name: b.toolchain for b in backends().values() if b.toolchain is not None}


def quantizers() -> tuple[str, ...]:
    """Every INT8 quantizer some registered backend runs."""
    return tuple(dict.fromkeys(q for b in backends().values() for q in b.quantizers))
