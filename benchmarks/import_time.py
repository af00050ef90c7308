"""Start-up: what every process that imports yolo-edge pays before it does anything (each CLI command, each
sweep or validation worker, each toolchain call's parent, each test worker).

In fresh processes, alternately, the median wall time of ``python -c pass`` (the interpreter alone) and of:

- ``import numpy, ml_dtypes``: onnx imports ml_dtypes. ml_dtypes 0.7.0 registers its ufunc loops so slowly
  that this alone took about a second (pyproject.toml excludes it); 0.6.0 takes milliseconds;
- ``import onnx``;
- ``import yolo_edge.cli.main`` (what ``yolo-edge`` imports before parsing its arguments);
- ``yolo-edge --help``, the console script.

To see the excluded release's figure: ``pip install ml_dtypes==0.7.0``, run this, ``pip install
'ml_dtypes!=0.7.0'``.

    python benchmarks/import_time.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import statistics
import subprocess
import sys
import time
from pathlib import Path

PATHS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "import numpy, ml_dtypes": [sys.executable, "-c", "import numpy, ml_dtypes"],
    "import onnx": [sys.executable, "-c", "import onnx"],
    "import yolo_edge.cli.main": [sys.executable, "-c", "import yolo_edge.cli.main"],
    "yolo-edge --help": [str(Path(sys.executable).with_name("yolo-edge")), "--help"],  # this environment's script
}


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in PATHS}
    names = list(PATHS)
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:  # rotating: load lands on all
            times[name].append(timed(PATHS[name]))
    versions = ", ".join(f"{p} {importlib.metadata.version(p)}" for p in ("ml_dtypes", "numpy", "onnx"))
    print(f"{versions}; median of {args.rounds} fresh processes each")
    print("| what | median s |\n|---|---|")
    for name, samples in times.items():
        print(f"| {name} | {statistics.median(samples):.3f} |")


if __name__ == "__main__":
    import results_page

    with results_page.page("import-time", "Process start and import times"):
        main()
