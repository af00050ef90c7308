"""Frame sources for streams, one reader thread each: files (an image, a folder, a video) and live sources (a camera
index, an RTSP or HTTP(S) URL: whatever OpenCV's VideoCapture opens).

A file source never drops a frame: its reader blocks while the pipeline is full (backpressure). A live source
cannot wait: with ``drop-oldest`` (the default) the oldest queued frame makes room for the newest and is counted as
dropped (``queue_full``); with ``block`` the reader waits, as for a file. ``max_fps`` drops frames that come sooner
than 1/max_fps after the last one kept. A live source that closes is reopened with exponential backoff (capped),
with no synthetic frames in the gap; the gap is an event with its duration. An open that delivers no frame (a
server that accepts and then fails the first read) counts as a failed attempt, so it backs off too instead of
reopening hundreds of times a second. A source that stays connected but sends nothing for ``stall_s`` is a
``stall`` (OpenCV's read timeout), told apart from a closed connection and from a blocked downstream (the reader is
then waiting on the queue, not on the source). Every frame read is counted in :class:`StreamStats`.
"""

from __future__ import annotations

import collections
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

import cv2
import numpy as np

from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.pipeline.media import (
    VIDEO_SUFFIXES,
    SourceProblem,
    frames,
    is_video,
    open_camera,
    open_video,
    quiet_ffmpeg,
)
from yolo_edge.pipeline.preprocess import IMAGE_SUFFIXES, list_images

DropPolicy = Literal["drop-oldest", "block"]
DROP_POLICIES: tuple[DropPolicy, ...] = get_args(DropPolicy)
SourceKind = Literal["image", "folder", "video", "camera", "url"]
_URL = re.compile(r"^(rtsp|rtsps|rtmp|http|https|udp|tcp)://", re.I)
_USERINFO = re.compile(r"^([a-z][a-z0-9+.-]*://)[^/?#]*@", re.I)  # scheme://user:password@


@dataclass(frozen=True)
class SourceOptions:
    drop_policy: DropPolicy = "drop-oldest"  # live sources only; files always block
    max_fps: float | None = None  # live sources: keep at most this many frames per second
    queue_size: int | None = None  # frames waiting per source; default 4 for files (read-ahead), 1 for live (freshest)
    stall_s: float = 5.0  # a connected live source silent this long is stalled
    backoff_s: float = 0.5  # first reconnect delay; doubled each failed attempt
    backoff_cap_s: float = 8.0
    max_age_s: float | None = None  # live sources: a frame older than this when inference starts is dropped (stale)
    open_timeout_s: float = 30.0  # a live source that never opens (refused, 404, no such camera) gives up after this

    def __post_init__(self) -> None:
        if self.drop_policy not in DROP_POLICIES:
            raise YoloEdgeError(f"drop policy must be one of {', '.join(DROP_POLICIES)}, got '{self.drop_policy}'")
        if self.queue_size is not None and self.queue_size < 1:
            raise YoloEdgeError(f"queue size must be >= 1, got {self.queue_size}")
        if self.max_fps is not None and self.max_fps <= 0:
            raise YoloEdgeError(f"--max-fps must be > 0, got {self.max_fps}")
        if not self.open_timeout_s > 0:
            raise YoloEdgeError(f"--open-timeout-s must be > 0, got {self.open_timeout_s}")

    def queue_for(self, source: Source) -> int:
        return self.queue_size or (1 if source.live else 4)


@dataclass(frozen=True)
class Source:
    """A source as the user named it."""

    text: str
    kind: SourceKind

    @property
    def live(self) -> bool:
        return self.kind in ("camera", "url")

    @property
    def shown(self) -> str:
        """The source as it may be printed, logged, exported as a metric label or used in a file name: a URL's
        credentials (``rtsp://user:pass@cam/``) replaced by ``***``; only the reader opens :attr:`text`."""
        return _USERINFO.sub(r"\1***@", self.text) if self.kind == "url" else self.text

    @property
    def label(self) -> str:
        return Path(self.text).name if not self.live else self.shown


def is_live(text: str) -> bool:
    """A camera index or a stream URL (a source that never ends), by its text alone."""
    return text.isdigit() or bool(_URL.match(text))


def parse_source(text: str) -> Source:
    """What ``text`` names; a one-line error for a file that does not exist."""
    if text.isdigit():
        return Source(text, "camera")
    if _URL.match(text):
        return Source(text, "url")
    path = Path(text)
    if path.is_dir():
        list_images(path, "source folder")
        return Source(text, "folder")
    if not path.is_file():
        raise YoloEdgeError(
            f"source not found: {text}; pass an image, a folder of images, a video, a camera index or a stream URL"
        )
    if path.suffix.lower() in IMAGE_SUFFIXES:
        return Source(text, "image")
    if not is_video(path):
        raise YoloEdgeError(
            f"{path} is neither an image ({', '.join(IMAGE_SUFFIXES)}) nor a video ({', '.join(VIDEO_SUFFIXES)})"
        )
    cap = open_video(path)
    readable = cap.isOpened()
    cap.release()
    if not readable:
        raise YoloEdgeError(f"{path} is not a readable video")
    return Source(text, "video")


