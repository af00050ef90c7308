"""Bundles as folders: atomic writes, the one rule for what --out may replace, loading refusals (not a
bundle, another format, damaged) as one-line errors, and loading what is stored instead of compiling it."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import pytest

from tests.conftest import plan_bundle
from yolo_edge.bundle import (
    FORMAT,
    Bundle,
    check_writable,
    is_bundle,
    load_bundle,
    write_bundle,
)
from yolo_edge.bundle import opened as bundle_module
from yolo_edge.core.config import DeployConfig
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import is_mount_point
from yolo_edge.model.split import SplitModel
from yolo_edge.pipeline.preprocess import default_calib_dir
from yolo_edge.plan.placement import PlacementPlan


def test_bundle_write_is_atomic(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    old = json.dumps({"yolo_edge": "old"}).encode()
    write_bundle(out, {"meta.json": old, "plan.json": b"{}", "a/b.txt": b"1"})

    class Exploding(dict):  # type: ignore[type-arg]
        def items(self):  # type: ignore[no-untyped-def]
            yield "meta.json", b"new"
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_bundle(out, Exploding())
    assert (out / "meta.json").read_bytes() == old and (out / "a/b.txt").read_bytes() == b"1"
    assert [p.name for p in tmp_path.iterdir()] == ["bundle"]


def test_not_a_bundle(tmp_path: Path) -> None:
    with pytest.raises(YoloEdgeError, match="is not a yolo-edge bundle"):
        load_bundle(tmp_path)


def test_out_may_replace_a_bundle_or_fill_an_empty_folder_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = tmp_path / "bundle"
    write_bundle(bundle, {"meta.json": json.dumps({"yolo_edge": "x"}).encode(), "plan.json": b"{}"})
    assert is_bundle(bundle)
    check_writable(bundle)  # replacing a bundle is fine
    (bundle / "baseline.json").write_text("{}")  # what `check --write-baseline` or `run --save` put inside it
    (bundle / "ann").mkdir()
    (bundle / "ann" / "a.jpg").write_bytes(b"jpeg")
    with pytest.raises(YoloEdgeError, match=r"holds files deploy did not write \(ann, ann/a.jpg, baseline.json\)"):
        check_writable(bundle)
    assert (bundle / "ann" / "a.jpg").read_bytes() == b"jpeg"
    (bundle / "files.txt").unlink()  # an older yolo-edge's bundle: no file list to tell them apart
    with pytest.raises(YoloEdgeError, match="without a file list"):
        check_writable(bundle)
    (tmp_path / "empty").mkdir()
    check_writable(tmp_path / "empty")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    (mine / "meta.json").write_text("{}")  # looks like a bundle file, is not one
    assert not is_bundle(mine)
    with pytest.raises(YoloEdgeError, match=r"not a yolo-edge bundle \(meta.json, notes.txt\)"):
        check_writable(mine)
    monkeypatch.chdir(mine)
    with pytest.raises(YoloEdgeError, match="current folder"):
        check_writable(Path("."))
    with pytest.raises(YoloEdgeError, match="current folder or one above"):
        check_writable(tmp_path)
    assert (mine / "notes.txt").read_text() == "keep me"


def test_a_bind_mount_is_a_mount_point_though_its_device_is_its_parents(tmp_path: Path) -> None:
    """A bind mount of a folder of the same file system has the device of its parent (``os.path.ismount`` says no):
    the kernel's mount table names it, escapes and all (deploy refuses one as --out before any work)."""
    target = tmp_path / "bind target"
    target.mkdir()
    escaped = str(target).replace(" ", "\\040").encode()
    table = tmp_path / "mountinfo"
    table.write_bytes(
        b"22 1 0:21 / /proc rw - proc proc rw\n95 30 8:1 /data/src " + escaped + b" rw - ext4 /dev/sda1 rw\n"
    )
    assert is_mount_point(target, table) and not is_mount_point(tmp_path, table)
    assert not is_mount_point(target)  # the real table: not mounted, so only the table above can say it is
    assert is_mount_point(Path("/"))


def test_bundle_folders_are_made_like_any_folder(tmp_path: Path) -> None:
    out = write_bundle(tmp_path / "b", {"meta.json": json.dumps({"yolo_edge": "x"}).encode(), "plan.json": b"{}"})
    mask = os.umask(0)
    os.umask(mask)
    assert (out.stat().st_mode & 0o777) == 0o777 & ~mask  # not mkdtemp's 0700


