"""The deployment sweep on Ray (``yolo_edge/flows/sweep.py``) and sharded validation: a real local Ray, a real
two-node cluster started on 127.0.0.1 with ``ray start``, a worker really killed mid-task."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml

from tests.second_model import SECOND_MODEL
from tests.test_torch_free import BLOCKER
from yolo_edge.core.config import configs_dir
from yolo_edge.flows.deploy import DeployResult
from yolo_edge.flows.sweep import FAILED, SweepRequest, sweep, sweep_plot
from yolo_edge.flows.val import ValRequest, val_bundle
from yolo_edge.model.meta import demo_model_path

pytestmark = pytest.mark.slow  # each test deploys several configurations or starts Ray
# ``alone`` marks the tests that start Ray: its health checks call a raylet starved by the other worker's deploys dead


def _dominated(o, others) -> bool:  # type: ignore[no-untyped-def]
    return any(
        x.p95_ms <= o.p95_ms
        and x.drift_map50_95 >= o.drift_map50_95
        and (x.p95_ms, x.drift_map50_95) != (o.p95_ms, o.drift_map50_95)
        for x in others
    )


@pytest.mark.alone
def test_a_sweep_on_the_local_ray_ranks_plots_and_caches(tiny_cfg: Path, tiny_images: Path, tmp_path: Path) -> None:
    models = [str(demo_model_path()), str(SECOND_MODEL)]
    cache = tmp_path / "cache"
    args = dict(data=tiny_images, config=tiny_cfg, cache=cache, keep=tmp_path / "bundles")
    result = sweep(SweepRequest(models, [320], ["cpu", "sim-edge-npu"], **args), workers=2)  # type: ignore[arg-type]
    assert len(result.outcomes) == 4 and not [o.error for o in result.outcomes if o.status == FAILED]
    for o in result.outcomes:
        assert o.p95_ms is not None and o.drift_map50_95 is not None and o.node is not None and not o.cached
        assert o.latency_kind == ("modelled (board)" if o.point.device == "sim-edge-npu" else "measured")
        assert o.bundle is not None and (Path(o.bundle) / "report.json").is_file()
        doc = json.loads((Path(o.bundle) / "report.json").read_text())
        chosen = next(p for p in doc["plans"] if p["name"] == doc["chosen_plan"])  # the sweep shows what it kept
        assert (o.boxes_kept, o.boxes_of) == (chosen["boxes_kept"]["kept"], chosen["boxes_kept"]["of"])
    ranked = result.ranked
    passed = [o.passed for o in ranked]
    assert passed == sorted(passed, reverse=True)  # what meets the SLA first
    front = result.front
    timed = [o for o in result.outcomes if o.p95_ms is not None]
    assert front and all(not _dominated(o, timed) for o in front)
    assert all(_dominated(o, timed) for o in timed if o not in front)
    assert result.best is not None and result.best is ranked[0]
    assert sweep_plot(result).startswith(b"\x89PNG")
    doc = json.loads(json.dumps(result.to_dict()))
    assert doc["best"] == result.best.point.label and len(doc["outcomes"]) == 4

    # a rerun computes only what changed: a new size, the rest read back (no Ray started for them)
    again = sweep(SweepRequest(models[:1], [320, 352], ["cpu"], **{**args, "keep": None}), workers=2)  # type: ignore[arg-type]
    assert [o.cached for o in again.outcomes] == [True, False]
    same = {o.point: o for o in result.outcomes}
    for o in again.outcomes:
        if o.cached:
            assert (o.p95_ms, o.drift_map50_95) == (same[o.point].p95_ms, same[o.point].drift_map50_95)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ray(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    ray = Path(sys.executable).with_name("ray")
    return subprocess.run([str(ray), *args], capture_output=True, text=True, timeout=180, env=env)


@pytest.fixture
def two_nodes():  # type: ignore[no-untyped-def]
    """(address, environment) of a head node with 1 CPU and a second node with 1 CPU and the custom resource
    rk3588, both on 127.0.0.1, with Ray's token authentication on, as a lab's cluster should be: every node and
    every client has the cluster's token (``RAY_AUTH_TOKEN``). Without it, a ``~/.ray/auth_token`` left by any
    local Ray (a sweep run earlier) turns the head's authentication on and the second node is refused. A start
    that fails fails the test with Ray's own output."""
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env.pop("RAY_AUTH_TOKEN_PATH", None)
    port = _free_port()
    common = ["--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--disable-usage-stats"]
    steps = [
        ["start", "--head", "--port", str(port), "--include-dashboard", "false", *common],
        ["start", "--address", f"127.0.0.1:{port}", "--resources", '{"rk3588": 1}', *common],
    ]
    failed = next((p for p in (_ray(env, *step) for step in steps) if p.returncode != 0), None)
    if failed is not None:
        _ray(env, "stop", "--force")
        said = (failed.stdout + failed.stderr)[-2000:]
        pytest.fail(f"ray {' '.join(failed.args[1:3])} exited {failed.returncode}: {said}")
    try:
        yield f"127.0.0.1:{port}", env
    finally:
        _ray(env, "stop", "--force")


