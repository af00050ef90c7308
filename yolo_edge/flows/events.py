"""The fallback log read back (``yolo-edge events LOG [LOG ...]``): the reference's "analyse the fallback log: how
often each trigger fires, the causes, and performance after each fallback, to decide what to recompile".

A log is the JSONL that ``yolo-edge run --events`` appends (:class:`yolo_edge.runtime.events.EventLog`): one line per
event (with the run's id and the unit's median time before it), an ``after`` line with the unit's median time over
the runs after a move, and a ``run`` line at the run's end (its frames, seconds, each unit's runs and time per
device, the precision audit's figures). One file may hold many runs, and many files many devices; a run killed
before its end line counts its events but not its frames, and is named. A log is untrusted input: a line that is
not one of these is a one-line error naming the file and the line.
"""

from __future__ import annotations

import json
import math
import typing
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from yolo_edge.core.codec import plain
from yolo_edge.core.config import FrameKind
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import printable, regular_file
from yolo_edge.runtime.events import MOVES, Action, Trigger

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TRIGGERS: tuple[str, ...] = typing.get_args(Trigger)
ACTIONS: tuple[str, ...] = typing.get_args(Action)
LATENCY_KINDS: tuple[str, ...] = typing.get_args(FrameKind)
FAILURES = ("runtime_error", "timeout", "nan")  # the accelerator failing a frame


MAX_LOG_BYTES = 1 << 30  # a log's size at most: a day of events at a frame rate that fires one every frame
MAX_LINE_BYTES = 1 << 20  # one line at most: a run's end line lists every unit and audit, a few kilobytes
MAX_MOVES = 1000  # moves listed one by one (all are counted): a flapping unit's million moves list nothing more


@dataclass
class LogRun:
    """One run's lines, gathered by its id from the files given: counts, not records (a log of millions of events
    reads in flat memory)."""

    run: str
    where: str  # the file it was read from
    causes: Counter[tuple[str, str]] = field(default_factory=Counter)  # (unit, trigger) -> events
    moves: list[dict[str, Any]] = field(default_factory=list)  # the first MAX_MOVES moves, with their times
    after: dict[tuple[int, str, str], float] = field(default_factory=dict)  # (frame, unit, trigger) -> median ms
    end: dict[str, Any] | None = None  # the run's end line, checked; None: killed before it


@dataclass
class Logs:
    """Every run read from the files given, and what was left out of them."""

    runs: list[LogRun]
    cut: int = 0  # lines that are not JSON (a run killed mid-write, then another appended): left out, counted
    repeated: list[str] = field(default_factory=list)  # runs given twice (a file twice, or a copy): counted once
    moves: int = 0  # moves in all (MAX_MOVES of them listed)


def _bad(path: Path, line: int, why: str) -> YoloEdgeError:
    return YoloEdgeError(
        f"{printable(path, 300)} line {line}: {why}; pass the JSONL that `yolo-edge run --events FILE` wrote"
    )


MAX_FIGURE = 1e12  # frames, runs, milliseconds: a log's figure past this (1e308) is no run's


def _is_number(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and 0 <= value <= MAX_FIGURE


def _number(rec: dict[str, Any], key: str, path: Path, line: int, optional: bool = False) -> None:
    value = rec.get(key)
    if optional and value is None:
        return
    if not _is_number(value):
        raise _bad(path, line, f"'{key}' must be a number from 0 to {MAX_FIGURE:g}, got {printable(repr(value), 60)}")


def _string(rec: dict[str, Any], key: str, path: Path, line: int, allowed: tuple[str, ...] = ()) -> str:
    value = rec.get(key)
    if not isinstance(value, str) or (allowed and value not in allowed):
        want = f"one of {', '.join(allowed)}" if allowed else "a string"
        raise _bad(path, line, f"'{key}' must be {want}, got {printable(repr(value), 60)}")
    return value


def _end_line(rec: dict[str, Any], path: Path, line: int) -> dict[str, Any]:
    """A run's end line, every figure ``analyse`` reads of it checked: its frames, seconds, each unit's runs and
    milliseconds per device, each audit's counts."""
    _number(rec, "frames", path, line)
    _number(rec, "seconds", path, line)
    units, audits = rec.get("units", {}), rec.get("audits", {})
    if not isinstance(units, dict) or not isinstance(audits, dict):
        raise _bad(path, line, "'units' and 'audits' must be objects")
    for unit, by in units.items():
        if not isinstance(by, dict) or not all(
            d in ("npu", "cpu") and isinstance(f, dict) and all(_is_number(f.get(k, 0)) for k in ("runs", "ms"))
            for d, f in by.items()
        ):
            raise _bad(path, line, f"unit {printable(repr(unit), 60)}: each device's runs and ms must be numbers")
    for unit, a in audits.items():
        parts = {"boxes_kept": ("kept", "of"), "boxes_added": ("added", "of")}  # the frames' audit's counts
        ok = isinstance(a, dict) and all(_is_number(a.get(k, 0)) for k in ("audits", "failed", "unseen", "frames"))
        ok = ok and all(a.get(k) is None or _is_number(a[k]) for k in ("min_cosine", "floor"))
        ok = ok and all(
            a.get(part) is None or (isinstance(a[part], dict) and all(_is_number(a[part].get(k, 0)) for k in keys))
            for part, keys in parts.items()
        )
        if not ok:
            raise _bad(path, line, f"audit of {printable(repr(unit), 60)}: its counts must be numbers")
    kind = rec.get("latency", "measured")  # a log older than the key: measured (it had no board model)
    if kind not in LATENCY_KINDS:
        raise _bad(path, line, f"'latency' must be one of {', '.join(LATENCY_KINDS)}, got {printable(repr(kind), 60)}")
    return {"frames": rec["frames"], "units": units, "audits": audits, "latency": kind}


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """A log's lines, numbered from 1, each at most :data:`MAX_LINE_BYTES` (``read_logs`` has refused what is not a
    regular file of at most :data:`MAX_LOG_BYTES` before it opens one)."""
    try:
        with open(path, "rb") as f:
            for i, text in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), 1):
                if len(text) > MAX_LINE_BYTES:
                    raise _bad(path, i, f"a line over {MAX_LINE_BYTES:,} bytes")
                yield i, text
    except OSError as exc:
        raise YoloEdgeError(f"cannot read event log {printable(path, 300)}: {exc.strerror or exc}") from None


