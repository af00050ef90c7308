"""The fourth sweep of hostile and unlucky cases (issue #55), one test per class, each named by its letter; the cases
that need a deployed bundle and a stream are in ``test_stream.py`` (E: metric connections, F: credentials), the
gate's baseline (D) in ``test_deploy.py``, the Python API's inputs (K) in ``test_predict.py``."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.test_stream import MjpegServer
from yolo_edge.bundle.write import temp_prefix, write_bundle
from yolo_edge.core.config import MAX_NPU_CORES, configs_dir, load_profile
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import JsonArrayWriter, atomic_write
from yolo_edge.flows.predict import Results
from yolo_edge.pipeline.engine import WINDOW, Recent
from yolo_edge.pipeline.postprocess import Detections
from yolo_edge.pipeline.sources import KEPT, FrameQueue, Reader, SourceOptions, StreamStats, parse_source
from yolo_edge.runtime.events import KEPT_EVENTS, EventLog


def test_A_a_device_node_or_fifo_at_an_output_path_is_refused_never_replaced(tmp_path: Path) -> None:
    """``Results.save()``, ``save_txt()``, the JSON writer and every atomic write: a rename onto a FIFO (or, as root,
    onto ``/dev/null``) would replace the node; each refuses it in one line and the node is still there."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "null-link"
    link.symlink_to("/dev/null")
    result = Results("x.jpg", np.zeros((32, 32, 3), np.uint8), Detections.empty(("a",)), {})
    attempts = [
        lambda p: atomic_write(p, b"x"),
        lambda p: JsonArrayWriter(p),
        lambda p: result.save(p.with_suffix(".jpg") if p.suffix else p),
        lambda p: result.save_txt(p),
    ]
    for target in (fifo, link, Path("/dev/null")):
        for attempt in attempts:
            with pytest.raises(YoloEdgeError, match="not a regular file"):
                attempt(target)
    assert fifo.is_fifo() and link.is_symlink() and Path("/dev/null").is_char_device()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null-link", "pipe"]  # no temporary file left


def test_B_a_source_that_opens_then_fails_its_first_read_backs_off(tmp_path: Path) -> None:
    """A server that accepts and closes before the first frame, every time: reopened with the backoff (0.1 s doubled,
    capped at 0.4 s here), not hundreds of times a second; one gap, not an event per reconnect."""
    server = MjpegServer(25, [("frames", 0)] * 100_000)
    try:
        stats = StreamStats(parse_source(server.url))
        options = SourceOptions(backoff_s=0.1, backoff_cap_s=0.4, open_timeout_s=60)
        stop = threading.Event()
        reader = Reader(0, stats.source, FrameQueue(1, "drop-oldest", stats), stats, options, stop)
        reader.start()
        time.sleep(3.0)
        stop.set()
        reader.join(10)
    finally:
        server.httpd.shutdown()
    # 0.1 + 0.2 + 0.4 + 0.4 ... in 3 s: about 9 attempts (before: 300-650 a second)
    assert 3 <= server.connections <= 15, server.connections
    assert stats.read == 0 and stats.state == "ended" and len(stats.events) <= 1, list(stats.events)


def test_B_memory_of_a_long_run_is_bounded_by_construction() -> None:
    """Source events, problems, fallback events and per-frame latencies: counted in full, kept for the most recent
    only, whatever the length of the run."""
    stats = StreamStats(parse_source("rtsp://127.0.0.1:1/x"))
    for i in range(10 * KEPT):
        stats.event("disconnected", after_frame=i)
        stats.problems.append(f"problem {i}")
    assert len(stats.events) == KEPT and stats.event_counts["disconnected"] == 10 * KEPT
    assert len(stats.problems) == KEPT and stats.problems[-1] == f"problem {10 * KEPT - 1}"
    log = EventLog()
    for i in range(3 * KEPT_EVENTS):
        log.add(i, "backbone", "timeout", "retry_cpu")
    summary = log.summary()
    assert len(log.events) == KEPT_EVENTS and summary.total == 3 * KEPT_EVENTS
    assert summary.by_trigger == {"timeout": 3 * KEPT_EVENTS} and summary.by_unit == {"backbone": 3 * KEPT_EVENTS}
    recent = Recent()
    for i in range(3 * WINDOW):
        recent.add(float(i))
    assert len(recent.values) == WINDOW and recent.count == 3 * WINDOW and recent.total == sum(range(3 * WINDOW))


def test_C_a_profile_or_bundle_with_a_million_npu_cores_is_refused(tmp_path: Path) -> None:
    """``npu_cores`` sizes a stream's pool of accelerator contexts and threads: bounded in the profile's check
    (which a bundle's stored profile goes through too), not by the machine's memory."""
    doc = yaml.safe_load((configs_dir() / "devices" / "rk3588.yaml").read_text())
    doc["npu_cores"] = 1_000_000
    path = tmp_path / "many.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(YoloEdgeError, match=f"npu_cores must be between 1 and {MAX_NPU_CORES}, got 1000000"):
        load_profile(path)
    doc["npu_cores"] = 3
    path.write_text(yaml.safe_dump(doc))
    assert load_profile(path).npu_cores == 3


