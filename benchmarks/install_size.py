"""The size of a board install and of the planner on top of it: a fresh venv, ``pip install .`` (what a board runs
bundles with), its size; then ``pip install '.[deploy]'`` into it (NNCF, OpenVINO, matplotlib, onnxslim), the size
again. Needs the package registry; takes a few minutes.

    python benchmarks/install_size.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6


def main() -> None:
    print(f"Python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as tmp:
        env = Path(tmp, "venv")
        venv.create(env, with_pip=True)
        pip = [str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        for what, target in (("pip install .", str(ROOT)), ("+ [deploy]", f"{ROOT}[deploy]")):
            subprocess.run([*pip, target], check=True)
            print(f"{what}: {size_mb(env):.0f} MB")


if __name__ == "__main__":
    import results_page

    with results_page.page("install-size", "Install sizes"):
        main()
