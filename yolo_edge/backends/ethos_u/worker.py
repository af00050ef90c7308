"""Arm Ethos-U worker: runs inside the toolchain's own environment (TensorFlow 2.19, onnx2tf, Arm's Vela), started
by ``yolo_edge.toolchains.Worker`` with this file's path. Standard library, numpy and the toolchain only.

Ops (``wire.serve``): ``hello``; ``convert`` (an ONNX subgraph -> onnx2tf's Keras model -> TensorFlow Lite's
post-training full-integer quantization, calibrated on the subgraph's own FP32 inputs, int8 or 16x8 activations,
integer inputs and outputs; writes the ``.tflite`` and returns how its tensors map to the ONNX graph's: which
TFLite input or output each ONNX tensor is, and the axis order between them, checked on the first calibration sample
by running the float Keras model beside onnxruntime); ``vela`` (Arm's Vela compiles a ``.tflite`` for an Ethos-U
configuration: its summary CSV, the operators it leaves to the CPU, and the ``_vela.tflite``).
"""

from __future__ import annotations

import csv
import glob
import os
import re
import subprocess
import sys
import time
from typing import Any

import numpy as np

# yolo_edge/toolchains, where wire.py is: the Worker passes it (imported elsewhere, the package's own beside this one)
sys.path.insert(
    0, (sys.argv[1:2] or [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "toolchains")])[0]
)
from wire import Arrays, serve  # noqa: E402  (by path: this file runs in the toolchain's environment)

# onnx2tf runs an image-shaped model once on sample data it downloads unless this file is in the working folder;
# the worker writes the unit's own calibration samples there (nothing is fetched)
_SAMPLE_FILE = "calibration_image_sample_data_20x128x128x3_float32.npy"
_CPU_OP = re.compile(r"^\s*(?:Warning: )?(?P<op>[A-Z][A-Z0-9_]+)\s.*(?:cannot be placed|is not supported|CPU)", re.M)


def hello(args: dict[str, Any], arrays: Arrays) -> tuple[dict[str, Any], Arrays]:
    from importlib.metadata import version

    names = ("tensorflow", "onnx2tf", "ethos-u-vela", "ai-edge-litert")
    return {**{n: version(n) for n in names}, "numpy": np.__version__, "python": sys.version.split()[0]}, {}


def _perm(src: tuple[int, ...], dst: tuple[int, ...]) -> list[list[int]]:
    """The axis orders ``p`` with ``np.transpose(a, p)`` of shape ``dst`` for ``a`` of shape ``src``: as is, or
    between channels-first and channels-last (onnx2tf's layout of 3-D and 4-D tensors); several where the shapes
    cannot tell them apart, the layout change last."""
    rank = len(dst)
    candidates = [list(range(rank))]
    if rank >= 3:
        candidates += [[0, rank - 1, *range(1, rank - 1)], [0, *range(2, rank), 1]]
    found = []
    for p in candidates:
        if len(src) == rank and tuple(src[i] for i in p) == tuple(dst) and p not in found:
            found.append(p)
    return found


def _positions(details: list[dict[str, Any]], keras_names: list[str], stem: str) -> list[int]:
    """Where each Keras tensor (by order, named ``keras_names``) is among the ``.tflite``'s input or output details:
    ``<stem>``, ``<stem>_1``, ... as the converter names them, or ``serving_default_<name>:0``, else in order."""
    names = [str(d["name"]) for d in details]
    found = []
    for k, name in enumerate(keras_names):
        wanted = (f"{stem}_{k}" if k else stem, f"serving_default_{name}:0", name)
        hit = next((names.index(w) for w in wanted if w in names), None)
        found.append(k if hit is None else hit)
    if sorted(found) != list(range(len(details))):
        raise RuntimeError(f"cannot match the .tflite's tensors {names} to Keras's {keras_names}")
    return found


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    x, y = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    den = float(np.sqrt(np.sum(x * x) * np.sum(y * y)))
    return float(np.sum(x * y)) / den if den else float(np.array_equal(x, y))


def _keras(onnx_path: str, first: list[np.ndarray]) -> Any:
    """onnx2tf's Keras model of the ONNX file, converted in its folder (where it finds its sample data: ``first``'s
    image, if the graph takes one, instead of a download)."""
    import onnx2tf

    folder = os.path.dirname(onnx_path)
    images = [a for a in first if a.ndim == 4 and a.shape[1] == 3]
    if images:
        np.save(os.path.join(folder, _SAMPLE_FILE), np.transpose(images[0], (0, 2, 3, 1)))
    here = os.getcwd()
    os.chdir(folder)
    try:
        return onnx2tf.convert(
            input_onnx_file_path=onnx_path,
            output_folder_path=os.path.join(folder, "tf"),
            not_use_onnxsim=True,
            non_verbose=True,
            disable_model_save=True,
        )
    finally:
        os.chdir(here)


def _input_perms(keras: Any, names: list[str], first: list[np.ndarray]) -> tuple[list[str], list[list[int]]]:
    """Keras's input names (ONNX's, in its own order) and, per ONNX input, the axis order ONNX -> Keras."""
    k_names = [t.name.split(":")[0] for t in keras.inputs]
    if sorted(k_names) != sorted(names):
        raise RuntimeError(f"onnx2tf renamed the inputs: {names} -> {k_names}")
    perms = []
    for name, arr in zip(names, first):
        k_shape = tuple(int(d) for d in keras.inputs[k_names.index(name)].shape)
        found = _perm(tuple(arr.shape), k_shape)
        if not found:
            raise RuntimeError(f"input {name}: Keras shape {k_shape} is no layout of {list(arr.shape)}")
        perms.append(found[-1])  # channels-last where both fit: onnx2tf's convention
    return k_names, perms