def test_another_format_is_a_one_line_error_naming_it(tmp_path: Path) -> None:
    meta = {"format": FORMAT - 1, "yolo_edge": "old"}
    write_bundle(tmp_path / "b", {"meta.json": json.dumps(meta).encode(), "plan.json": b"{}"})
    with pytest.raises(YoloEdgeError, match=f"bundle format {FORMAT - 1} is not {FORMAT}; deploy it again"):
        load_bundle(tmp_path / "b")


def test_loading_a_bundle_compiles_only_the_units_it_does_not_store(
    tmp_path: Path,
    demo_split: SplitModel,
    tensors: list,
    fast_cfg: DeployConfig,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[type-arg]
) -> None:
    """A bundle runs its stored INT8 unit as it is: no re-split, no calibration run, no quantizer. A copy without
    that unit's compiled files compiles that unit alone, calibrated on the stored images, to the same result."""
    from yolo_edge.backends import quantize
    from yolo_edge.backends.openvino import nncf_int8

    plan = PlacementPlan.manual(demo_split, {"backbone": "int8", "neck": "int8"}, "host-lowp")
    path = plan_bundle(tmp_path / "bundle", demo_split, plan, tensors, fast_cfg)
    calls: Counter[str] = Counter()

    def counted(name: str, fn: Callable[..., object]) -> Callable[..., object]:
        def call(*args: object, **kwargs: object) -> object:
            calls[name] += 1
            return fn(*args, **kwargs)

        return call

    monkeypatch.setattr(nncf_int8, "quantize_nncf", counted("quantize", nncf_int8.quantize_nncf))
    # the backends import the quantizers when they quantize, from their modules: counted there
    monkeypatch.setattr(quantize, "quantize_int8", counted("quantize", quantize.quantize_int8))
    monkeypatch.setattr(bundle_module, "split_model", counted("split", bundle_module.split_model))
    monkeypatch.setattr(Bundle, "calibration", counted("calibration", Bundle.calibration))
    image = cv2.imread(str(default_calib_dir() / "calib_00050.jpg"))

    loaded = load_bundle(path)
    assert [u.name for u in loaded.units] == ["backbone+neck", "head"]  # the decode: the detector's post-processing
    with loaded.detector() as detector:
        stored_dets, _ = detector.detect(image)
        unit = detector.executor.units[0]
        assert unit.npu is not None and unit.npu.variant.quantizer == "nncf"
        assert unit.cpu.precision == "fp32"  # its CPU twin (compiled off the path to the first frame)
        deadline = time.monotonic() + 60
        while unit.cpu_estimate_s is None and time.monotonic() < deadline:  # timed on the same background thread
            time.sleep(0.05)
        assert unit.cpu_estimate_s is not None  # a measured accelerator: the hysteresis has its CPU estimate
    assert calls == Counter()

    copy = Path(shutil.copytree(path, tmp_path / "copy"))
    for p in (copy / "units").glob("backbone+neck.ov.*"):
        p.unlink()
    with load_bundle(copy).detector() as detector:
        rebuilt_dets, _ = detector.detect(image)
        assert detector.executor.placement_problems == []
    assert calls == Counter({"quantize": 1, "calibration": 1})
    assert len(rebuilt_dets) == len(stored_dets) > 0
    assert np.allclose(rebuilt_dets.xyxy, stored_dets.xyxy, atol=1.0)


def test_a_stored_int8_graph_that_does_not_parse_is_a_one_line_error(
    tmp_path: Path,
    demo_split: SplitModel,
    tensors: list,
    fast_cfg: DeployConfig,  # type: ignore[type-arg]
) -> None:
    """A stored unit that cannot be read any more (NNCF's OpenVINO IR; onnxruntime's QDQ graph) is refused in one
    line when the unit is compiled, not a crash in the runtime."""
    plan = PlacementPlan.manual(demo_split, {"backbone": "int8"}, "host-lowp")
    path = plan_bundle(tmp_path / "bundle", demo_split, plan, tensors, fast_cfg)
    (path / "units" / "backbone.ov.xml").write_bytes(b"<net>not an IR")
    with pytest.raises(YoloEdgeError, match="a stored OpenVINO IR unit is not readable"):
        load_bundle(path).detector()
    plan = PlacementPlan.manual(demo_split, {"backbone": "int8"}, "rk3588-approx")
    path = plan_bundle(tmp_path / "sim", demo_split, plan, tensors, fast_cfg)
    (path / "units" / "backbone.int8.onnx").write_bytes(b"\x00not onnx")
    with pytest.raises(YoloEdgeError, match="a stored INT8 unit is not a readable ONNX graph"):
        load_bundle(path).detector()
