"""Bundles as folders: atomic writes, the one rule for what --out may replace, and loading refusals
(not a bundle, another format, damaged) as one-line errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from yolo_edge.bundle import FORMAT, check_writable, is_bundle, load_bundle, write_bundle
from yolo_edge.errors import YoloEdgeError


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
