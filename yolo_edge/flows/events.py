"""The fallback log read back (``yolo-edge events LOG [LOG ...]``): the reference's "analyse the fallback log: how
often each trigger fires, the causes, and performance after each fallback, to decide what to recompile".

A log is the JSONL that ``yolo-edge run --events`` appends (:class:`yolo_edge.runtime.executor.EventLog`): one line per
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from yolo_edge.core.codec import plain
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import printable
from yolo_edge.runtime.executor import MOVES, Trigger

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TRIGGERS: tuple[str, ...] = typing.get_args(Trigger)
FAILURES = ("runtime_error", "timeout", "nan")  # the accelerator failing a frame


@dataclass
class LogRun:
    """One run's lines, gathered by its id from every file given."""

    run: str
    where: str  # the first file it was read from
    events: list[dict[str, Any]] = field(default_factory=list)
    after: dict[tuple[int, str, str], float] = field(default_factory=dict)  # (frame, unit, trigger) -> median ms
    end: dict[str, Any] | None = None  # the run's end line; None: killed before it


def _bad(path: Path, line: int, why: str) -> YoloEdgeError:
    return YoloEdgeError(
        f"{printable(path, 300)} line {line}: {why}; pass the JSONL that `yolo-edge run --events FILE` wrote"
    )


def _number(rec: dict[str, Any], key: str, path: Path, line: int, optional: bool = False) -> None:
    value = rec.get(key)
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise _bad(path, line, f"'{key}' must be a number >= 0, got {printable(repr(value), 60)}")


def read_logs(paths: Sequence[Path]) -> list[LogRun]:
    """Every run in ``paths``, in the order first seen. A last line cut short (a run killed mid-write) is left out;
    any other line that is not an event log's is an error."""
    runs: dict[str, LogRun] = {}
    for path in paths:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise YoloEdgeError(f"cannot read event log {printable(path, 300)}: {exc}") from None
        for i, text in enumerate(lines, 1):
            if not text.strip():
                continue
            try:
                rec = json.loads(text)
            except json.JSONDecodeError:
                if i == len(lines):  # cut short by a kill: what came before stands
                    continue
                raise _bad(path, i, "not JSON") from None
            if not isinstance(rec, dict):
                raise _bad(path, i, "not a JSON object")
            run_id = rec.get("run") or f"{path} (no run id)"
            if not isinstance(run_id, str):
                raise _bad(path, i, "'run' must be a string")
            run = runs.setdefault(run_id, LogRun(run_id, str(path)))
            kind = rec.get("record", "event")
            if kind not in ("event", "after", "run") or rec.get("trigger", TRIGGERS[0]) not in TRIGGERS:
                raise _bad(path, i, f"not an event, an 'after' or a 'run' line (record {printable(repr(kind), 40)})")
            if kind == "run":
                _number(rec, "frames", path, i)
                _number(rec, "seconds", path, i)
                if not isinstance(rec.get("units", {}), dict) or not isinstance(rec.get("audits", {}), dict):
                    raise _bad(path, i, "'units' and 'audits' must be objects")
                run.end = rec
                continue
            _number(rec, "frame", path, i)
            if not isinstance(rec.get("unit"), str):
                raise _bad(path, i, "'unit' must be a string")
            if kind == "after":
                _number(rec, "after_ms", path, i)
                run.after[(int(rec["frame"]), rec["unit"], rec["trigger"])] = float(rec["after_ms"])
            else:
                _number(rec, "before_ms", path, i, optional=True)
                if not isinstance(rec.get("action"), str):
                    raise _bad(path, i, "'action' must be a string")
                run.events.append(rec)
    return list(runs.values())


@dataclass(frozen=True)
class EventsReport:
    """What the logs say, per trigger and per unit, over every run given."""

    runs: int
    unfinished: list[str]  # runs with no end line: their events counted, their frames not known
    frames: int  # frames of the finished runs
    rates: dict[str, dict[str, float]]  # trigger -> events, per 1,000 frames (of finished runs)
    causes: dict[str, dict[str, int]]  # unit -> trigger -> events
    on_cpu: dict[str, dict[str, float | None]]  # unit -> runs on each device, the CPU's share, mean ms on each
    moves: list[dict[str, Any]]  # each move: run, frame, unit, trigger, action, before_ms, after_ms
    audits: dict[str, dict[str, Any]]  # unit -> audits, failed, lowest cosine, floor (over every run)
    advice: list[str]

    def to_dict(self) -> dict[str, Any]:
        return plain(self)


