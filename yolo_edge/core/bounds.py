"""A config number's valid range (``Annotated[float, Range(0, 1)]`` on a dataclass field), which ``config.build``
checks where the YAML is parsed."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Range:
    """A config number's valid range, ``Annotated[float, Range(0, 1)]`` on the field: ``lo`` <= (or <, ``lo_open``)
    value <= (or <, ``hi_open``) ``hi``, finite (never NaN). :func:`build` checks it where the YAML is parsed, so a
    value that would fail minutes into a deploy, or pass silently, is a one-line error up front."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def holds(self, v: float) -> bool:
        if not math.isfinite(v):  # NaN (not valid JSON in a report), or infinite
            return False
        if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
            return False
        return self.hi is None or (v < self.hi if self.hi_open else v <= self.hi)

    def __str__(self) -> str:
        if self.hi is None:
            return f"{'>' if self.lo_open else '>='} {self.lo:g}"
        if self.lo is None:
            return f"{'<' if self.hi_open else '<='} {self.hi:g}"
        return f"in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"
