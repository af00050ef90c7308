"""Rockchip rknn-toolkit2 worker: runs inside the toolchain's own environment (its numpy, onnx and torch
pins), started by ``yolo_edge.toolchains.Worker`` with this file's path. Standard library, numpy, ``rknn.api``
and (to read hybrid quantization's graph) the toolchain's own onnx only.

Ops (``wire.serve``): ``hello``; ``compile`` (ONNX + calibration dataset file -> RKNN object built for the
target, optionally exported as ``.rknn``, then loaded on Rockchip's simulator under a key; with ``kept`` layers,
Rockchip's hybrid quantization keeps those convolutions in float16); ``run`` (the
simulator on one set of inputs, NCHW); ``accuracy`` (Rockchip's per-layer ``accuracy_analysis`` of a fresh
build on given inputs); ``release``. Refusals are reported through the request's captured log, which the
client parses: this module only drives the toolkit.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np

# yolo_edge/toolchains, where wire.py is: the Worker passes it (imported elsewhere, the package's own beside this one)
sys.path.insert(
    0, (sys.argv[1:2] or [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "toolchains")])[0]
)
from wire import Arrays, serve  # noqa: E402  (by path: this file runs in the toolchain's environment)

_BUILT: dict[str, Any] = {}


def _rknn() -> Any:
    from rknn.api import RKNN  # imported lazily: `hello` reports a broken install instead of dying on it

    return RKNN(verbose=False)


def _build(args: dict[str, Any]) -> Any:
    r = _rknn()
    if r.config(target_platform=args["target"], **args.get("config", {})) != 0:
        raise RuntimeError("config failed")
    if r.load_onnx(model=args["onnx"]) != 0:
        raise RuntimeError("load_onnx failed")
    quantize = args["precision"] == "int8"
    if quantize and args.get("kept"):
        return _hybrid(r, args)
    if r.build(do_quantization=quantize, dataset=args.get("dataset") if quantize else None) != 0:
        raise RuntimeError("build failed")
    return r


def _hybrid(r: Any, args: dict[str, Any]) -> Any:
    """Rockchip's hybrid quantization: step 1 writes the quantized graph and its config beside the ONNX, the
    ``kept`` layers (by their output tensors) and the activations they read are listed under
    ``custom_quantize_layers`` as float16 (a layer kept out of INT8 reads unquantized inputs, as NNCF's ignored
    scope leaves them), step 2 builds from them."""
    folder, stem = os.path.split(os.path.splitext(args["onnx"])[0])
    here = os.getcwd()
    os.chdir(folder)  # step 1 writes <stem>.model, .data and .quantization.cfg into the current folder
    try:
        if r.hybrid_quantization_step1(dataset=args["dataset"]) != 0:
            raise RuntimeError("hybrid_quantization_step1 failed")
        r.release()
        cfg = f"{stem}.quantization.cfg"
        with open(cfg) as f:
            text = f.read()
        layers = "".join(f"    '{name}': float16\n" for name in _with_inputs(f"{stem}.model", args["kept"]))
        with open(cfg, "w") as f:
            f.write(text.replace("custom_quantize_layers: {}\n", f"custom_quantize_layers:\n{layers}", 1))
        r = _rknn()
        if r.hybrid_quantization_step2(f"{stem}.model", f"{stem}.data", cfg) != 0:
            raise RuntimeError("hybrid_quantization_step2 failed")
        return r
    finally:
        os.chdir(here)


def _with_inputs(model_path: str, kept: list[str]) -> list[str]:
    """``kept`` output tensors and the activations their layers read, in step 1's quantized graph (an ONNX file)."""
    import onnx

    graph = onnx.load(model_path).graph
    produced = {o for n in graph.node for o in n.output}
    found = dict.fromkeys(kept)
    for node in graph.node:
        if any(o in kept for o in node.output):
            found.update(dict.fromkeys(i for i in node.input if i in produced))
    return list(found)


def hello(args: dict[str, Any], arrays: Arrays) -> tuple[dict[str, Any], Arrays]:
    from importlib.metadata import version

    return {"toolkit": version("rknn-toolkit2"), "numpy": np.__version__, "python": sys.version.split()[0]}, {}


def compile_(args: dict[str, Any], arrays: Arrays) -> tuple[dict[str, Any], Arrays]:
    t0 = time.perf_counter()
    r = _build(args)
    build_s = time.perf_counter() - t0
    if args.get("rknn") and r.export_rknn(args["rknn"]) != 0:
        raise RuntimeError("export_rknn failed")
    if r.init_runtime() != 0:  # no target: Rockchip's simulator on this host
        raise RuntimeError("init_runtime (simulator) failed")
    old = _BUILT.pop(args["key"], None)
    if old is not None:
        old.release()
    _BUILT[args["key"]] = r
    return {"build_s": build_s}, {}


def run(args: dict[str, Any], arrays: Arrays) -> tuple[dict[str, Any], Arrays]:
    inputs = [arrays[str(i)] for i in range(len(arrays))]
    layout = ["nchw"] * len(inputs) if all(a.ndim == 4 for a in inputs) else None
    outs = _BUILT[args["key"]].inference(inputs=inputs, data_format=layout)
    if outs is None:
        raise RuntimeError("inference failed")
    return {}, {str(i): np.asarray(o, dtype=np.float32) for i, o in enumerate(outs)}


def accuracy(args: dict[str, Any], arrays: Arrays) -> tuple[dict[str, Any], Arrays]:
    r = _build(args)
    try:
        if r.accuracy_analysis(inputs=args["inputs"], output_dir=args["output_dir"]) != 0:
            raise RuntimeError("accuracy_analysis failed")
    finally:
        r.release()
    return {"report": os.path.join(args["output_dir"], "error_analysis.txt")}, {}


def release(args: dict[str, Any], arrays: Arrays) -> tuple[dict[str, Any], Arrays]:
    r = _BUILT.pop(args["key"], None)
    if r is not None:
        r.release()
    return {}, {}


if __name__ == "__main__":
    serve({"hello": hello, "compile": compile_, "run": run, "accuracy": accuracy, "release": release})
