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

import contextlib
import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import printable, toolchains_root

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


@dataclass(frozen=True)
class Skipped:
    """An entry point that was not registered, and why (said in one line where the registry is first read)."""

    name: str  # the entry point's name
    value: str  # what it points at
    why: str

    def line(self) -> str:
        return f"the {ENTRY_POINTS} entry point '{self.name}' ({self.value}) {self.why}: skipped"


@dataclass(frozen=True)
class Registry:
    """What the registry read: the backends by name, and the entry points it skipped."""

    specs: dict[str, BackendSpec]
    skipped: tuple[Skipped, ...]


@functools.cache
def read() -> Registry:
    """The registry, read when first needed (never at import: a plug-in's import runs no command's fate). Each entry
    point is loaded under a guard that catches everything but Ctrl-C (a ``sys.exit`` at import included) with what
    it prints sent to stderr (``--json`` output stays the command's); one that does not load, is not a valid spec
    or takes a registered name is skipped and said in one line on stderr, the others usable."""
    found: dict[str, BackendSpec] = {}
    skipped: list[Skipped] = []
    builtin = [importlib.metadata.EntryPoint(v.split(".")[2], v, ENTRY_POINTS) for v in BUILTIN]  # loaded alike
    for ep in [*builtin, *importlib.metadata.entry_points(group=ENTRY_POINTS)]:
        loaded, why = _load(ep)
        if why is None:
            why = _invalid(loaded)
        if why is None and loaded.name in found:
            why = f"registers '{loaded.name}', which is registered already"
        if why is not None:
            skipped.append(Skipped(ep.name, ep.value, why))
            print(f"yolo-edge: warning: {printable(skipped[-1].line(), 400)}", file=sys.stderr)
            continue
        found[loaded.name] = loaded
    return Registry(found, tuple(skipped))


def _load(ep: importlib.metadata.EntryPoint) -> tuple[Any, str | None]:
    """``ep``'s object, or why it did not load; its standard output goes to stderr while it loads, at the file
    descriptor too (a native extension's prints)."""
    if sys.stdout is not None:  # None: started with its standard output closed
        sys.stdout.flush()
    saved = _dup_stdout()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            return ep.load(), None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: B036 - a plug-in's sys.exit or bug must not decide a command's exit code
        return None, f"does not load: {type(exc).__name__}: {printable(exc, 200)}"
    finally:
        _restore_stdout(saved)


def _dup_stdout() -> int | None:
    try:
        saved = os.dup(1)
        os.dup2(2, 1)
        return saved
    except OSError:  # no descriptor 1 or 2 (a daemon): nothing to keep apart
        return None


def _restore_stdout(saved: int | None) -> None:
    if saved is not None:
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _invalid(loaded: object) -> str | None:
    """Why ``loaded`` is not a usable spec, or None."""
    if not isinstance(loaded, BackendSpec):
        return f"is a {type(loaded).__name__}, not a yolo_edge.core.registry.BackendSpec"
    if not isinstance(loaded.name, str) or not NAME.fullmatch(loaded.name):
        return f"names its runtime {printable(repr(loaded.name), 60)}, not lower-case letters, digits, '-' and '_'"
    if not isinstance(loaded.module, str) or not loaded.module:
        return "names no module (BackendSpec.module: the module whose backend_for(profile) builds it)"
    if not (isinstance(loaded.options, type) and issubclass(loaded.options, RuntimeOptions)):
        return "has options that are not a RuntimeOptions dataclass"
    for field_name in ("suffixes", "schemes", "quantizers"):
        value = getattr(loaded, field_name)
        if not isinstance(value, tuple) or not all(isinstance(v, str) and v for v in value):
            return f"has {field_name} {printable(repr(value), 60)}, not a tuple of strings"
    bad = [s for s in loaded.suffixes if not SUFFIX.fullmatch(s)]
    if bad:
        return f"has suffixes {printable(bad, 60)}: each is a file ending such as '.rknn' or '_vela.tflite'"
    if loaded.toolchain is not None and not isinstance(loaded.toolchain, Toolchain):
        return "has a toolchain that is not a yolo_edge.core.registry.Toolchain"
    return None


NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
SUFFIX = re.compile(r"[A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)+")  # a file ending: '.rknn', '_vela.tflite'; no '/'


def backends() -> dict[str, BackendSpec]:
    """Every registered backend by name: the built-in ones, then each installed package's (:func:`read`)."""
    return read().specs


def spec(runtime: str) -> BackendSpec:
    """The registered backend of a profile's ``runtime:``; a one-line error naming the registered ones, or saying
    which package would provide it."""
    registered = backends()
    if runtime in registered:
        return registered[runtime]
    raise YoloEdgeError(unregistered(runtime))


def unregistered(runtime: str) -> str:
    """What to say of a ``runtime:`` that no backend registers: the plug-in of that name that did not load, or the
    entry point a package would provide; the registered ones."""
    shown = printable(runtime, 60)
    names = ", ".join(backends())
    for s in read().skipped:
        if s.name == runtime:
            return f"runtime '{shown}' is a plug-in that did not load ({printable(s.why, 200)}); registered: {names}"
    return (
        f"runtime: must be one of {names}, got '{shown}' (a backend from another package: install the package whose "
        f"{ENTRY_POINTS} entry point registers '{shown}')"
    )


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