def read_logs(paths: Sequence[Path]) -> Logs:
    """Every run in ``paths``, in the order first seen. A line that is not JSON (a run killed mid-write) is left out
    and counted; a file given twice is read once, a run whose end an earlier file held is counted once; any other
    line that is not an event log's is a one-line error naming the file and the line."""
    logs = Logs([])
    runs: dict[str, LogRun] = {}
    seen_files: set[tuple[int, int]] = set()
    ended: set[str] = set()
    for path in paths:
        st = regular_file(path, "event log", MAX_LOG_BYTES)
        if (st.st_dev, st.st_ino) in seen_files:
            continue
        seen_files.add((st.st_dev, st.st_ino))
        here: set[str] = set()
        for i, text in _lines(path):
            if not text.strip():
                continue
            try:
                rec = json.loads(text)
            except (json.JSONDecodeError, UnicodeDecodeError):
                logs.cut += 1
                continue
            if not isinstance(rec, dict):
                raise _bad(path, i, "not a JSON object")
            run_id = rec.get("run") or f"{path} (no run id)"
            if not isinstance(run_id, str):
                raise _bad(path, i, "'run' must be a string")
            if run_id in ended and run_id not in here:  # its end read from an earlier file: this is a copy
                if run_id not in logs.repeated:
                    logs.repeated.append(run_id)
                continue
            here.add(run_id)
            run = runs.setdefault(run_id, LogRun(run_id, str(path)))
            kind = rec.get("record", "event")
            if kind not in ("event", "after", "run"):
                raise _bad(path, i, f"not an event, an 'after' or a 'run' line (record {printable(repr(kind), 40)})")
            if kind == "run":
                run.end = _end_line(rec, path, i)
                ended.add(run_id)
                continue
            _number(rec, "frame", path, i)
            unit, trigger = _string(rec, "unit", path, i), _string(rec, "trigger", path, i, TRIGGERS)
            key = (int(rec["frame"]), unit, trigger)
            if kind == "after":
                _number(rec, "after_ms", path, i)
                run.after[key] = float(rec["after_ms"])
                continue
            _number(rec, "before_ms", path, i, optional=True)
            action = _string(rec, "action", path, i, ACTIONS)
            run.causes[(unit, trigger)] += 1
            if action in MOVES:
                logs.moves += 1
                if logs.moves <= MAX_MOVES:
                    run.moves.append({**dict(zip(("frame", "unit", "trigger"), key)), "action": action,
                                      "before_ms": rec.get("before_ms")})  # fmt: skip
    logs.runs = list(runs.values())
    return logs


