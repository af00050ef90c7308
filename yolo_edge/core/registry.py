"""The backends a device profile may name, one :class:`BackendSpec` each: the ``runtime:`` name, the module whose
``backend_for(profile)`` builds it (imported when first used: a vendor SDK is loaded only by the profiles that need
it), the artifact suffixes its executables store in a bundle, the INT8 activation schemes and quantizers its
variants may name, and its own ``runtime_options`` dataclass, which ``config`` builds from a profile's YAML with the
same strict checks as every other section.

A backend is its module and one spec: built in, an entry here (:data:`BUILTIN`); or from **another installed
package**, an entry point in the group ``yolo_edge.backends`` whose object is its :class:`BackendSpec` (as pytest
plugins and ExecuTorch's backends register), with no edit to yolo-edge: ``pyproject.toml``'s
``[project.entry-points."yolo_edge.backends"]`` ``my-npu = "my_npu.spec:SPEC"``, and a profile whose ``runtime:`` is
its name. Nothing else names a runtime, a scheme or a quantizer: a profile's ``runtime:``, a variant's scheme and
quantizer and a bundle's unit files are checked against what is registered (:func:`backends`). Standard library
only (and ``bounds``): ``config`` reads it, every layer may. A contract test runs every registered backend through
the same cases, and a toy backend from a package of its own through them and a deploy (``tests/test_backends.py``).
"""

from __future__ import annotations

import functools
import importlib.metadata
from dataclasses import dataclass
from typing import Annotated

from yolo_edge.core.bounds import Range
from yolo_edge.core.errors import YoloEdgeError

# artifact suffixes: what a bundle stores of a compiled unit (``Executable.artifact_files``), beside its FP32 graph
QDQ_SUFFIX = ".int8.onnx"  # the INT8 QDQ graph that onnxruntime and OpenVINO run
OV_XML_SUFFIX, OV_BIN_SUFFIX = ".ov.xml", ".ov.bin"  # an OpenVINO IR: NNCF's quantized model
RKNN_SUFFIX = ".rknn"  # Rockchip's compiled graph, for RKNNLite on the board
QNN_SUFFIX = ".qnn.onnx"  # Qualcomm's HTP: an EPContext model, its context binary embedded
# Arm Ethos-U: the integer TFLite, Vela's build of it, and which TFLite tensor each ONNX tensor is
TFLITE_SUFFIX, VELA_SUFFIX, TFLITE_IO_SUFFIX = ".tflite", "_vela.tflite", ".tflite.json"


@dataclass(frozen=True)
class RuntimeOptions:
    """A profile's ``runtime_options``: each backend's own fields (a subclass), checked when the profile is read."""

    def stand_in(self) -> str | None:
        """What "npu" is where the accelerator is this host's CPU, said wherever the placement is shown; None: a
        real or simulated accelerator."""
        return None


@dataclass(frozen=True)
class OnnxRuntimeOptions(RuntimeOptions):
    providers: tuple[str, ...] = ()  # onnxruntime execution providers, in priority order (none: the CPU's)


@dataclass(frozen=True)
class OpenVinoOptions(RuntimeOptions):
    device: str = "CPU"  # the OpenVINO device (CPU, GPU, NPU)
    # INT8 activations: u8 (asymmetric), s8 (symmetric) or auto (the planner measures both, tries the faster first
    # and keeps it only if its numerics pass; which one wins, and whether s8 is accurate, depends on the CPU)
    int8_activations: str = "auto"
    # INT8 quantizer: nncf (OpenVINO's own; the shipped profiles' choice), nncf-minmax (NNCF with every activation's
    # range its calibration minimum and maximum, no rare value clipped), qdq (onnxruntime's quantize_static with the
    # Q/DQ placed as NNCF places them), or auto (all are candidates: the precision check and the verdict decide, at
    # three times the planning time; benchmarks/quantizers.py compares them). With one chosen, the others are tried in
    # that order for a subgraph whose every INT8 variant fails the precision check, until one passes
    # (benchmarks/head_int8_scores.py: NNCF's INT8 head of the tests' second model moves a class score by 0.13, the
    # QDQ recipe's by 0.025; with --fused, the backbone+neck+head unit with min-max ranges by 0.06 at 0.94x the QDQ
    # recipe's time, NNCF's default at 0.93x)
    int8_quantizer: str = "auto"

    SCHEMES = ("u8", "s8")  # what int8_activations: auto considers, in the order tried when their speeds tie
    QUANTIZERS = ("nncf", "nncf-minmax", "qdq")

    def __post_init__(self) -> None:
        for what, value, valid in (
            ("int8_activations", self.int8_activations, (*self.SCHEMES, "auto")),
            ("int8_quantizer", self.int8_quantizer, (*self.QUANTIZERS, "auto")),
        ):
            if value not in valid:
                raise YoloEdgeError(f"runtime_options.{what} must be one of {', '.join(valid)}, got '{value}'")

    @property
    def int8_schemes(self) -> tuple[str, ...]:
        """The INT8 activation schemes to consider, in the order tried when their speeds tie."""
        return self.SCHEMES if self.int8_activations == "auto" else (self.int8_activations,)

    @property
    def int8_quantizers(self) -> tuple[str, ...]:
        """The INT8 quantizers to consider, the preferred first."""
        return self.QUANTIZERS if self.int8_quantizer == "auto" else (self.int8_quantizer,)

    def stand_in(self) -> str | None:
        if self.device.upper().startswith("CPU"):
            return "npu = OpenVINO's CPU plugin on this host, its low-precision kernels (no NPU)"
        return None


CORE_MASKS = ("auto", "0", "1", "2", "0_1", "0_1_2", "all")


