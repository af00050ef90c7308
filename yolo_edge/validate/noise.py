"""Latency verdicts on a shared machine: a plan is timed in rounds, frame by frame in turn with its FP32 reference,
and each round records how much of the time of the CPUs this process may run on went to other processes or a VM's
host (``/proc/stat``'s per-CPU busy and steal time, less this process's own CPU time). A round in which others
took more than :data:`BUSY` of it was timed on a busy machine. (Where the process may run on CPUs it does not get,
as under a CPU quota without a cpuset, others' work there counts too: more rounds read busy, never fewer.)

The p95 gets a distribution-free interval (the order statistics that bound the 95th percentile with 95 %
confidence, binomially); the plan's p95 over its reference's (the same frames, the same minute) is the figure a
baseline compares, so a runner that is slower or busier than the one that wrote the baseline does not read as a
regression. The verdict against a limit (:func:`judge`):

- the interval wholly within the limit: passes (load only slows a frame, so a pass on a busy machine holds);
- wholly beyond it, judged on quiet rounds (at least half the rounds quiet): fails;
- otherwise undecided, with what would decide it: more frames, or a quiet machine. Never a failure the
  machine's neighbours made.

A simulated board's frames are modelled from the frame: exact, no rounds, no interval (:func:`exact`).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from yolo_edge.core.codec import plain
from yolo_edge.core.progress import Bar
from yolo_edge.pipeline.detector import Detector, FrameTiming
from yolo_edge.validate.latency import LatencyResult, summarise, time_frames

BUSY = 0.10  # a round in which others took more than this share of this process's CPUs was timed on a busy machine
ROUND = 10  # frames of each detector per round
CONFIDENCE = 0.95
OK, FAILS, UNDECIDED = "ok", "fails", "undecided"


@dataclass(frozen=True)
class Spread:
    """A plan's p95 as measured on this machine, with its interval, beside its FP32 reference's, and how busy the
    machine was. ``judged`` frames (of ``frames``) are those the interval is of: the quiet rounds' when at least
    half the rounds were quiet, else every round's (``quiet`` False: the figures may be the neighbours')."""

    p95: float
    lo: float
    hi: float
    reference_p95: float
    ratio: float  # p95 over the reference's p95
    ratio_lo: float
    ratio_hi: float
    busy: float | None  # share of this process's CPUs' time others took, over all rounds (None: not readable)
    busy_rounds: int
    rounds: int
    frames: int
    judged: int
    quiet: bool

    def to_dict(self) -> dict[str, object]:
        return plain(self.__dict__)

    def text(self) -> str:
        shown = "machine load not readable" if self.busy is None else f"others took {self.busy:.0%} of its CPUs"
        return (
            f"p95 {self.p95:.2f} ms [{self.lo:.2f}, {self.hi:.2f}], {self.ratio:.2f}x its FP32 reference "
            f"[{self.ratio_lo:.2f}, {self.ratio_hi:.2f}]; {self.busy_rounds} of {self.rounds} rounds busy ({shown})"
        )


Probe = tuple[int, int, float]  # non-idle and total jiffies of this process's CPUs, this process's CPU seconds


def probe() -> Probe:
    """The jiffies the CPUs this process may run on spent busy (stolen by a VM's host included) and in all, from
    ``/proc/stat``, and the CPU seconds this process used (all its threads): (0, 0, ...) where the kernel does
    not say."""
    allowed = {f"cpu{i}" for i in os.sched_getaffinity(0)} if hasattr(os, "sched_getaffinity") else None
    busy = total = 0
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or (allowed is not None and name not in allowed):
            continue
        user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in (fields + ["0"] * 8)[:8])
        busy += user + nice + system + irq + softirq + steal
        total += user + nice + system + irq + softirq + steal + idle + iowait
    t = os.times()
    return busy, total, t.user + t.system


def busy_share(before: Probe, after: Probe) -> float | None:
    """The share of this process's CPUs' time that went to other processes (or a VM's host) between two probes:
    their busy time less this process's own. None where ``/proc/stat`` does not say."""
    busy, total = after[0] - before[0], after[1] - before[1]
    if total <= 0:
        return None
    ours = (after[2] - before[2]) * os.sysconf("SC_CLK_TCK")
    return min(1.0, max(0.0, (busy - ours) / total))


def p95_interval(values: Sequence[float]) -> tuple[float, float]:
    """The order statistics bounding the 95th percentile with :data:`CONFIDENCE` (binomial, distribution-free);
    the upper one is the largest frame where too few frames were timed to bound it tighter."""
    a = np.sort(np.asarray(values, dtype=np.float64))
    n = len(a)
    tail = (1 - CONFIDENCE) / 2
    cdf, lo, hi = 0.0, 0, n - 1
    log_p, log_q = math.log(0.95), math.log(0.05)
    for k in range(n + 1):  # P(Bin(n, .95) <= k): the k-th order statistic is below the p95 that often
        cdf += math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_p + (n - k) * log_q)
        if cdf <= tail:
            lo = k
        if cdf >= 1 - tail:
            hi = k
            break
    return float(a[min(lo, n - 1)]), float(a[min(hi, n - 1)])


Round = tuple[dict[str, list[FrameTiming]], float | None]  # each detector's frames of one round, how busy it was


@dataclass(frozen=True)
class Frames:
    """What a latency is timed on: ``runs`` frames of ``images`` (in turn, from the first again) after ``warmup``
    untimed ones."""

    images: Sequence[np.ndarray]
    warmup: int
    runs: int


def time_beside_reference(
    plan: Detector,
    reference: Detector,
    frames: Frames,
    decided: Callable[[Spread], bool] = lambda _s: True,
    bar: Bar = lambda items, _desc: items,
) -> tuple[LatencyResult, Spread]:
    """``frames.runs`` frames of the plan and its reference, in turn, in rounds of :data:`ROUND` (``bar`` shows
    them); timed again (once) when ``decided`` says the first pass did not decide, the second pass's rounds joining
    the first's."""
    pair = {"plan": plan, "reference": reference}
    lat, spreads = time_in_rounds(pair, "reference", frames, lambda s: decided(s["plan"]), bar)
    return lat["plan"], spreads["plan"]


def time_in_rounds(
    detectors: Mapping[str, Detector],
    reference: str,
    frames: Frames,
    decided: Callable[[dict[str, Spread]], bool] = lambda _s: True,
    bar: Bar = lambda items, _desc: items,
) -> tuple[dict[str, LatencyResult], dict[str, Spread]]:
    """Several detectors timed frame by frame in turn, in rounds of :data:`ROUND`, each round's load read; the
    spread of each measured one against ``reference`` (a measured detector). A simulated board's detectors are
    exact: timed once, no spread. Timed again (once) when ``decided`` says the first pass did not decide."""
    images, warmup, runs = frames.images, frames.warmup, frames.runs
    exact = {n: d for n, d in detectors.items() if d.frame_determined}
    measured = {n: d for n, d in detectors.items() if n not in exact}
    out = {n: summarise(t) for n, t in time_frames(exact, images, 0, runs).items()} if exact else {}
    if not measured or reference not in measured:
        out.update({n: summarise(t) for n, t in time_frames(measured, images, warmup, runs).items()})
        return {n: out[n] for n in detectors}, {}
    rounds: list[Round] = []
    time_frames(measured, images, warmup, 0)
    spreads: dict[str, Spread] = {}
    for again in (False, True):
        desc = f"latency{' again' if again else ''} (rounds of {ROUND} frames, {', '.join(measured)} in turn)"
        for start in bar(range(0, runs, ROUND), desc):
            before = probe()
            t = time_frames(measured, images, 0, min(ROUND, runs - start), start=start)
            rounds.append((t, busy_share(before, probe())))
        spreads = {n: spread_of([(t[n], t[reference], b) for t, b in rounds]) for n in measured}
        if again or decided(spreads):
            break
        time.sleep(1.0)  # a neighbour's burst often ends within a second
    out.update({n: summarise([f for t, _ in rounds for f in t[n]]) for n in measured})
    return {n: out[n] for n in detectors}, spreads


def spread_of(rounds: Sequence[tuple[list[FrameTiming], list[FrameTiming], float | None]]) -> Spread:
    """A plan's spread from its rounds: (its frames, the reference's, how busy the round was)."""
    known = [b for _, _, b in rounds if b is not None]
    quiet = [r for r in rounds if r[2] is not None and r[2] <= BUSY]
    judged = quiet if known and len(quiet) * 2 >= len(rounds) else list(rounds)
    plan = [f.end_to_end_ms for p, _, _ in judged for f in p]
    ref = [f.end_to_end_ms for _, r, _ in judged for f in r]
    lo, hi = p95_interval(plan)
    rlo, rhi = p95_interval(ref)
    p95, rp95 = float(np.percentile(plan, 95)), float(np.percentile(ref, 95))
    ran = sum(len(p) for p, _, _ in rounds)
    return Spread(
        round(p95, 3),
        round(lo, 3),
        round(hi, 3),
        round(rp95, 3),
        round(p95 / rp95, 4),
        round(lo / rhi, 4),
        round(hi / rlo, 4),
        round(float(np.mean(known)), 4) if known else None,
        len(rounds) - len(quiet),
        len(rounds),
        ran,
        len(plan),
        judged is quiet,
    )


def judge(lo: float, hi: float, limit: float, quiet: bool) -> str:
    """:data:`OK` when the interval ``[lo, hi]`` is within ``limit``, :data:`FAILS` when it is wholly beyond it
    and the rounds judged were quiet, else :data:`UNDECIDED`."""
    if hi <= limit:
        return OK
    return FAILS if lo > limit and quiet else UNDECIDED


def undecided_line(what: str, spread: Spread, limit_text: str) -> str:
    """What an undecided latency verdict measured and what would decide it."""
    why = (
        f"the machine was busy (in {spread.busy_rounds} of {spread.rounds} rounds others took more than {BUSY:.0%} "
        "of its CPUs): run the check where nothing else runs, or again later"
        if not spread.quiet
        else f"the interval straddles the limit: more timed frames would decide it ({spread.frames} timed; --runs)"
    )
    return f"{what} {limit_text}: undecided, neither passed nor failed; {spread.text()}; {why}"