def _output_perms(keras: Any, feeds: list[np.ndarray], reference: list[np.ndarray]) -> list[list[int]]:
    """Per output, the axis order Keras -> ONNX that agrees best with onnxruntime's ``reference`` outputs."""
    outs = keras(feeds if len(feeds) > 1 else feeds[0], training=False)
    outs = [np.asarray(o) for o in (outs if isinstance(outs, list | tuple) else [outs])]
    perms = []
    for k, (got, want) in enumerate(zip(outs, reference)):
        found = _perm(got.shape, want.shape)
        if not found:
            raise RuntimeError(f"output {k}: Keras shape {list(got.shape)} is no layout of {list(want.shape)}")
        perms.append(max(found, key=lambda p: _cos(np.transpose(got, p), want)))
    return perms


def _quantize(keras: Any, scheme: str, representative: Any) -> bytes:
    """TensorFlow Lite's full-integer post-training quantization of ``keras``: int8 activations, or 16x8 (``w8a16``);
    integer inputs and outputs."""
    import tensorflow as tf

    conv = tf.lite.TFLiteConverter.from_keras_model(keras)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = representative
    if scheme == "w8a16":
        conv.target_spec.supported_ops = [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
        conv.inference_input_type = conv.inference_output_type = tf.int16
    else:
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        conv.inference_input_type = conv.inference_output_type = tf.int8
    return bytes(conv.convert())


def convert(args: dict[str, Any], arrays: Arrays) -> tuple[dict[str, Any], Arrays]:
    import onnx
    import onnxruntime as ort
    from ai_edge_litert.interpreter import Interpreter

    names = [i.name for i in onnx.load(args["onnx"]).graph.input]
    samples = [[np.load(p) for p in line] for line in args["calib"]]  # NCHW float32, one list per sample
    t0 = time.perf_counter()
    keras = _keras(args["onnx"], samples[0])
    k_names, in_perm = _input_perms(keras, names, samples[0])

    def keras_feeds(sample: list[np.ndarray]) -> list[np.ndarray]:
        return [np.transpose(sample[names.index(n)], in_perm[names.index(n)]) for n in k_names]

    ref = ort.InferenceSession(args["onnx"], providers=["CPUExecutionProvider"]).run(None, dict(zip(names, samples[0])))
    out_perm = _output_perms(keras, keras_feeds(samples[0]), ref)
    data = _quantize(keras, args["scheme"], lambda: (keras_feeds(sample) for sample in samples))
    with open(args["tflite"], "wb") as f:
        f.write(data)
    lite = Interpreter(model_content=data)
    at_in = _positions(lite.get_input_details(), k_names, "Placeholder")
    at_out = _positions(lite.get_output_details(), [f"output_{k}" for k in range(len(ref))], "Identity")
    # per ONNX input: its position among the .tflite's inputs and the axis order ONNX -> .tflite; per ONNX output:
    # its position among the .tflite's outputs and the axis order .tflite -> ONNX
    return {
        "inputs": [[at_in[k_names.index(n)], in_perm[i]] for i, n in enumerate(names)],
        "outputs": [[at_out[k], out_perm[k]] for k in range(len(ref))],
        "convert_s": time.perf_counter() - t0,
    }, {}


def vela(args: dict[str, Any], arrays: Arrays) -> tuple[dict[str, Any], Arrays]:
    """Vela on ``args["tflite"]`` for the accelerator, system config and memory mode of ``args["config"]``'s file."""
    out = args["output_dir"]
    cmd = [
        os.path.join(os.path.dirname(sys.executable), "vela"),
        args["tflite"],
        "--accelerator-config",
        args["accelerator"],
        "--config",
        args["config"],
        "--system-config",
        args["system_config"],
        "--memory-mode",
        args["memory_mode"],
        "--output-dir",
        out,
        "--show-cpu-operations",
    ]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr + done.stdout).splitlines() if ln.strip()]
        raise RuntimeError(f"vela exited {done.returncode}: {lines[-1] if lines else 'no output'}")
    summary = glob.glob(os.path.join(out, "*_summary_*.csv"))
    if len(summary) != 1:
        raise RuntimeError(f"vela wrote {len(summary)} summaries in {out}")
    with open(summary[0], newline="") as f:
        row = next(csv.DictReader(f))
    stem = os.path.splitext(os.path.basename(args["tflite"]))[0]
    cpu_ops = re.search(r"CPU operators = (\d+)", done.stdout)
    npu_ops = re.search(r"NPU operators = (\d+)", done.stdout)
    return {
        "inference_s": float(row["inference_time"]),
        "sram_kib": float(row["sram_memory_used"]),
        "dram_kib": float(row["dram_memory_used"]),
        "flash_kib": float(row["off_chip_flash_memory_used"]) + float(row["on_chip_flash_memory_used"]),
        "arena_cache_kib": float(row["arena_cache_size"]) / 1024,
        "cycles": float(row["cycles_total"]),
        "cpu_ops": int(cpu_ops[1]) if cpu_ops else 0,
        "npu_ops": int(npu_ops[1]) if npu_ops else 0,
        "cpu_op_types": sorted({m["op"] for m in _CPU_OP.finditer(done.stdout)}),
        "vela_tflite": os.path.join(out, f"{stem}_vela.tflite"),
        "vela_s": time.perf_counter() - t0,
    }, {}


if __name__ == "__main__":
    serve({"hello": hello, "convert": convert, "vela": vela})
