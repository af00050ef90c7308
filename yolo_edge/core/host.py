"""The machine a figure was measured on: every measured latency in a report names it, because which
low-precision kernels exist (VNNI, AMX, AVX-512 BF16), and so which precision wins, differs between CPUs.
And how many of its cores one inference session may use (``YOLO_EDGE_THREADS``).

Example:
    >>> cpu_name()  # doctest: +SKIP
    'AMD EPYC (avx2, avx512f, avx512_vnni, avx512_bf16)'
"""

from __future__ import annotations

import os
import platform
from functools import cache
from pathlib import Path

from yolo_edge.core.errors import YoloEdgeError

ISA_FLAGS = (
    "avx2",
    "avx512f",
    "avx512_vnni",
    "avx_vnni",
    "avx512_bf16",
    "amx_int8",
    "amx_bf16",
    "asimddp",
    "i8mm",
    "bf16",
)


@cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none)."""
    try:
        info = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return frozenset()
    return frozenset(
        next((line.split(":", 1)[1].split() for line in info if line.startswith(("flags", "Features"))), [])
    )


THREADS_ENV = "YOLO_EDGE_THREADS"


def runtime_threads() -> int:
    """Threads each inference session may use (onnxruntime's intra-op pool, OpenVINO's ``INFERENCE_NUM_THREADS``), from
    ``$YOLO_EDGE_THREADS``; 0 (unset): the runtime's default, a thread per core. Processes that share the cores
    (a camera each on one board, a test run's workers) set it so that their pools do not oversubscribe them."""
    value = os.environ.get(THREADS_ENV, "").strip()
    if not value:
        return 0
    if not value.isdigit() or int(value) < 1:
        raise YoloEdgeError(
            f"{THREADS_ENV}={value[:20]!r} is not a thread count; set it to a positive integer, or unset it for a "
            "thread per core"
        )
    cores = os.cpu_count() or 1
    if int(value) > cores:  # more threads than cores only contend (2000 on 2 cores: a minute an image)
        raise YoloEdgeError(
            f"{THREADS_ENV}={value[:20]} is more threads than the {cores} cores here; set it to at most {cores}, or "
            "unset it for a thread per core"
        )
    return int(value)


_SATURATING_ISA = ("SSE41", "AVX", "AVX2", "AVX512_CORE")  # oneDNN's ISA names below its first VNNI one


def int8_products_saturate() -> bool:
    """Whether this CPU's INT8 kernels sum u8 x s8 products in int16 (x86 without VNNI or AMX: pmaddubsw), so
    that full-range weights can overflow; what NNCF's overflow fix is for. oneDNN's documented dispatcher
    control ``ONEDNN_MAX_CPU_ISA`` (e.g. ``AVX2``), which caps the kernels OpenVINO's CPU plugin picks, counts."""
    if platform.machine().lower() not in ("x86_64", "amd64", "i686", "x86"):
        return False
    if os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper() in _SATURATING_ISA:
        return True
    return not cpu_flags() & {"avx512_vnni", "avx_vnni", "amx_int8"}


# oneDNN's ISA names below its first with native kernels of each precision (OpenVINO's capability names)
_WITHOUT = {
    "BF16": (*_SATURATING_ISA, "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE_VNNI"),
    "FP16": (*_SATURATING_ISA, "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE_VNNI", "AVX512_CORE_BF16"),
}


def capped_kernels() -> frozenset[str]:
    """The low-precision kernels (``BF16``, ``FP16``) that ``ONEDNN_MAX_CPU_ISA`` takes away from OpenVINO's CPU
    plugin on this machine: the plugin still lists them from the CPU's flags, and a graph compiled at that precision
    then fails."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    return frozenset(kind for kind, below in _WITHOUT.items() if cap in below)


@cache
def cpu_name() -> str:
    """The CPU model and its low-precision ISA flags (from /proc/cpuinfo on Linux, else what Python knows)."""
    try:
        info = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    name = next(
        (line.split(":", 1)[1].strip() for line in info if line.startswith(("model name", "Model"))), platform.machine()
    )
    isa = [f for f in ISA_FLAGS if f in cpu_flags()]
    return f"{name} ({', '.join(isa) or 'none of ' + '/'.join(ISA_FLAGS[:3])})"
