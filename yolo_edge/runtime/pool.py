"""A stream's pool of accelerator contexts under faults: a context whose calls fail ``failures`` times in a row leaves
the pool while another context of its unit still serves (its worker takes no frame: the pool shrinks), for
``cooldown_s``; then its worker takes one frame as a probe: an answer brings it back, a failure sends it out again.
The frame a failed call held re-runs on the CPU (the executor's retry), so every frame is accounted for;
``shrink_pool`` and ``restore_pool`` events say when the pool changed. The last context serving never leaves: past
it the executor's circuit breaker takes the unit to the CPU, as with one context.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from yolo_edge.runtime.events import EventLog, Trigger


@dataclass
class _Health:
    failures: int = 0  # calls failed in a row
    out_since: float | None = None  # when it left the pool (None: it serves)
    probing: bool = False  # its next call is a probe


class ContextPool:
    """The health of every accelerator unit's contexts, by unit name and context (``backends.base.context``)."""

    def __init__(self, failures: int, cooldown_s: float, events: EventLog, clock: Callable[[], float]) -> None:
        self.failures, self.cooldown_s, self.events, self.clock = failures, cooldown_s, events, clock
        self._health: dict[tuple[str, int], _Health] = {}
        self._lock = threading.Lock()

    def _out(self, unit: str, but: int) -> int:
        return sum(1 for (u, k), h in self._health.items() if u == unit and k != but and h.out_since is not None)

    def record(self, unit: str, contexts: int, k: int, trigger: Trigger | None, frame: int) -> None:
        """Context ``k`` of ``unit`` (a pool of ``contexts``) answered (``trigger`` None) or failed with ``trigger``."""
        if contexts < 2:
            return
        with self._lock:
            h = self._health.setdefault((unit, k), _Health())
            if trigger is None:
                if h.probing:
                    serving = contexts - self._out(unit, but=k)
                    detail = f"context {k} answered its probe: the pool serves on {serving} of {contexts} contexts"
                    self.events.add(frame, unit, "recovered", "restore_pool", detail)
                h.failures, h.probing = 0, False
                return
            h.failures += 1
            serving = contexts - 1 - self._out(unit, but=k)
            if serving < 1 or not (h.probing or h.failures >= self.failures):
                return
            why = "its probe failed" if h.probing else f"it failed {h.failures} calls in a row"
            h.out_since, h.probing = self.clock(), False
            detail = (
                f"context {k} leaves the pool ({why}): {serving} of {contexts} contexts serve; it probes again after "
                f"{self.cooldown_s:g} s"
            )
            self.events.add(frame, unit, trigger, "shrink_pool", detail)

    def wait(self, unit: str, k: int, stop: Callable[[], bool]) -> None:
        """Hold the worker of context ``k`` while it is out of the pool, until its cool-down has passed (its next call
        is then a probe) or ``stop()`` (the stream ends)."""
        while True:
            with self._lock:
                h = self._health.get((unit, k))
                if h is None or h.out_since is None:
                    return
                left = self.cooldown_s - (self.clock() - h.out_since)
                if left <= 0:
                    h.out_since, h.probing = None, True
                    return
            if stop():
                return
            time.sleep(min(left, 0.02))