@dataclass
class Captured:
    stream: int
    index: int  # position in this stream, in read order
    name: str
    image: np.ndarray
    t_capture: float  # the clock when the reader got it
    captured_at: float  # the same moment as wall-clock time (seconds since the epoch), for logs


# why a frame that was read never reached the sink: the source's queue was full (drop-oldest), over --max-fps, older
# than max_age_s when its turn came, unreadable (an image in a folder), lost to a sink that raised, still queued or
# in flight when the run stopped
DropCause = Literal["stale", "queue_full", "max_fps", "source_error", "sink_error", "shutdown"]
DROP_CAUSES: tuple[DropCause, ...] = get_args(DropCause)
StreamState = Literal["starting", "reading", "reconnecting", "ended"]


KEPT = 100  # the most recent source events and problems a stream keeps (all are counted): memory stays flat


@dataclass
class StreamStats:
    """Per stream: frames read = delivered + dropped (by cause), exactly, once the stream has ended. Source events
    are counted by kind (``event_counts``) and the last :data:`KEPT` kept with their details, as are problems: a
    live run of months, or a source that flaps all night, holds the same memory as a run of a minute."""

    source: Source
    read: int = 0
    delivered: int = 0
    dropped: collections.Counter[DropCause] = field(default_factory=collections.Counter)
    events: collections.deque[dict[str, object]] = field(default_factory=lambda: collections.deque(maxlen=KEPT))
    event_counts: collections.Counter[str] = field(default_factory=collections.Counter)
    problems: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=KEPT))
    state: StreamState = "starting"  # reconnecting: a live source in a gap
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def drop(self, cause: DropCause, n: int = 1) -> None:
        if n:
            with self._lock:
                self.dropped[cause] += n

    def deliver(self) -> None:
        with self._lock:
            self.delivered += 1

    def event(self, kind: str, **detail: object) -> None:
        with self._lock:
            self.events.append({"event": kind, **detail})
            self.event_counts[kind] += 1

    @property
    def accounted(self) -> bool:
        return self.read == self.delivered + sum(self.dropped.values())


class FrameQueue:
    """A bounded queue of one source's frames with its drop policy; ``close`` ends it."""

    def __init__(self, size: int, policy: str, stats: StreamStats) -> None:
        self._items: collections.deque[Captured] = collections.deque()
        self._size, self._policy, self._stats = size, policy, stats
        self._cond = threading.Condition()
        self.closed = False

    def put(self, item: Captured, stop: threading.Event) -> bool:
        """Queue ``item``; False (and counted as a shutdown drop) if the pipeline stops first."""
        with self._cond:
            while len(self._items) >= self._size:
                if self._policy == "drop-oldest":
                    self._items.popleft()
                    self._stats.drop("queue_full")
                    break
                if stop.is_set():
                    self._stats.drop("shutdown")
                    return False
                self._cond.wait(0.1)
            self._items.append(item)
            self._cond.notify_all()
            return True

    def get_nowait(self) -> Captured | None:
        with self._cond:
            item = self._items.popleft() if self._items else None
            self._cond.notify_all()
            return item

    def drain(self) -> int:
        with self._cond:
            n = len(self._items)
            self._items.clear()
            self._cond.notify_all()
            return n

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    @property
    def finished(self) -> bool:
        with self._cond:
            return self.closed and not self._items


