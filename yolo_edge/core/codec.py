"""The one codec from yolo-edge's records to JSON and YAML, with the one rounding rule.

Every document yolo-edge writes (a bundle's meta.json, plan.json, units.json and report.json, the gate's and val's
JSON, ``--json`` output, the event log, a sweep's results) is made of :func:`plain` values: a dataclass by its fields,
a tuple as a list, a NumPy scalar as Python's, a path as a string, and every float rounded to :data:`ROUND` decimals,
here and nowhere else (a record's ``to_dict`` builds its shape and returns ``plain(...)``; it never rounds by hand).
Settings that must come back exactly (a bundle's deploy.yaml and profile.yaml) are written with :func:`exact`, which
is the same without the rounding.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import PurePath
from typing import Any

import numpy as np

ROUND = 5  # decimals of a float as written: milliseconds to 10 ns, cosines, mAP and ratios to 1e-5


def plain(obj: Any) -> Any:
    """``obj`` as JSON's types, every float rounded to :data:`ROUND` decimals."""
    return _plain(obj, ROUND)


def exact(obj: Any) -> Any:
    """``obj`` as JSON's (and YAML's) types, every float as it is: settings read back must be the same numbers."""
    return _plain(obj, None)


def dumps(obj: Any, indent: int | None = 2) -> str:
    """``plain(obj)`` as JSON text (``indent=None``: one line, as a JSON-lines record)."""
    return json.dumps(plain(obj), indent=indent)


def _plain(obj: Any, digits: int | None) -> Any:
    if isinstance(obj, bool | int | str) or obj is None:
        return obj
    if isinstance(obj, float | np.floating):
        return float(obj) if digits is None else round(float(obj), digits)
    if isinstance(obj, np.integer | np.bool_):
        return obj.item()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name), digits) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): _plain(v, digits) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset | np.ndarray):
        return [_plain(v, digits) for v in (sorted(obj) if isinstance(obj, set | frozenset) else obj)]
    if isinstance(obj, PurePath):
        return str(obj)
    raise TypeError(f"{type(obj).__name__} has no JSON form")