def _add_audits(into: dict[str, dict[str, Any]], run: dict[str, Any]) -> None:
    """One run's audit figures (its end line's ``audits``) added to those of the runs before it."""
    for unit, a in run.items():
        acc = into.setdefault(unit, {"audits": 0, "failed": 0, "min_cosine": None, "floor": a.get("floor")})
        acc["audits"] += int(a.get("audits", 0))
        acc["failed"] += int(a.get("failed", 0))
        if isinstance(a.get("boxes_kept"), dict):  # the frames' audit: FP32 boxes kept, frames lit unlike the proof's
            acc["kept"] = acc.get("kept", 0) + int(a["boxes_kept"].get("kept", 0))
            acc["of"] = acc.get("of", 0) + int(a["boxes_kept"].get("of", 0))
            acc["unseen"] = acc.get("unseen", 0) + int(a.get("unseen", 0))
            acc["frames"] = acc.get("frames", 0) + int(a.get("frames", 0))
        low = a.get("min_cosine")
        if low is not None and (acc["min_cosine"] is None or low < acc["min_cosine"]):
            acc["min_cosine"] = low


def analyse(runs: Sequence[LogRun]) -> EventsReport:
    finished = [r for r in runs if r.end is not None]
    frames = sum(int(r.end["frames"]) for r in finished if r.end is not None)
    counted = Counter(e["trigger"] for r in finished for e in r.events)
    every = Counter(e["trigger"] for r in runs for e in r.events)
    rates = {
        t: {"events": every[t], "per_1000_frames": 1000 * counted[t] / frames if frames else float("nan")}
        for t in TRIGGERS
        if every[t]
    }
    causes: dict[str, dict[str, int]] = {}
    for e in (e for r in runs for e in r.events):
        by = causes.setdefault(e["unit"], {})
        by[e["trigger"]] = by.get(e["trigger"], 0) + 1
    on_cpu: dict[str, dict[str, float]] = {}
    audits: dict[str, dict[str, Any]] = {}
    for r in finished:
        assert r.end is not None
        for unit, by in r.end.get("units", {}).items():
            acc = on_cpu.setdefault(unit, {"npu_runs": 0, "cpu_runs": 0, "npu_ms": 0.0, "cpu_ms": 0.0})
            for device in ("npu", "cpu"):
                acc[f"{device}_runs"] += float(by.get(device, {}).get("runs", 0))
                acc[f"{device}_ms"] += float(by.get(device, {}).get("ms", 0.0))
        _add_audits(audits, r.end.get("audits", {}))
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
        {
            "run": r.run,
            "frame": e["frame"],
            "unit": e["unit"],
            "trigger": e["trigger"],
            "action": e["action"],
            "before_ms": e.get("before_ms"),
            "after_ms": r.after.get((int(e["frame"]), e["unit"], e["trigger"])),
        }
        for r in runs
        for e in r.events
        if e["action"] in MOVES
    ]
    unfinished = [r.run for r in runs if r.end is None]
    return EventsReport(len(runs), unfinished, frames, rates, causes, shares, moves, audits, _advice(causes, audits))


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
    ]
    if not report.rates:
        out.append("no fallback events")
    for t, r in report.rates.items():
        rate = r["per_1000_frames"]
        out.append(f"  {t}: {int(r['events'])} events" + ("" if math.isnan(rate) else f", {rate:.2f} per 1,000 frames"))
    if report.causes:
        out.append("causes by unit:")
        out += [f"  {u}: " + ", ".join(f"{t} {n}" for t, n in sorted(by.items())) for u, by in report.causes.items()]
    if report.on_cpu:
        out.append("time on the CPU by unit:")
        for u, a in report.on_cpu.items():
            ms = ", ".join(
                f"{d} {a[f'{d}_ms_mean']:.2f} ms a run" for d in ("npu", "cpu") if a[f"{d}_ms_mean"] is not None
            )
            total = int((a["npu_runs"] or 0) + (a["cpu_runs"] or 0))
            out.append(f"  {u}: {a['cpu_share']:.1%} of its {total} runs; {ms}")
    if report.moves:
        out.append("moves, the unit's median time before and after:")
        for m in report.moves:
            before = "?" if m["before_ms"] is None else f"{m['before_ms']:.2f}"
            after = "?" if m["after_ms"] is None else f"{m['after_ms']:.2f}"
            out.append(f"  frame {m['frame']} {m['unit']} {m['trigger']} -> {m['action']}: {before} -> {after} ms")
    for u, a in report.audits.items():
        low = "" if a["min_cosine"] is None else f", lowest cosine {a['min_cosine']:.4f}"
        floor = "" if a["floor"] is None else f" (floor {a['floor']:.5f})"
        kept = f", FP32 boxes kept {a['kept']}/{a['of']}" if "of" in a else ""
        kept += f", {a['unseen']} of {a['frames']} frames lit unlike the proof's" if a.get("unseen") else ""
        out.append(f"precision audit of {u}: {a['audits']} audits, {a['failed']} failed{floor}{low}{kept}")
    if report.advice:
        out.append("what to recompile:")
        out += [f"  {a}" for a in report.advice]
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
