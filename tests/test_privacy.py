"""Nothing leaves the machine (``yolo_edge/core/privacy.py``), seen where native code acts: each command runs in a
network namespace of its own under ``strace`` (``tests/netwatch.py``), and any DNS lookup or connection beyond
loopback, from Python or from a runtime's C++ core (onnxruntime's 1DS telemetry), fails the test."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.netwatch import beyond_loopback, missing_tools, watched

# a service that loads a bundle, predicts and stays up: long enough for onnxruntime's telemetry, which looks its
# host up seconds after the first session is made, to have tried
PREDICT = """
import sys, time
import yolo_edge
with yolo_edge.load(sys.argv[1]) as model:
    results = model(sys.argv[2])
    print(len(results))
    time.sleep(float(sys.argv[3]))
"""


# onnxruntime's telemetry stays quiet where it sees a CI runner (CI=true: measured, no lookup in 40 s), so the
# commands run as on a user's machine, without those markers (.ci/run sets CI=true)
CI_MARKERS = ("CI", "GITHUB_ACTIONS", "TF_BUILD", "GITLAB_CI", "BUILDKITE", "JENKINS_URL")


def _env(home: Path, **extra: str) -> dict[str, str]:
    dropped = ("ORT_DISABLE_TELEMETRY", "RAY_USAGE_STATS_ENABLED", *CI_MARKERS)
    keep = {k: v for k, v in os.environ.items() if k not in dropped}
    return {**keep, "YOLO_OFFLINE": "1", "HOME": str(home), **extra}


def test_the_watcher_is_on_this_machine() -> None:
    """The guard needs strace, unshare and ip (all in the machine's image; .ci/run installs them where absent)."""
    assert not missing_tools(), f"install {' '.join(missing_tools())} (apt-get install strace util-linux iproute2)"


@pytest.mark.slow
def test_no_command_looks_up_or_connects_beyond_loopback_even_from_native_code(
    tiny_cfg: Path, tiny_images: Path, tmp_path: Path
) -> None:
    """deploy (OpenVINO and NNCF, whose telemetry would call Google Analytics), run, val, check and the Python
    predict, each watched; nothing written under ``~/intel`` (OpenVINO telemetry's client id). The control: the
    same predict with ``YOLO_EDGE_TELEMETRY=1`` (every dependency as it ships) is caught looking up onnxruntime's
    events host, so the watcher does see native code (and the test fails on code that leaves it on)."""
    home = tmp_path / "home"
    home.mkdir()
    bundle = tmp_path / "bundle"
    image = str(sorted(tiny_images.iterdir())[0])
    script = tmp_path / "predict.py"
    script.write_text(PREDICT)
    cli = [sys.executable, "-m", "yolo_edge.cli.main"]
    deploy = ["deploy", "--device", "host-lowp", "--config", str(tiny_cfg), "--data", str(tiny_images)]
    commands = {
        "devices": [*cli, "devices"],
        "deploy": [*cli, *deploy, "--out", str(bundle)],
        "run": [*cli, "run", str(bundle), "--source", str(tiny_images), "--quiet"],
        "val": [*cli, "val", str(bundle), "--data", str(tiny_images)],
        "check": [*cli, "check", str(bundle), "--data", str(tiny_images), "--runs", "5"],
        "predict": [sys.executable, str(script), str(bundle), image, "15"],
    }
    for name, cmd in commands.items():
        trace = tmp_path / f"{name}.strace"
        proc = watched(cmd, _env(home), trace)
        ran = proc.returncode in ((0, 1) if name == "check" else (0,))  # check's verdict is not this test's matter
        assert ran and trace.exists(), (name, proc.returncode, proc.stderr[-2000:])
        assert not beyond_loopback(trace), (name, beyond_loopback(trace)[:10])
    assert not (home / "intel").exists()

    trace = tmp_path / "control.strace"  # up for 45 s: onnxruntime's first upload comes later on a busy machine
    control = [*commands["predict"][:-1], "45"]
    proc = watched(control, _env(home, YOLO_EDGE_TELEMETRY="1"), trace)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = beyond_loopback(trace)
    assert any("htons(53)" in line for line in seen), trace.read_text()[-3000:]
