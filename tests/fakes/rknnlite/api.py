"""A FAKE of Rockchip's board runtime (``rknn-toolkit-lite2``, aarch64 only: there is no board here).

It checks the calls yolo-edge makes (``load_rknn`` of a real ``.rknn`` file, ``init_runtime`` with a core
mask, ``inference`` on NCHW float32 inputs) and logs them to ``$FAKE_RKNNLITE_LOG`` (JSON lines); its outputs
are the ones Rockchip's simulator gave for the same inputs on the host, read from ``$FAKE_RKNNLITE_RECORDINGS``
(an .npz keyed by ``<sha1 of the inputs>/<output index>``). An input it has no recording for is an error.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import numpy as np


def inputs_key(arrays: list[np.ndarray]) -> str:
    h = hashlib.sha1()
    for a in arrays:
        h.update(np.ascontiguousarray(a, dtype=np.float32).tobytes())
    return h.hexdigest()


def _log(**event: Any) -> None:
    with open(os.environ["FAKE_RKNNLITE_LOG"], "a") as f:
        f.write(json.dumps(event) + "\n")


class RKNNLite:
    NPU_CORE_AUTO, NPU_CORE_0, NPU_CORE_1, NPU_CORE_2 = 0, 1, 2, 4
    NPU_CORE_0_1, NPU_CORE_0_1_2, NPU_CORE_ALL = 3, 7, 0xFFFF

    def __init__(self) -> None:
        self._recordings = np.load(os.environ["FAKE_RKNNLITE_RECORDINGS"])
        self._loaded: str | None = None
        self._ready = False

    def load_rknn(self, path: str) -> int:
        with open(path, "rb") as f:
            data = f.read()
        if not data.startswith(b"RKNN"):
            raise ValueError(f"{path} is not an .rknn file")
        self._loaded = path
        _log(call="load_rknn", sha256=hashlib.sha256(data).hexdigest())
        return 0

    def init_runtime(self, core_mask: int = NPU_CORE_AUTO) -> int:
        assert self._loaded is not None, "init_runtime before load_rknn"
        self._ready = True
        _log(call="init_runtime", core_mask=core_mask)
        return 0

    def inference(self, inputs: list[np.ndarray], data_format: Any = None) -> list[np.ndarray]:
        assert self._ready, "inference before init_runtime"
        assert all(a.dtype == np.float32 and a.ndim == 4 for a in inputs), [(a.dtype, a.shape) for a in inputs]
        key = inputs_key(inputs)
        outs = sorted(
            (k for k in self._recordings.files if k.startswith(key + "/")), key=lambda k: int(k.split("/")[1])
        )
        _log(call="inference", data_format=data_format, recorded=bool(outs))
        if not outs:
            raise RuntimeError("fake RKNNLite: no simulator recording for these inputs")
        return [self._recordings[k] for k in outs]

    def release(self) -> None:
        _log(call="release")