def test_G_a_name_a_few_bytes_under_the_limit_is_written(tmp_path: Path) -> None:
    """A 250-byte name passes the preflight; its temporary sibling must fit too (it was the name plus 10 bytes)."""
    name = "b" * 245 + ".json"
    atomic_write(tmp_path / name, b"{}")
    assert (tmp_path / name).read_bytes() == b"{}"
    bundle = tmp_path / ("c" * 250)
    write_bundle(bundle, {"meta.json": b'{"yolo_edge": "1"}', "plan.json": b"{}"})
    write_bundle(bundle, {"meta.json": b'{"yolo_edge": "2"}', "plan.json": b"{}"})
    assert (bundle / "meta.json").read_bytes() == b'{"yolo_edge": "2"}'
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, bundle.name])


def test_H_a_bundle_is_replaced_in_one_step_and_a_killed_writers_copies_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replacing a bundle is one exchange of the two paths (no moment without a bundle at ``out``: a rename of the
    old one away is never made); the temp folder of a writer killed mid-write (its pid gone) is removed by the next
    write, and one of a live writer is left alone."""
    out = tmp_path / "bundle"
    write_bundle(out, {"meta.json": b'{"yolo_edge": "1"}', "plan.json": b"{}"})
    real_replace = os.replace

    def only_new(src: object, dst: object) -> None:  # renaming the old bundle away would open the window
        assert Path(str(src)) != out, "the old bundle was renamed away"
        real_replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", only_new)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = tmp_path / f"{temp_prefix(out)}{int(dead.stdout)}-abc123"
    (orphan / "units").mkdir(parents=True)
    alive = tmp_path / f"{temp_prefix(out)}{os.getppid()}-def456"
    alive.mkdir()
    write_bundle(out, {"meta.json": b'{"yolo_edge": "2"}', "plan.json": b"{}"})
    assert (out / "meta.json").read_bytes() == b'{"yolo_edge": "2"}'
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["bundle", alive.name])


def test_L_a_checkpoint_that_runs_code_when_loaded_is_refused_before_it_runs(tmp_path: Path) -> None:
    """A ``.pt`` is a pickle; ultralytics loads it with a full unpickle, which runs what it names. A checkpoint whose
    pickle calls ``os.system`` is refused by export, deploy and sweep in one line, exit 2, and its command never
    runs (the marker file is not made); ultralytics' own checkpoints (the demo, the second model) still load."""
    import torch

    marker = tmp_path / "marker"

    class Command:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return os.system, (f"touch {marker}",)

    evil = tmp_path / "evil.pt"
    torch.save({"model": Command(), "train_args": {}}, evil)
    child = {**os.environ, "YOLO_OFFLINE": "1"}
    for args in (
        ["export", "--model", str(evil), "--out", str(tmp_path / "x")],
        ["deploy", "--model", str(evil), "--device", "cpu", "--out", str(tmp_path / "b")],
        ["sweep", "--model", str(evil), "--device", "cpu", "--cache", str(tmp_path / "s"), "--no-ray"],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "yolo_edge.cli.main", *args], env=child, capture_output=True, text=True, timeout=300
        )
        lines = [line for line in proc.stderr.splitlines() if "error:" in line]  # deploy says "exporting" first
        assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, (args[0], proc.stderr)
        assert "would run code when loaded" in lines[0] and "posix.system" in lines[0], lines
        assert not marker.exists()


def test_J_odd_profile_figures_names_and_options_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue #55's class J: a subnormal (or absurd) physical figure, an SRAM larger than the DRAM, a negative
    channel limit; a class map with no data to map; a profile name with terminal escapes in the placement warning;
    a ``.pt`` zip bomb refused before torch allocates what it declares."""
    import zipfile

    from yolo_edge.cli.common import warn_placement
    from yolo_edge.data.resolve import resolve_eval_data
    from yolo_edge.model.export import check_checkpoint

    base = yaml.safe_load((configs_dir() / "devices" / "sim-edge-npu.yaml").read_text())
    rows = [
        ({"dram_gbps": 5e-324}, "dram_gbps"),
        ({"link": {**base["link"], "gbps": 1e-300}}, "gbps"),
        ({"sram_kb": base["memory_mb"] * 1024 * 4}, "is more than memory_mb"),
        (
            {"op_support": {"mode": "list", "ops": {**base["op_support"]["ops"], "Conv": {"max_channels": -5}}}},
            "max_channels",
        ),
    ]
    for change, message in rows:
        path = tmp_path / "odd.yaml"
        path.write_text(yaml.safe_dump({**base, **change}))
        with pytest.raises(YoloEdgeError, match=message):
            load_profile(path)
    with pytest.raises(YoloEdgeError, match="--class-map maps the classes of --data"):
        resolve_eval_data(None, ("a", "b"), "x=a")
    warn_placement(["profile 'evil\x1b]0;owned\x07\x1b[2J' refused the unit"], "run")
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "evil?]0;owned??[2J" in err
    bomb = tmp_path / "bomb.pt"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("archive/data.pkl", b"\0" * (80 << 20))
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(YoloEdgeError, match="declares 64x more bytes than it stores"):
        check_checkpoint(bomb)