class Reader(threading.Thread):
    """Reads one source into its :class:`FrameQueue` until the source ends or ``stop`` is set."""

    def __init__(
        self,
        stream: int,
        source: Source,
        out: FrameQueue,
        stats: StreamStats,
        options: SourceOptions,
        stop: threading.Event,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(name=f"reader-{stream}", daemon=True)
        self.stream, self.source, self.out, self.stats = stream, source, out, stats
        self.options, self.stop, self.clock = options, stop, clock
        self._last_kept = -float("inf")

    def run(self) -> None:
        self.stats.state = "reading"
        try:
            if self.source.live:
                self._live()
            else:
                self._files()
        except YoloEdgeError as exc:
            self.stats.problems.append(str(exc))
        except Exception as exc:  # never a silent end: the stream's problems say what stopped it
            self.stats.problems.append(f"{self.source.shown}: reader stopped: {type(exc).__name__}: {exc}")
        finally:
            self.stats.state = "ended"
            self.out.close()

    def _emit(self, index: int, name: str, image: np.ndarray) -> None:
        now = self.clock()
        self.stats.read += 1
        if self.source.live and self.options.max_fps and now - self._last_kept < 1.0 / self.options.max_fps:
            self.stats.drop("max_fps")
            return
        self._last_kept = now
        self.out.put(Captured(self.stream, index, name, image, now, time.time()), self.stop)

    def _files(self) -> None:
        problems: list[SourceProblem] = []
        seen = 0

        def account() -> None:  # an unreadable image in a folder was read, and is lost: counted, and said
            nonlocal seen
            for problem in problems[seen:]:
                if problem.lost_frame:
                    self.stats.read += 1
                    self.stats.drop("source_error")
            seen = len(problems)

        try:
            for frame in frames(self.source.text, problems):
                account()
                if self.stop.is_set():
                    break
                self._emit(frame.index, frame.name, frame.image)
        finally:
            account()
            self.stats.problems.extend(p.text for p in problems)

    def _open(self) -> cv2.VideoCapture:
        if self.source.kind == "camera":
            return open_camera(int(self.source.text))
        ms = int(self.options.stall_s * 1000)
        quiet_ffmpeg()
        params = [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, ms, cv2.CAP_PROP_READ_TIMEOUT_MSEC, ms]
        return cv2.VideoCapture(self.source.text, cv2.CAP_FFMPEG, params)

    def _check_redirect(self) -> None:
        """FFmpeg follows an HTTP(S) redirect wherever it points, without a word: ask the server once (``HEAD``,
        not followed, credentials left out) and make a redirect to another host a ``redirected`` event naming it,
        which the run's summary shows. A server that refuses ``HEAD`` or does not answer says nothing here."""
        parts = urllib.parse.urlsplit(self.source.text)
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            return

        class Stay(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *_args: object, **_kwargs: object) -> None:
                return None  # not followed: urllib raises the 3xx as an HTTPError

        plain = parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]).geturl()
        try:
            urllib.request.build_opener(Stay).open(
                urllib.request.Request(plain, method="HEAD"), timeout=min(self.options.stall_s, 5.0)
            ).close()
        except urllib.error.HTTPError as exc:
            target = urllib.parse.urlsplit(urllib.parse.urljoin(plain, exc.headers.get("Location") or ""))
            if 300 <= exc.code < 400 and target.hostname and target.hostname != parts.hostname:
                self.stats.event("redirected", status=exc.code, to=target.hostname)
        except (OSError, ValueError):
            return

    def _live(self) -> None:
        """Read a live source, reopening it with backoff whenever it closes; one that has never opened gives up
        after ``open_timeout_s`` with a problem line (a camera that was there may come back: that one is retried
        for as long as the run lasts)."""
        attempt, gap_since, index, started, opened = 0, None, 0, self.clock(), False
        self._check_redirect()
        while not self.stop.is_set():
            cap = self._open()
            first = index
            if cap.isOpened():
                self.stats.state = "reading"
                index = self._read_open(cap, index, gap_since, attempt)
            cap.release()
            self.stats.state = "reconnecting"
            if index > first:  # frames came: the next gap starts now, reopened at once, its backoff from the start
                opened, attempt, gap_since = True, 0, self.clock()
                continue
            # refused, or opened and then nothing (a server that accepts and fails the first read): a failed attempt
            waited = self.clock() - started
            if not opened and waited >= self.options.open_timeout_s:
                self.stats.problems.append(
                    f"{self.source.shown}: could not open it in {waited:.0f} s ({attempt + 1} attempts); check "
                    "the address or camera index, or give it longer with --open-timeout-s"
                )
                return
            gap_since = self.clock() if gap_since is None else gap_since
            self.stop.wait(min(self.options.backoff_s * 2**attempt, self.options.backoff_cap_s))
            attempt += 1

    def _read_open(self, cap: cv2.VideoCapture, index: int, gap_since: float | None, attempt: int) -> int:
        """Read an open live capture until it fails; record why (closed, or stalled) and return the next index. The
        gap before it (``gap_since``) ends with its first frame: a ``reconnected`` event."""
        first = index
        while not self.stop.is_set():
            t0 = self.clock()
            ok, image = cap.read()
            if not ok:
                waited = self.clock() - t0
                kind = "stall" if waited >= 0.9 * self.options.stall_s else "disconnected"
                if index > first or gap_since is None:  # an open that never read is the same gap going on
                    self.stats.event(kind, after_frame=index - 1, waited_s=round(waited, 3))
                return index
            if index == first and gap_since is not None:
                self.stats.event("reconnected", gap_s=round(self.clock() - gap_since, 3), attempts=attempt)
            self._emit(index, f"{self.source.label}#{index}", image)
            index += 1
        return index
