"""Every shipped profile usable on this machine, end to end: deploy, then run and bench the bundle, and
every unit runs on the device and at the precision the report says, with no fallback event (no fault is
injected). A bundle that quietly ran its NPU units on the CPU (issue #11: QDQ artifacts refused by the
simulated NPU's op list) fails here."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from yolo_edge.backends import device_status
from yolo_edge.bundle import load_bundle
from yolo_edge.core.config import load_profile, profile_names
from yolo_edge.core.registry import backends
from yolo_edge.plan.placement import PlacementPlan
from yolo_edge.runtime.build import plan_units

USABLE = [name for name in profile_names() if device_status(load_profile(name))[0]]

pytestmark = pytest.mark.slow  # a deploy per profile, three of them through a vendor's simulator


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "yolo_edge.cli.main", *args], capture_output=True, text=True, timeout=600
    )


@pytest.mark.parametrize("device", USABLE)
def test_bundle_runs_the_placement_deploy_reported(device: str, small_deploy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # every registered runtime has a shipped profile that runs here, and every profile of a vendor's toolchain runs
    # wherever the README's test command ran (it installs them): the loop is never empty, and a vendor is never
    # silently left out (the Ethos-U profiles were, from the installed package, when its Vela .ini was not packaged)
    runtimes = {load_profile(name).runtime: name for name in USABLE}
    assert set(runtimes) == set(backends()), f"no usable profile of {set(backends()) - set(runtimes)}"
    toolchained = {n for n in profile_names() if backends()[load_profile(n).runtime].toolchain is not None}
    assert toolchained <= set(USABLE), f"{toolchained - set(USABLE)}: run `yolo-edge toolchain install` first"
    result = small_deploy(device)
    bundle = load_bundle(result.bundle)
    report = result.report.to_dict()
    plan = PlacementPlan.from_dict(report["placement"])
    units = plan_units(bundle.split, plan, bundle.config.runtime.fuse_units)
    want = {u.name: u.device for u in units}
    if report["chosen_plan"] == "split":
        assert "npu" in want.values()

    ex = bundle.executor()
    assert ex.placement_problems == []
    assert [(s.name, s.npu is not None) for s in ex.units] == [(u.name, u.device == "npu") for u in units]
    assert all(s.npu.precision == u.precision for s, u in zip(ex.units, units) if s.npu is not None)
    ex.close()

    images = tmp_path / "frames"  # three frames: each is a simulator call per NPU unit on the simulated boards
    images.mkdir()
    for frame in sorted(bundle.calib_dir.iterdir())[:3]:
        shutil.copy(frame, images)
    # one frame at a time: in a pipeline on 2 cores the units' threads slow each other, which the hysteresis may
    # rightly read as a slow accelerator; here the placement itself is what is checked
    events = tmp_path / "events.jsonl"
    run = _cli("run", str(result.bundle), "--source", str(images), "--json", "--sequential", "--events", str(events))
    assert run.returncode == 0, run.stderr
    frames = [json.loads(line) for line in run.stdout.splitlines()]
    shown = events.read_text() if events.exists() else ""
    assert len(frames) == len(list(images.iterdir())) and all(f["devices"] == want for f in frames), shown
    # a simulated board's unit times are its model's (its NPU's and its CPU's), and every frame says so
    simulated = set(want) if load_profile(device).latency == "modelled" else set()
    assert all(set(f["modelled_units"]) == simulated for f in frames), frames[0]["modelled_units"]
    line = _cli("run", str(result.bundle), str(next(images.iterdir())), "--sequential").stdout.splitlines()[0]
    assert ("ms inference modelled (board), " in line) is bool(simulated), line
    lines = [json.loads(line) for line in events.read_text().splitlines()]  # no event; the run's end
    assert [e.get("record") for e in lines] == ["run"] and lines[0]["frames"] == 3, shown
    assert "WARNING" not in run.stderr

    bench = _cli("bench", str(result.bundle), "--runs", "3", "--json")
    assert bench.returncode == 0, bench.stderr
    doc = json.loads(bench.stdout)
    assert doc["fallback_events"]["total"] == 0 and doc["placement_problems"] == [], doc["fallback_events"]
    assert doc["npu_share"] == pytest.approx(sum(d == "npu" for d in want.values()) / len(want), abs=1e-4)
    # a simulated board's every phase is the board's (a whole-cpu plan too: the board's CPU), else measured here
    assert doc["kind"] == ("modelled (board)" if load_profile(device).latency == "modelled" else "measured")
