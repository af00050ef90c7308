"""A bundle must run on a board without torch/ultralytics: only yolo_edge.model.export may import them, lazily."""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import yolo_edge
from tests.conftest import ExportFn
from yolo_edge.pipeline.preprocess import default_calib_dir

BLOCKER = textwrap.dedent("""
    import sys, importlib.abc
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split('.')[0] in ('torch', 'ultralytics', 'torchvision'):
                raise ImportError(f'{name} is hidden in this test')
    sys.meta_path.insert(0, Block())
""")


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )


def test_every_module_imports_without_torch() -> None:
    modules = [m.name for m in pkgutil.walk_packages(yolo_edge.__path__, "yolo_edge.")]
    assert "yolo_edge.model.split" in modules and "yolo_edge.cli.main" in modules
    proc = _run(f"import importlib\nfor m in {modules!r}:\n    importlib.import_module(m)\nprint('ok')")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_split_runs_without_torch(exported: ExportFn) -> None:
    path = exported("yolov8n.yaml", (320, 320)).path
    proc = _run(f"""
        from yolo_edge.cli.main import main
        raise SystemExit(main(['split', '--model', {str(path)!r}, '--json']))
    """)
    assert proc.returncode == 0, proc.stderr
    assert '"decode"' in proc.stdout


def test_exporting_a_checkpoint_without_ultralytics_says_how_to_fix(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pt = tmp_path / "m.pt"
    pt.write_bytes(b"x" * 100)
    proc = _run(f"""
        from yolo_edge.cli.main import main
        raise SystemExit(main(['export', '--model', {str(pt)!r}]))
    """)
    assert proc.returncode == 2
    assert "pip install 'yolo-edge[export]'" in proc.stderr


BOARD = BLOCKER.replace(
    "('torch', 'ultralytics', 'torchvision')",
    "('torch', 'ultralytics', 'torchvision', 'nncf', 'openvino', 'matplotlib', 'onnxslim', 'sklearn', 'scipy')",
)


def test_a_board_install_runs_benches_and_checks_a_bundle_without_the_planner(deployed_cpu: Path) -> None:
    """``pip install .`` on a board has onnxruntime, numpy, opencv, pyyaml (and the mAP scorer) only: with the
    planner's packages hidden (NNCF, OpenVINO, matplotlib, onnxslim, scikit-learn, scipy), a bundle for the CPU
    runs, benches and checks; deploy says which extra to install."""
    image = sorted(default_calib_dir().glob("*.jpg"))[0]
    for args, code in (
        (["run", str(deployed_cpu), "--source", str(image), "--quiet"], 0),
        (["bench", str(deployed_cpu), "--runs", "3"], 0),
        (["check", str(deployed_cpu), "--runs", "3"], 0),
        (["deploy", "--device", "cpu", "--out", str(deployed_cpu.parent / "again")], 2),
    ):
        proc = subprocess.run(
            [sys.executable, "-c", BOARD + f"from yolo_edge.cli.main import main\nraise SystemExit(main({args!r}))"],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "YOLO_OFFLINE": "1"},
        )
        assert proc.returncode == code, (args[0], proc.stderr[-2000:])
    assert "pip install 'yolo-edge[deploy]'" in proc.stderr