@dataclass(frozen=True)
class RknnOptions(RuntimeOptions):
    target: str = ""  # the chip the compiler builds for (target_platform), e.g. rk3588; default: the profile's name
    # on the board, with npu_cores 1: the cores the one context runs on (RKNNLite.NPU_CORE_<mask>); with several
    # npu_cores, a stream has one context pinned to each core instead
    core_mask: str = "auto"

    def __post_init__(self) -> None:
        if self.core_mask not in CORE_MASKS:
            raise YoloEdgeError(
                f"runtime_options.core_mask must be one of {', '.join(CORE_MASKS)}, got '{self.core_mask}'"
            )


@dataclass(frozen=True)
class QnnOptions(RuntimeOptions):
    htp_arch: str = ""  # the Hexagon NPU's architecture, as the QNN EP's htp_arch option names it (68, 73)
    vtcm_mb: Annotated[int, Range(0)] = 0  # its VTCM (the NPU's tightly coupled memory), in MB
    int8_activations: str = "auto"  # w8a8 (uint8), w8a16 (uint16 activations), or auto (both are candidates)

    SCHEMES = ("w8a8", "w8a16")

    def __post_init__(self) -> None:
        if self.int8_activations not in (*self.SCHEMES, "auto"):
            raise YoloEdgeError(
                f"runtime_options.int8_activations of qnn must be one of {', '.join(self.SCHEMES)}, auto; got "
                f"'{self.int8_activations}'"
            )

    @property
    def int8_schemes(self) -> tuple[str, ...]:
        return self.SCHEMES if self.int8_activations == "auto" else (self.int8_activations,)


@dataclass(frozen=True)
class EthosUOptions(RuntimeOptions):
    accelerator: str = "ethos-u55-128"  # Vela's --accelerator-config
    vela_config: str = "ethos-u.vela.ini"  # the board's Vela .ini (a shipped one by name, or a path)
    system_config: str = "Ethos_U55_High_End_Embedded"  # a [System_Config.<name>] of it: clocks, AXI ports, latencies
    memory_mode: str = "Shared_Sram"  # a [Memory_Mode.<name>] of it: where the arena, weights and cache live
    int8_activations: str = "auto"  # w8a8 (int8), w8a16 (TFLite's 16x8: int16 activations), or auto (both)
    device: str = "/dev/ethosu0"  # the NPU's driver node: where it exists, this is the board
    delegate: str = "libethosu_delegate.so"  # LiteRT's Ethos-U delegate on the board

    SCHEMES = ("w8a8", "w8a16")
    ACCELERATORS = ("ethos-u55-32", "ethos-u55-64", "ethos-u55-128", "ethos-u55-256", "ethos-u65-256", "ethos-u65-512")

    def __post_init__(self) -> None:
        for what, value, valid in (
            ("int8_activations", self.int8_activations, (*self.SCHEMES, "auto")),
            ("accelerator", self.accelerator, self.ACCELERATORS),
        ):
            if value not in valid:
                raise YoloEdgeError(
                    f"runtime_options.{what} of ethos-u must be one of {', '.join(valid)}, got '{value}'"
                )

    @property
    def int8_schemes(self) -> tuple[str, ...]:
        return self.SCHEMES if self.int8_activations == "auto" else (self.int8_activations,)


@dataclass(frozen=True)
class BackendSpec:
    name: str  # a profile's ``runtime:``
    module: str  # whose ``backend_for(profile)`` builds the backend
    options: type[RuntimeOptions]
    suffixes: tuple[str, ...] = ()  # what its executables store in a bundle
    schemes: tuple[str, ...] = ()  # INT8 activation schemes its variants may name
    quantizers: tuple[str, ...] = ()  # INT8 quantizers its variants may name


ENTRY_POINTS = "yolo_edge.backends"  # the group another installed package registers its backends' specs in

BUILTIN: dict[str, BackendSpec] = {
    s.name: s
    for s in (
        BackendSpec(
            "onnxruntime", "yolo_edge.backends.onnxruntime", OnnxRuntimeOptions, (QDQ_SUFFIX,), ("u8",), ("qdq",)
        ),
        BackendSpec(
            "openvino",
            "yolo_edge.backends.openvino",
            OpenVinoOptions,
            (QDQ_SUFFIX, OV_XML_SUFFIX, OV_BIN_SUFFIX),
            OpenVinoOptions.SCHEMES,
            OpenVinoOptions.QUANTIZERS,
        ),
        BackendSpec("rknn", "yolo_edge.backends.rknn", RknnOptions, (RKNN_SUFFIX,), ("w8a8",), ("rknn",)),
        BackendSpec("qnn", "yolo_edge.backends.qnn", QnnOptions, (QNN_SUFFIX,), QnnOptions.SCHEMES, ("qnn",)),
        BackendSpec(
            "ethos-u",
            "yolo_edge.backends.ethos_u",
            EthosUOptions,
            (VELA_SUFFIX, TFLITE_IO_SUFFIX, TFLITE_SUFFIX),  # _vela.tflite first: a bundle file takes the first match
            EthosUOptions.SCHEMES,
            ("tflite",),
        ),
    )
}


@functools.cache
def backends() -> dict[str, BackendSpec]:
    """Every registered backend by name: the built-in ones, then each installed package's (read once; an entry
    point that does not load, is not a spec or takes a registered name is a one-line error naming it)."""
    found = dict(BUILTIN)
    for ep in importlib.metadata.entry_points(group=ENTRY_POINTS):
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


def quantizers() -> tuple[str, ...]:
    """Every INT8 quantizer some registered backend runs."""
    return tuple(dict.fromkeys(q for b in backends().values() for q in b.quantizers))
