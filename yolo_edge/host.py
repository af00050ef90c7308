"""The machine a figure was measured on: every measured latency in a report names it, because which
low-precision kernels exist (VNNI, AMX, AVX-512 BF16), and so which precision wins, differs between CPUs.

Example:
    >>> cpu_name()  # doctest: +SKIP
    'AMD EPYC (avx2, avx512f, avx512_vnni, avx512_bf16)'
"""

from __future__ import annotations

import platform
from functools import cache
from pathlib import Path

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
def cpu_name() -> str:
    """The CPU model and its low-precision ISA flags (from /proc/cpuinfo on Linux, else what Python knows)."""
    try:
        info = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    name = next(
        (line.split(":", 1)[1].strip() for line in info if line.startswith(("model name", "Model"))), platform.machine()
    )
    flags = set(next((line.split(":", 1)[1].split() for line in info if line.startswith(("flags", "Features"))), []))
    isa = [f for f in ISA_FLAGS if f in flags]
    return f"{name} ({', '.join(isa) or 'none of ' + '/'.join(ISA_FLAGS[:3])})"