@dataclass(frozen=True)
class EventsReport:
    """What the logs say, per trigger and per unit, over every run given."""

    runs: int
    unfinished: list[str]  # runs with no end line: their events counted, their frames not known
    frames: int  # frames of the finished runs
    rates: dict[str, dict[str, float | None]]  # trigger -> events, per 1,000 frames (of finished runs; None: none)
    causes: dict[str, dict[str, int]]  # unit -> trigger -> events
    on_cpu: dict[str, dict[str, float | None]]  # unit -> runs on each device, the CPU's share, mean ms on each
    moves: list[dict[str, Any]]  # each move (the first MAX_MOVES): run, frame, unit, trigger, action, before/after
    audits: dict[str, dict[str, Any]]  # unit -> audits, failed, lowest cosine, floor (over every run)
    advice: list[str]
    latency: list[str] = field(default_factory=list)  # how the unit times were obtained, over the finished runs
    moves_in_all: int = 0
    cut_lines: int = 0  # lines that were not JSON, left out
    repeated: list[str] = field(default_factory=list)  # runs given twice, counted once

    def to_dict(self) -> dict[str, Any]:
        return plain(self)


def _add_audits(into: dict[str, dict[str, Any]], run: dict[str, Any]) -> None:
    """One run's audit figures (its end line's ``audits``, checked) added to those of the runs before it."""
    for unit, a in run.items():
        acc = into.setdefault(unit, {"audits": 0, "failed": 0, "min_cosine": None, "floor": a.get("floor")})
        acc["audits"] += int(a.get("audits", 0))
        acc["failed"] += int(a.get("failed", 0))
        if isinstance(a.get("boxes_kept"), dict):  # the frames' audit: FP32 boxes kept, frames lit unlike the proof's
            acc["kept"] = acc.get("kept", 0) + int(a["boxes_kept"].get("kept", 0))
            acc["of"] = acc.get("of", 0) + int(a["boxes_kept"].get("of", 0))
            acc["unseen"] = acc.get("unseen", 0) + int(a.get("unseen", 0))
            added = a.get("boxes_added") or {}
            acc["added"] = acc.get("added", 0) + int(added.get("added", 0))
            acc["boxes"] = acc.get("boxes", 0) + int(added.get("of", 0))
            acc["frames"] = acc.get("frames", 0) + int(a.get("frames", 0))
        low = a.get("min_cosine")
        if low is not None and (acc["min_cosine"] is None or low < acc["min_cosine"]):
            acc["min_cosine"] = low


def analyse(logs: Logs) -> EventsReport:
    runs = logs.runs
    finished = [r for r in runs if r.end is not None]
    frames = sum(int(r.end["frames"]) for r in finished if r.end is not None)
    counted: Counter[str] = Counter()
    every: Counter[str] = Counter()
    causes: dict[str, dict[str, int]] = {}
    for r in runs:
        for (unit, trigger), n in r.causes.items():
            every[trigger] += n
            counted[trigger] += n if r.end is not None else 0
            by = causes.setdefault(unit, {})
            by[trigger] = by.get(trigger, 0) + n
    rates: dict[str, dict[str, float | None]] = {
        t: {"events": every[t], "per_1000_frames": 1000 * counted[t] / frames if frames else None}
        for t in TRIGGERS
        if every[t]
    }
    on_cpu: dict[str, dict[str, float]] = {}
    audits: dict[str, dict[str, Any]] = {}
    for r in finished:
        assert r.end is not None
        for unit, by in r.end["units"].items():
            acc = on_cpu.setdefault(unit, {"npu_runs": 0, "cpu_runs": 0, "npu_ms": 0.0, "cpu_ms": 0.0})
            for device in ("npu", "cpu"):
                acc[f"{device}_runs"] += float(by.get(device, {}).get("runs", 0))
                acc[f"{device}_ms"] += float(by.get(device, {}).get("ms", 0.0))
        _add_audits(audits, r.end["audits"])
    shares = {
        unit: {
            "npu_runs": a["npu_runs"],
            "cpu_runs": a["cpu_runs"],
            "cpu_share": a["cpu_runs"] / max(1.0, a["npu_runs"] + a["cpu_runs"]),
            "npu_ms_mean": a["npu_ms"] / a["npu_runs"] if a["npu_runs"] else None,
            "cpu_ms_mean": a["cpu_ms"] / a["cpu_runs"] if a["cpu_runs"] else None,
        }
        for unit, a in on_cpu.items()
    }
    moves = [
        {"run": r.run, **m, "after_ms": r.after.get((m["frame"], m["unit"], m["trigger"]))}
        for r in runs
        for m in r.moves
    ]
    unfinished = [r.run for r in runs if r.end is None]
    return EventsReport(
        len(runs),
        unfinished,
        frames,
        rates,
        causes,
        shares,
        moves,
        audits,
        _advice(causes, audits),
        sorted({r.end["latency"] for r in finished if r.end is not None}),
        logs.moves,
        logs.cut,
        logs.repeated,
    )


