"""Progress on stderr for the long commands (check, val, bench, deploy's phases): a bar with counts and rate on a
terminal, one line per phase when finished elsewhere (a CI log), nothing under ``--quiet`` or ``--json``."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

Bar = Callable[[Sequence[Any], str], Any]


def progress_bar(enabled: bool, clock: Callable[[], float] = time.monotonic, out: TextIO | None = None) -> Bar:
    """``bar(items, desc)``: ``items`` wrapped in a tqdm bar when ``enabled`` and stderr (``out``) is a terminal;
    when it is not, the items as they are and, once they are all done, one line: ``yolo-edge: desc: n in t s
    (r/s)``."""

    def wrap(items: Sequence[Any], desc: str) -> Any:
        stream = out or sys.stderr
        if not enabled:
            return items
        if stream.isatty():
            from tqdm import tqdm

            return tqdm(items, desc=desc, file=stream, leave=False, dynamic_ncols=True)
        return _line_when_done(items, desc, clock, stream)

    return wrap


def _line_when_done(items: Sequence[Any], desc: str, clock: Callable[[], float], out: TextIO) -> Iterator[Any]:
    start = clock()
    yield from items
    took = clock() - start
    rate = f" ({len(items) / took:.1f}/s)" if took > 0 else ""
    print(f"yolo-edge: {desc}: {len(items)} in {took:.1f} s{rate}", file=out, flush=True)


def ticks(bar: Bar, total: int, desc: str) -> Callable[[int, int], None]:
    """A ``progress(done, total)`` callback that advances ``bar`` over ``total`` steps, one per call; the last
    call finishes it (the bar closed, the line printed)."""
    steps = iter(bar(range(total), desc))

    def step(done: int, of: int) -> None:
        next(steps, None)
        if done >= of:
            for _ in steps:
                pass

    return step
