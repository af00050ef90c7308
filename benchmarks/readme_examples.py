"""Every README command that can run on this machine, as written, in README order, in a fresh folder made by
``readme_inputs.py``: the quick start's deploy, the Rockchip and Qualcomm deploys, both plans, the sweep of 12
deploys, export, split, run, devices. What cannot run here is named with why (a camera, an RTSP server, a usage
line's placeholders; the toolchain install is the README's test command's). Then the Python one-line predict.

Prints each command's exit code and wall time; exits 1 if any failed. The suite runs the ones that take seconds
(``tests/test_readme.py::test_the_readme_examples_run_as_written``); this runs them all (tens of minutes).

    YOLO_OFFLINE=1 python benchmarks/readme_examples.py [--only deploy plan] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.test_readme import ALL_PAGES, readme_commands, readme_python  # noqa: E402
from yolo_edge.core.host import cpu_name  # noqa: E402

CANNOT_RUN_HERE = ("usage", "stream", "toolchain install")


def kind(command: str) -> str:
    """The subcommand, or why the command cannot run here (a key of ``tests.test_readme.NOT_RUN_HERE``)."""
    from tests.test_readme import not_run_why

    return not_run_why(command) or shlex.split(command)[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="*", help="run only these subcommands (and what they read: the earlier ones)")
    p.add_argument("--keep", type=Path, help="run in this folder and keep it (default: a temporary one, removed)")
    args = p.parse_args()
    print(f"CPU: {cpu_name()}")
    folder = args.keep or Path(tempfile.mkdtemp(prefix="readme-examples-"))
    env = {**os.environ, "YOLO_OFFLINE": "1"}
    script = Path(__file__).resolve().parent / "readme_inputs.py"
    subprocess.run([sys.executable, str(script), "--out", str(folder)], check=True, env=env, capture_output=True)
    failed = 0
    print("| command | exit | wall s |\n|---|---|---|")
    try:
        for command in dict.fromkeys(readme_commands(ALL_PAGES)):
            why = kind(command)
            if why in CANNOT_RUN_HERE:
                print(f"| `{command}` | not run: {why} | |")
                continue
            if args.only and why not in args.only and why != "deploy":  # a later run reads deploy's bundle
                continue
            t0 = time.monotonic()
            done = subprocess.run(
                [sys.executable, "-m", "yolo_edge.cli.main", *shlex.split(command)[1:]],
                cwd=folder,
                env=env,
                capture_output=True,
                text=True,
            )
            failed += done.returncode != 0
            shown = done.returncode if not done.returncode else f"{done.returncode}: {done.stderr.strip()[-200:]}"
            print(f"| `{command}` | {shown} | {time.monotonic() - t0:.0f} |", flush=True)
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "-c", readme_python()], cwd=folder, env=env, capture_output=True)
        failed += done.returncode != 0
        print(f"| the Python one-line predict (no camera loop) | {done.returncode} | {time.monotonic() - t0:.0f} |")
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
