"""Fallback events: what the runtime decided and why (a unit retried or moved to the CPU, the breaker opened or
closed, a precision alert), counted and mirrored to a JSONL log (``yolo-edge run --events``; read back by
``yolo_edge.flows.events``). Every part of the runtime records into one :class:`EventLog`.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from yolo_edge.core.codec import dumps, plain
from yolo_edge.core.config import Device

Trigger = Literal[
    "unsupported_op", "memory", "performance", "runtime_error", "timeout", "nan", "precision", "recovered"
]
Action = Literal[
    "retry_cpu",
    "open_breaker",
    "close_breaker",
    "reopen_breaker",
    "move_to_cpu",
    "move_to_npu",
    "compile_on_cpu",
    "alert",
    "sub_batch",  # a batch asked for runs as sub-batches of the largest that fits the accelerator's memory
    "shrink_batch",  # an allocation failed at run time: the batch halves (its rows run at batch 1 meanwhile)
    "shrink_pool",  # one context of a stream's pool failed in a row: it takes no frame until its probe
    "restore_pool",  # that context answered its probe: back in the pool
]


@dataclass(frozen=True)
class FallbackEvent:
    time: float
    frame: int
    unit: str
    trigger: Trigger
    action: Action
    detail: str = ""
    run: str = ""  # the run's id (EventLog.run): one log file can hold many runs
    before_ms: float | None = None  # the unit's median time over its last AROUND runs before the event


@dataclass(frozen=True)
class EventSummary:
    """How many fallback events, by trigger, unit and action."""

    total: int
    by_trigger: dict[str, int]
    by_unit: dict[str, int]
    by_action: dict[str, int]

    def to_dict(self) -> dict[str, object]:
        return plain(self)


KEPT_EVENTS = 1000  # the fallback events an EventLog keeps in memory (all are counted, and all written to its file)
AROUND = 30  # a unit's runs whose median is its time before an event, and after a move (yolo-edge events)
MOVES: frozenset[str] = frozenset({"move_to_cpu", "move_to_npu", "open_breaker", "close_breaker", "reopen_breaker"})


class EventLog:
    """Thread-safe record of fallback events: every one counted (by trigger, unit and action) and mirrored to a JSONL
    file when ``path`` is given; the last :data:`KEPT_EVENTS` kept in memory, so a run of months that falls back
    every frame holds no more than one of minutes."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else None
        self.run = uuid.uuid4().hex[:12]
        self.events: deque[FallbackEvent] = deque(maxlen=KEPT_EVENTS)
        self._counts: dict[str, Counter[str]] = {"trigger": Counter(), "unit": Counter(), "action": Counter()}
        self.write_error: str | None = None  # the file stopped taking events: a problem of the run, not a crash
        self.latency = "measured"  # how the unit times are obtained (config.FrameKind): set by the executor
        self._lock = threading.Lock()
        self._recent: dict[str, deque[float]] = {}  # unit -> its last AROUND times
        self._after: list[tuple[FallbackEvent, list[float]]] = []  # events whose unit's next AROUND times are due
        self.unit_time: dict[str, dict[str, list[float]]] = {}  # unit -> device -> [runs, total ms]

    def add(self, frame: int, unit: str, trigger: Trigger, action: Action, detail: str = "") -> None:
        with self._lock:
            recent = self._recent.get(unit)
            before = statistics.median(recent) if recent else None
            ev = FallbackEvent(time.time(), frame, unit, trigger, action, detail, self.run, before)
            self.events.append(ev)
            for key, value in (("trigger", trigger), ("unit", unit), ("action", action)):
                self._counts[key][value] += 1
            if self.path and action in MOVES:
                self._after.append((ev, []))
            self._write(ev, f"events from frame {frame} on are not in it")

    def timed(self, unit: str, device: Device, ms: float) -> None:
        """One run of ``unit`` on ``device`` took ``ms`` (the board's model where it is modelled)."""
        with self._lock:
            self._recent.setdefault(unit, deque(maxlen=AROUND)).append(ms)
            acc = self.unit_time.setdefault(unit, {}).setdefault(device, [0, 0.0])
            acc[0], acc[1] = acc[0] + 1, acc[1] + ms
            if not self._after:
                return
            for ev, after in self._after:
                if ev.unit == unit:
                    after.append(ms)
            for ev, after in [x for x in self._after if len(x[1]) >= AROUND]:
                self._after.remove((ev, after))
                self._write_after(ev, after)

    def finish(self, frames: int, seconds: float, audits: dict[str, dict[str, object]]) -> None:
        """The run's end in the file: its frames, each unit's time per device and how it was obtained (``latency``,
        which the executor writing here sets: a simulated board's are modelled), the audits, and the time after the
        events whose unit had not run AROUND times since (``yolo-edge events`` reads it back)."""
        with self._lock:
            for ev, after in self._after:
                if after:
                    self._write_after(ev, after)
            self._after = []
            record = {"record": "run", "run": self.run, "time": time.time(), "frames": frames, "seconds": seconds}
            record["latency"] = self.latency
            units = {u: {d: {"runs": n, "ms": ms} for d, (n, ms) in by.items()} for u, by in self.unit_time.items()}
            self._write({**record, "units": units, "audits": audits}, "its end is not in it")

    def _write_after(self, ev: FallbackEvent, after: list[float]) -> None:
        record = {"record": "after", "run": self.run, "frame": ev.frame, "unit": ev.unit, "trigger": ev.trigger}
        self._write({**record, "after_ms": statistics.median(after), "runs": len(after)}, "")

    def _write(self, record: object, lost: str) -> None:
        """One JSON line to the file (under the lock); a file that stops taking them is the run's problem."""
        if not self.path or self.write_error is not None:
            return
        try:
            with self.path.open("a") as f:
                f.write(dumps(record, indent=None) + "\n")
        except OSError as exc:
            self.write_error = f"--events {self.path}: {exc.strerror or exc}; {lost or 'the rest is not in it'}"

    def to_jsonl(self) -> str:
        with self._lock:
            return "".join(dumps(e, indent=None) + "\n" for e in self.events)

    def summary(self) -> EventSummary:
        with self._lock:
            counts = {k: dict(c) for k, c in self._counts.items()}
        return EventSummary(sum(counts["trigger"].values()), counts["trigger"], counts["unit"], counts["action"])
