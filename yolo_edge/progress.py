"""Progress bars on stderr, only where a person watches (a terminal), never in logs or --quiet runs."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

Bar = Callable[[Sequence[Any], str], Any]


def progress_bar(enabled: bool) -> Bar:
    """``bar(items, desc)``: ``items`` wrapped in a tqdm bar when ``enabled`` and stderr is a terminal."""

    def wrap(items: Sequence[Any], desc: str) -> Any:
        if not enabled or not sys.stderr.isatty():
            return items
        from tqdm import tqdm

        return tqdm(items, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True)

    return wrap