HOLDER = """import json, logging, sys, ray
ray.init(address=sys.argv[1], logging_level=logging.WARNING)
print(json.dumps([n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("rk3588")]))"""


@pytest.mark.alone
def test_a_device_bound_configuration_runs_only_on_the_node_with_its_device(
    two_nodes: tuple[str, dict[str, str]], tiny_cfg: Path, tiny_images: Path, tmp_path: Path
) -> None:
    """``yolo-edge sweep --ray-address`` run as on a lab's machine: a process of its own with the cluster's token."""
    address, env = two_nodes
    lab = yaml.safe_load((configs_dir() / "devices" / "rk3588-approx.yaml").read_text())
    lab.update(name="lab-rk3588", node_resource="rk3588")  # a lab's profile: its RK3588 boards' hosts have the resource
    (tmp_path / "lab.yaml").write_text(yaml.safe_dump(lab))
    nowhere = {**lab, "name": "lab-other", "node_resource": "qcs6490-board"}
    (tmp_path / "nowhere.yaml").write_text(yaml.safe_dump(nowhere))
    devices = ["cpu", str(tmp_path / "lab.yaml"), str(tmp_path / "nowhere.yaml")]
    argv = ["sweep", "--model", str(demo_model_path()), "--imgsz", "320", "--device", *devices]
    argv += ["--data", str(tiny_images), "--config", str(tiny_cfg), "--cache", "", "--ray-address", address, "--json"]
    code = f"from yolo_edge.cli.main import main\nraise SystemExit(main({argv!r}))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: nothing met the SLA, a verdict, not a failure
    holder = json.loads(
        subprocess.run(
            [sys.executable, "-c", HOLDER, address], capture_output=True, text=True, timeout=120, env=env, check=True
        ).stdout
    )
    by_device = {o["point"]["device"]: o for o in json.loads(proc.stdout)["outcomes"]}
    board = by_device[str(tmp_path / "lab.yaml")]
    assert board["status"] != FAILED and [board["node"]] == holder
    assert by_device["cpu"]["status"] != FAILED and by_device["cpu"]["node"] is not None
    missing = by_device[str(tmp_path / "nowhere.yaml")]
    assert missing["status"] == FAILED and "no Ray node advertises the resource 'qcs6490-board'" in missing["error"]
    # a machine without the cluster's token is refused, and the error says so (one Ray connect attempt, not 20)
    stranger = {**env, "RAY_AUTH_TOKEN": secrets.token_hex(32), "RAY_gcs_server_port_wait_time_s": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=stranger)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and last.startswith("yolo-edge sweep: error: cannot join the Ray cluster"), last
    assert "the cluster's token" in last and "RAY_AUTH_TOKEN" in last and "Traceback" not in proc.stderr


@pytest.mark.alone
def test_a_killed_worker_is_retried_and_the_sweep_completes(tiny_cfg: Path, tiny_images: Path) -> None:
    killed: list[int] = []

    def kill_the_first_task() -> None:
        deadline = time.monotonic() + 240
        while not killed and time.monotonic() < deadline:
            for p in psutil.process_iter(["cmdline"]):
                if any("ray::run_point" in part for part in p.info["cmdline"] or []):
                    time.sleep(1.0)  # inside its deploy
                    os.kill(p.pid, signal.SIGKILL)
                    killed.append(p.pid)
                    return
            time.sleep(0.2)

    watcher = threading.Thread(target=kill_the_first_task, daemon=True)
    watcher.start()
    grid = SweepRequest([str(demo_model_path())], [320], ["cpu"], data=tiny_images, config=tiny_cfg, cache="")
    result = sweep(grid, workers=1)
    watcher.join(timeout=5)
    assert killed, "the task's worker was never seen"
    (o,) = result.outcomes
    assert o.status != FAILED and o.p95_ms is not None, o.error


