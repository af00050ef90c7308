"""The fifth sweep's defect classes (issue 66), one test or more a class, each failing on the code before it: bundle
numbers that made a statistic run for minutes, an audit blind to added boxes and floored by one outlier, an event log
read whole from whatever file it was given, a Python gate that took a NaN SLA. (Plug-ins: tests/test_backends.py;
baselines, bundle values and ``--ray-address``: tests/test_bad_input.py's table.)"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from yolo_edge.cli.main import main
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.flows.gate import GateRequest
from yolo_edge.runtime.audit import EVENT_P, FRAME_P, FrameAudit, audit_floors, binomial_tail, loss_bound


@pytest.mark.parametrize("n", [1, 7, 60, 400])
def test_the_binomial_tail_is_the_exact_sum(n: int) -> None:
    """Against the sum of every term in exact integers, for every k, at rates either side of the mean."""
    for p in (0.003, 0.2, 0.5, 0.97):
        for k in range(n + 2):
            exact = sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))
            assert binomial_tail(k, n, p) == pytest.approx(exact, rel=1e-9, abs=1e-12), (k, n, p)


def test_a_statistic_of_bundle_numbers_is_bounded() -> None:
    """Half of ten billion boxes lost: the old tail summed every term from k on (hours); the bounded one sums those
    within 40 standard deviations. Run in a process of its own with a deadline, so a regression fails, not hangs."""
    code = (
        "from yolo_edge.runtime.audit import binomial_tail, loss_bound\n"
        "n = 10**10\n"
        "assert abs(binomial_tail(n // 2, n, 0.5) - 0.5) < 1e-3\n"
        "assert binomial_tail(n // 2 + 10**6, n, 0.5) < 1e-50 and binomial_tail(n // 2 - 10**6, n, 0.5) == 1.0\n"
        "assert abs(loss_bound(5 * 10**6, 10**7) - 0.5) < 1e-3\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_frames_audit_sees_the_boxes_a_degraded_accelerator_adds() -> None:
    """Every FP32 box kept, but 300 boxes where the FP32 chain has 7 (the ``degrade`` fault's frames): an event by
    the boxes added, judged against the rate the deploy proved (10 of 1,000) or, for a bundle that proved only its
    losses, against the loss rate. The same frames with only the FP32 boxes: nothing."""
    for proven_added in ((10, 1000), None):
        f = FrameAudit((990, 1000), 10, proven_added)
        for _ in range(3):
            assert f.record(7, 7, 7, 300)  # each frame failed: 293 of 300 added
        p, corrected, shown = f.scan()
        assert corrected < EVENT_P and "293 of the accelerator's 300 boxes added" in shown, shown
        clean = FrameAudit((990, 1000), 10, proven_added)
        for _ in range(3):
            assert not clean.record(7, 7, 7, 7)
        assert clean.scan()[1] >= FRAME_P
        assert clean.to_dict()["boxes_added"] == {"added": 0, "of": 21}


def test_a_parked_accelerator_comes_back_only_when_it_adds_no_boxes_either() -> None:
    """Recovery bounds both rates: every FP32 box kept is not enough while the accelerator still adds boxes."""
    f = FrameAudit((990, 1000), 10, (10, 1000))
    f.parked = True
    for _ in range(12):
        f.record(10, 10, 10, 40)
    assert f.passing() is None
    for _ in range(12):
        f.record(10, 10, 10, 10)
    assert (
        f.passing() == "100 of the FP32 chain's 100 boxes kept, 0 of 100 boxes added, over the last 10 audited frames"
    )


def test_a_units_floor_is_a_low_quantile_not_one_outliers_minimum() -> None:
    """99 frames at cosine 0.999 and one outlier at 0.90: the minimum (0.90) with the slack would pass an
    accelerator at 0.80; the floor is the 5th percentile, 0.999."""

    def unit_at(name: str) -> SimpleNamespace:
        def npu(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            c = float(feeds["c"][0])
            return {"y": np.array([c, math.sqrt(1 - c * c)])}

        return SimpleNamespace(
            name=name,
            input_names=["c"],
            npu=SimpleNamespace(run=npu),
            cpu=SimpleNamespace(run=lambda _f: {"y": [1, 0]}),
        )

    frames = [{"c": np.array([0.999])}] * 99 + [{"c": np.array([0.90])}]
    floors = audit_floors([unit_at("backbone")], frames)  # type: ignore[list-item]
    assert floors["backbone"] == pytest.approx(0.999)


def _log(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


RUN_END = {"record": "run", "run": "r1", "frames": 100, "seconds": 1.0, "units": {}, "audits": {}}
EVENT = {"run": "r1", "frame": 3, "unit": "backbone", "trigger": "nan", "action": "retry_cpu"}


@pytest.mark.parametrize(
    "line, said",
    [
        ({**EVENT, "unit": 7}, "'unit' must be a string"),
        ({**EVENT, "action": "explode"}, "'action' must be one of"),
        ({**EVENT, "trigger": ["nan"]}, "'trigger' must be one of"),
        ({**EVENT, "frame": -1}, "'frame' must be a number from 0"),
        ({**EVENT, "before_ms": "fast"}, "'before_ms' must be a number from 0"),
        ({"record": "after", "run": "r1", "frame": 3, "unit": "b", "trigger": "nan"}, "'after_ms' must be a number"),
        ({**RUN_END, "frames": float("inf")}, "'frames' must be a number from 0"),
        ({**RUN_END, "units": {"b": {"npu": {"runs": "many"}}}}, "each device's runs and ms must be numbers"),
        ({**RUN_END, "units": {"b": {"gpu": {"runs": 1}}}}, "each device's runs and ms must be numbers"),
        ({**RUN_END, "units": {"b": []}}, "each device's runs and ms must be numbers"),
        ({**RUN_END, "audits": {"b": {"audits": "x"}}}, "its counts must be numbers"),
        ({**RUN_END, "audits": {"frames": {"boxes_kept": {"kept": None}}}}, "its counts must be numbers"),
        ({**RUN_END, "audits": {"b": {"min_cosine": "low"}}}, "its counts must be numbers"),
        ({**RUN_END, "audits": {"b": 3}}, "its counts must be numbers"),
        ([1, 2], "not a JSON object"),
        ({**EVENT, "record": "summary"}, "not an event, an 'after' or a 'run' line"),
    ],
)
def test_an_event_line_no_run_wrote_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: Any, said: str
) -> None:
    """Each field ``events`` reads, wrong in each way: a one-line error naming the line (exit 2), no traceback."""
    log = _log(tmp_path / "events.jsonl", [EVENT, line, RUN_END])
    assert main(["events", str(log)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "line 2:" in err[0] and said in err[0], err


def test_events_reads_a_log_as_untrusted_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A FIFO and a device are refused before they are read (they would block or grow for ever); a line cut short
    mid-log (a run killed, then another appended) is left out and counted, not the whole log refused; a run given
    twice is counted once; escape sequences in a unit's name do not reach the terminal; ``--json`` has no NaN."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for bad in (fifo, Path("/dev/zero")):
        assert main(["events", str(bad)]) == 2
        assert "is not a regular file" in capsys.readouterr().err
    forged = {**EVENT, "unit": "backbone\x1b]0;owned\x07\x1b[2J"}
    log = _log(tmp_path / "a.jsonl", [EVENT, '{"run": "r0", "frame": 1, "unit": "ba', forged, RUN_END])
    copy = _log(tmp_path / "b.jsonl", [EVENT, forged, RUN_END])
    assert main(["events", str(log), str(copy), str(log)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "1 run(s), 100 frames" in out and "1 line(s) cut short or not JSON" in out and "given twice" in out
    assert "nan: 2 events, 20.00 per 1,000 frames" in out
    unfinished = _log(tmp_path / "c.jsonl", [{**EVENT, "run": "r9"}])
    assert main(["events", str(unfinished), "--json"]) == 0
    text = capsys.readouterr().out
    assert ": NaN" not in text and json.loads(text)["rates"]["nan"]["per_1000_frames"] is None


def test_a_million_moves_read_in_flat_memory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Counts per run, not every record: 200,000 moves are counted, the first MAX_MOVES listed."""
    from yolo_edge.flows.events import MAX_MOVES, analyse, read_logs

    move = json.dumps({**EVENT, "trigger": "performance", "action": "move_to_cpu"})
    (tmp_path / "big.jsonl").write_text((move + "\n") * 200_000 + json.dumps(RUN_END) + "\n")
    report = analyse(read_logs([tmp_path / "big.jsonl"]))
    assert report.moves_in_all == 200_000 and len(report.moves) == MAX_MOVES
    assert report.causes == {"backbone": {"performance": 200_000}}


@pytest.mark.parametrize(
    "field, value",
    [
        ("sla_ms", float("nan")),
        ("sla_ms", -1.0),
        ("sla_ms", "100"),
        ("sla_ms", 0),
        ("runs", -5),
        ("runs", "100"),
        ("runs", 2.5),
        ("runs", True),
        ("max_drift", float("inf")),
        ("max_regression", 1e9),
        ("shards", 0),
    ],
)
def test_the_python_gate_checks_its_limits_as_the_cli_does(field: str, value: object) -> None:
    with pytest.raises(YoloEdgeError, match=f"{field} must be"):
        GateRequest(**{field: value})  # type: ignore[arg-type]


def test_a_plan_whose_only_reasons_straddle_their_limits_is_undecided() -> None:
    """The rule deploy's exit code reads (4, as ``check``'s): undecided drift or SLA alone; anything failed, FAIL."""
    from yolo_edge.validate.verdict import UNDECIDED, UNDECIDED_SLA, PlanRun

    assert PlanRun("split", fails=[UNDECIDED]).undecided and PlanRun("split", fails=[UNDECIDED_SLA]).undecided
    assert not PlanRun("split", fails=[UNDECIDED, "SLA"]).undecided and not PlanRun("split").undecided
    assert loss_bound(0, 100) < 0.04


def test_a_simulator_slow_on_a_loaded_host_is_no_board_timeout(demo_split: Any, tensors: list[Any]) -> None:
    """Rockchip's simulator on a loaded host took longer than the unit timeout: a ``timeout`` event priced as the
    board's CPU, and advice to recompile. A simulator computing its numerics here is waited for past the limit; an
    injected hang (no numerics running) still times out."""
    from concurrent.futures import ThreadPoolExecutor
    from concurrent.futures import TimeoutError as FutureTimeout
    from dataclasses import replace

    from yolo_edge.backends.onnxruntime.backend import OnnxRuntimeBackend
    from yolo_edge.backends.simulated import SimulatedNpu
    from yolo_edge.core.config import Faults, load_profile
    from yolo_edge.runtime.calls import answer_within

    neck = demo_split["neck"]
    calib = [{t.name: x[t.name] for t in neck.inputs} for x in tensors[:1]]
    for faults, slow in ((Faults(), True), (Faults(hang_rate=1.0, hang_s=1.0), False)):
        profile = replace(load_profile("rk3588-approx"), faults=faults)
        exe = SimulatedNpu(profile, OnnxRuntimeBackend()).compile(neck.model, "int8", calib)
        numerics = exe.inner.run

        def loaded(feeds: Any, *rest: Any, numerics: Any = numerics) -> Any:
            time.sleep(0.5)  # the host's CPU taken by others: ten times the limit below
            return numerics(feeds, *rest)

        exe.inner.run = loaded  # type: ignore[attr-defined]
        with ThreadPoolExecutor(1) as pool:
            call = pool.submit(exe.run, calib[0])
            if slow:
                assert set(answer_within(call, 0.05, exe)) == {t.name for t in exe.outputs}
            else:
                with pytest.raises(FutureTimeout):
                    answer_within(call, 0.05, exe)
        exe.close()


def test_a_table_wraps_between_words_never_inside_one() -> None:
    """A narrow terminal wrapped "2188/2227" as "2188/222" then "7": a cell wraps at spaces, a word stays whole."""
    from yolo_edge.cli.common import table

    long = "backbone neck head INT8 on the NPU, decode FP32 on the CPU, the fastest the search judged"
    shown = table(("plan", "what runs where", "kept"), [("split", long, "2188/2227 (98.2%)")], width=60)
    words = {w for line in shown.splitlines() for w in line.split()}
    assert "2188/2227" in words and set(long.split()) <= words, shown
    assert max(len(line) for line in shown.splitlines()) <= 60, shown


def test_no_condition_named_says_so() -> None:
    from yolo_edge.validate.conditions import parse_conditions

    with pytest.raises(YoloEdgeError, match="no condition named: name some of dark"):
        parse_conditions(",")
