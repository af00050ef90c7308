"""Shared fixtures: tiny real models exported from ultralytics yaml (random weights), cached per session."""

from __future__ import annotations

import os

os.environ.setdefault("YOLO_OFFLINE", "1")

from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from yolo_edge.export import ExportedModel, export_model  # noqa: E402

ExportFn = Callable[..., ExportedModel]


@pytest.fixture(scope="session")
def exported(tmp_path_factory: pytest.TempPathFactory) -> ExportFn:
    """``exported("yolov8n.yaml", (320, 320))`` exports once per session and returns the ExportedModel."""
    cache: dict[tuple[str, tuple[int, int]], ExportedModel] = {}

    def get(model: str, imgsz: tuple[int, int] = (320, 320)) -> ExportedModel:
        key = (model, imgsz)
        if key not in cache:
            out = tmp_path_factory.mktemp(f"{Path(model).stem}_{imgsz[0]}x{imgsz[1]}")
            cache[key] = export_model(model, imgsz=imgsz, out_dir=out)
        return cache[key]

    return get


@pytest.fixture(scope="session")
def yaml_nc3(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A YOLOv8n model yaml with 3 classes (the scale is read from the 'yolov8n' in the file name)."""
    import yaml
    from ultralytics.utils import ROOT

    cfg = yaml.safe_load((ROOT / "cfg" / "models" / "v8" / "yolov8.yaml").read_text())
    cfg["nc"] = 3
    path = tmp_path_factory.mktemp("cfg") / "yolov8n-nc3.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)