@pytest.mark.slow
@pytest.mark.alone
def test_sigterm_during_a_ray_sweep_is_one_line_143_and_leaves_nothing_in_tmpdir(
    tiny_cfg: Path, tiny_images: Path
) -> None:
    """Ray's SIGTERM handler dumps a C++ stack and aborts (134): yolo-edge's wins (one line, 143), and what the
    killed task's worker had made (its deploy's and the sweep's temporary folders) goes with the session."""
    tmp = Path(tempfile.mkdtemp(prefix="ye-", dir="/tmp"))  # short: Ray's socket paths under it fit AF_UNIX's 107
    argv = ["yolo-edge", "sweep", "--imgsz", "320", "--device", "cpu", "--data", str(tiny_images)]
    argv += ["--config", str(tiny_cfg), "--cache", "", "--workers", "1"]
    env = {**os.environ, "TMPDIR": str(tmp), "YOLO_OFFLINE": "1"}
    argv[0] = str(Path(sys.executable).with_name("yolo-edge"))
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not any(
            "ray::run_point" in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])
        ):
            time.sleep(0.2)
        while time.monotonic() < deadline and not any(tmp.glob("yolo-edge-ray-*/*")):
            time.sleep(0.05)  # until the task's deploy has made temporary files (the workers' TMPDIR)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    left = [p.name for p in tmp.iterdir() if p.name.startswith("yolo-edge")]
    shutil.rmtree(tmp, ignore_errors=True)
    ours = [line for line in err.strip().splitlines() if line.startswith("yolo-edge sweep:")]
    assert proc.returncode == 143, err[-3000:]
    assert ours == ["yolo-edge sweep: terminated (SIGTERM); temporary files removed, nothing half-written left"], err
    assert not left, left


@pytest.mark.alone
def test_sharded_validation_gives_the_unsharded_map(deployed: DeployResult, small_val: Path) -> None:
    from yolo_edge.bundle import load_bundle

    bundle = load_bundle(deployed.bundle)
    whole = val_bundle(bundle, ValRequest(small_val))
    sharded = val_bundle(bundle, ValRequest(small_val, shards=3))
    for a, b in ((whole.reference, sharded.reference), (whole.deployed, sharded.deployed)):
        assert abs(a.map50 - b.map50) <= 1e-6 and abs(a.map50_95 - b.map50_95) <= 1e-6
    assert sharded.images == whole.images == 40


def test_without_ray_the_sweep_says_how_to_get_it_and_runs_in_turn_when_asked(
    tiny_cfg: Path, tiny_images: Path
) -> None:
    hide_ray = BLOCKER.replace("('torch', 'ultralytics', 'torchvision')", "('ray',)")
    argv = [
        "sweep",
        "--model",
        str(demo_model_path()),
        "--imgsz",
        "320",
        "--device",
        "cpu",
        "--data",
        str(tiny_images),
        "--config",
        str(tiny_cfg),
        "--cache",
        "",
    ]
    code = f"from yolo_edge.cli.main import main\nraise SystemExit(main({argv!r}))"
    proc = subprocess.run([sys.executable, "-c", hide_ray + code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "pip install 'yolo-edge[ray]'" in proc.stderr and "--no-ray" in proc.stderr
    code = f"from yolo_edge.cli.main import main\nraise SystemExit(main({[*argv, '--no-ray', '--json']!r}))"
    proc = subprocess.run([sys.executable, "-c", hide_ray + code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["best"] and doc["outcomes"][0]["node"] is None  # in this process, not on Ray
    code = f"from yolo_edge.cli.main import main\nraise SystemExit(main({[*argv, '--no-ray', '--sla-ms', '0.001']!r}))"
    proc = subprocess.run([sys.executable, "-c", hide_ray + code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1 and "nothing meets the SLA 0.001 ms" in proc.stdout