def _advice(causes: dict[str, dict[str, int]], audits: dict[str, dict[str, Any]]) -> list[str]:
    """What the causes say to recompile, per unit (the README's "reading the fallback log")."""
    out = []
    for unit, by in sorted(causes.items()):
        if by.get("precision"):
            a = audits.get(unit, {})
            out.append(
                f"{unit}: its numerics left what the deploy proved ({by['precision']} precision events"
                + (f", {a['failed']} of {a['audits']} audits failed" if a else "")
                + "): deploy again with calibration images like the frames it sees (the conditions where it failed), "
                "or a wider precision for it"
                + (
                    f"; {a['unseen']} of its {a['frames']} frames were lit unlike any the deploy proved"
                    if a.get("unseen")
                    else ""
                )
            )
        if by.get("performance"):
            out.append(
                f"{unit}: slower on the accelerator than its CPU twin ({by['performance']} moves): place it on the "
                "CPU, or recompile it for the board's toolchain and driver"
            )
        failed = sum(by.get(t, 0) for t in FAILURES)
        if failed:
            out.append(
                f"{unit}: the accelerator failed {failed} of its frames (runtime errors, timeouts, NaN): recompile it "
                "with the board's toolchain version, or keep it on the CPU"
            )
    return out


def lines(report: EventsReport) -> list[str]:
    """The report as text, a paragraph per question."""
    out = [
        f"{report.runs} run(s), {report.frames} frames"
        + (
            f"; {len(report.unfinished)} run(s) ended without their end line (events counted, frames not known)"
            if report.unfinished
            else ""
        )  # fmt: skip
        + (f"; {report.cut_lines} line(s) cut short or not JSON, left out" if report.cut_lines else "")
        + (f"; {len(report.repeated)} run(s) given twice, counted once" if report.repeated else "")
    ]
    if not report.rates:
        out.append("no fallback events")
    for t, r in report.rates.items():
        rate = r["per_1000_frames"]
        out.append(
            f"  {t}: {int(r['events'] or 0)} events" + ("" if rate is None else f", {rate:.2f} per 1,000 frames")
        )
    if report.causes:
        out.append("causes by unit:")
        out += [
            f"  {printable(u, 80)}: " + ", ".join(f"{t} {n}" for t, n in sorted(by.items()))
            for u, by in report.causes.items()
        ]
    if report.on_cpu:
        out.append(f"time on the CPU by unit (times {' and '.join(report.latency) or 'measured'}):")
        for u, a in report.on_cpu.items():
            ms = ", ".join(
                f"{d} {a[f'{d}_ms_mean']:.2f} ms a run" for d in ("npu", "cpu") if a[f"{d}_ms_mean"] is not None
            )
            total = int((a["npu_runs"] or 0) + (a["cpu_runs"] or 0))
            out.append(f"  {printable(u, 80)}: {a['cpu_share']:.1%} of its {total} runs; {ms}")
    if report.moves:
        more = report.moves_in_all - len(report.moves)
        out.append(
            "moves, the unit's median time before and after"
            + (f" (the first {len(report.moves)} of {report.moves_in_all})" if more else "")
            + ":"
        )
        for m in report.moves:
            before = "?" if m["before_ms"] is None else f"{m['before_ms']:.2f}"
            after = "?" if m["after_ms"] is None else f"{m['after_ms']:.2f}"
            unit = printable(m["unit"], 80)
            out.append(f"  frame {m['frame']} {unit} {m['trigger']} -> {m['action']}: {before} -> {after} ms")
    for u, a in report.audits.items():
        low = "" if a["min_cosine"] is None else f", lowest cosine {a['min_cosine']:.4f}"
        floor = "" if a["floor"] is None else f" (floor {a['floor']:.5f})"
        kept = f", FP32 boxes kept {a['kept']}/{a['of']}" if "of" in a else ""
        kept += f", boxes added {a['added']}/{a['boxes']}" if a.get("boxes") else ""
        kept += f", {a['unseen']} of {a['frames']} frames lit unlike the proof's" if a.get("unseen") else ""
        out.append(
            f"precision audit of {printable(u, 80)}: {a['audits']} audits, {a['failed']} failed{floor}{low}{kept}"
        )
    if report.advice:
        out.append("what to recompile:")
        out += [f"  {printable(a, 400)}" for a in report.advice]
    return out


def figure(report: EventsReport) -> Figure:
    """Events per 1,000 frames by trigger, one bar segment per unit."""
    from yolo_edge.flows.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5), dpi=110)
    triggers = list(report.rates) or ["(none)"]
    bottom = [0.0] * len(triggers)
    scale = 1000 / report.frames if report.frames else 1.0
    for unit, by in report.causes.items():
        heights = [by.get(t, 0) * scale for t in triggers]
        ax.bar(triggers, heights, bottom=bottom, label=unit)
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.set_ylabel("events per 1,000 frames" if report.frames else "events (no finished run: frames unknown)")
    ax.set_title(f"Fallback events of {report.runs} run(s), {report.frames} frames")
    if report.causes:
        ax.legend(fontsize=8)
    return fig
