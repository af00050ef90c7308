"""Plan search with the verdict as its objective: the fastest placement that passes the proof.

The four checks prune (``plan.planner``: op support, memory, precision, performance, per subgraph and
precision variant); what is left is a :class:`~yolo_edge.plan.placement.PlanSpace` whose candidates, every
combination of the subgraphs' options, are ordered by estimated latency. The search builds the fastest
candidate and judges it as deploy judges a plan: drift on the evaluation images against the FP32
reference (labels where there are labels, else agreement) and p95 latency against the SLA, measured
interleaved with the reference. The first that passes ends the search, except that candidates estimated
within ``plan.search_margin`` of it are judged too (an estimate adds up subgraphs timed apart, so it
ranks near-ties by noise and cannot see what fusing consecutive subgraphs into one unit saves); of those
that passed, the fastest by measured median against the reference is chosen (of those within ``plan.tie_margin``
of it or within their noise, the one with the least at low precision: a near-tie is the machine's load, not the
plan; :func:`fastest_passing`). When the chosen plan puts the head on
the accelerator, the design card's layout (the same placement with head and decode FP32 on the CPU) is judged
too, and reported beside it (``SearchRecord.card_line``). Before that, the best passing candidate with all its
accelerator subgraphs at one of its variants (where each has it among its options) is judged: they compile as one
unit, a saving no estimate sees (``_Search.fused``).

A candidate that fails drift (or is undecided with its drift past the limit: :func:`past_limit`) is relaxed where the
drift comes from: each of its accelerator subgraphs is
judged alone at its variant (its sensitivity: the drift with only that subgraph at low precision; each such
run is itself a candidate and a row of the table). A subgraph variant that fails drift alone is dropped from
every candidate still waiting (adding low precision elsewhere is not expected to win the drift back), and
its INT8 form is retried at the backend's next stronger quantizer, then with twice as many of its most sensitive
layers at higher precision (:func:`~yolo_edge.plan.planner.relaxed`). When every subgraph passes alone, only that
combination is dropped.

Only what can change the answer is judged. A candidate is timed first; one that could not be chosen even if it
passed (:meth:`_Search.beaten_by`: the choice rule, applied as if it had passed) is reported as not judged and its
drift never scored. Of candidates estimated within ``plan.search_margin`` of each other the one with the least at
low precision is judged first (a tie goes to it). A trial's drift is scored look by look
(:mod:`yolo_edge.validate.sequential`: a quarter, half, then every judging image) and stops at the first look that
decides it; the chosen plan (where none passed, the fastest whose drift is undecided within the limit:
:func:`fastest_hopeful`; else the first judged) is judged on every image before the deploy reports it
(:meth:`_Search.complete`). Each look's images are detected here or, with ``--shards``, by Ray actors
(``flows.trial_shards``); the reference's detections are computed once.

The budget (``plan.search_candidates`` judged, ``plan.search_seconds``) bounds the work (the one-unit step and the
design card's layout are judged after it, within ``plan.search_seconds``); every candidate timed is reported, with
why it was tried and its placement, estimated and measured latency, drift, the judging images it was scored on, why
its judging stopped there and its status.

Example:
    >>> result = search_plans(space, planner, session, ...)  # doctest: +SKIP
    >>> [(t.plan.label, t.run.status) for t in result.trials]  # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence, Set
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from yolo_edge.backends.base import Backend
from yolo_edge.backends.builder import Builder
from yolo_edge.core.config import DeployConfig, DeviceProfile, Variant
from yolo_edge.core.progress import Bar
from yolo_edge.core.stats import Percentiles, median_ratio_se
from yolo_edge.data.resolve import EvalData
from yolo_edge.model.graph import part
from yolo_edge.model.split import SplitModel
from yolo_edge.pipeline.detector import Detector
from yolo_edge.pipeline.postprocess import Detections
from yolo_edge.pipeline.preprocess import read_image
from yolo_edge.plan.placement import PlacementPlan, PlanSpace, SubgraphPlan
from yolo_edge.plan.planner import Planner, option_at, relaxed
from yolo_edge.runtime.build import build_units
from yolo_edge.runtime.events import EventLog
from yolo_edge.runtime.executor import SplitExecutor
from yolo_edge.runtime.units import Unit
from yolo_edge.validate.accuracy import Scorer, detect_all
from yolo_edge.validate.latency import LATENCY_IMAGES, LatencyResult
from yolo_edge.validate.noise import Frames, Spread, time_in_rounds
from yolo_edge.validate.sequential import Judged, Look, Looks
from yolo_edge.validate.verdict import UNDECIDED, Limits, PlanRun, explain

Log = Callable[[str], None]
Clock = Callable[[], float]


class Laps:
    """The wall time of a deploy's phases, in order: each :meth:`lap` closes the phase it names (report.json's
    ``timings_s``: where a deploy's minutes go)."""

    def __init__(self, clock: Clock = time.perf_counter) -> None:
        self.clock, self.t, self.s = clock, clock(), dict[str, float]()

    def lap(self, name: str) -> None:
        now = self.clock()
        self.s[name] = round(self.s.get(name, 0.0) + now - self.t, 1)
        self.t = now


@dataclass(frozen=True)
class Session:
    """One deploy's (or plan's) profile and settings, where what it opens is closed (``stack``: the builder last),
    how it talks (``say``, ``bar``) and tells the time (``clock``: the search's budget): what every step of it
    shares."""

    profile: DeviceProfile
    cfg: DeployConfig
    stack: ExitStack
    say: Log
    bar: Bar
    npu: Backend  # the profile's accelerator backend, opened once (``deploy.open_device``): every compile for it
    clock: Clock = time.monotonic
    shards: Shards | None = None  # where a trial's judging images are detected (None: in this process)
    laps: Laps = field(default_factory=Laps)  # the phases' wall times (report.json's timings_s)


class Shards(Protocol):
    """Detects a plan's images elsewhere, in order (``flows.trial_shards.TrialShards``: Ray actors)."""

    def detect(self, plan: PlacementPlan, paths: Sequence[Path]) -> list[Detections]: ...


@dataclass
class Trial:
    """One candidate judged by the verdict."""

    index: int  # 1, 2, ... in the order judged
    plan: PlacementPlan
    why: str  # why it was tried: the fastest left, a subgraph's sensitivity, a relaxed variant
    run: PlanRun  # its drift, latency and status
    reference: Percentiles  # the whole-cpu reference's end-to-end latency, measured in the same interleaved loop
    wall_s: float
    ratio_se: float = 0.0  # standard error of speed_ratio, from its frames' paired ratios to the reference's
    images: int = 0  # judging images its drift was scored on (0: not judged, it could not beat one that passed)
    stopped: str = ""  # why its judging stopped where it did
    units: tuple[str, ...] = ()  # the units its executor ran, in order (:func:`unit_labels`)

    @property
    def estimated_ms(self) -> float:
        return self.plan.estimated_ms

    @property
    def judged(self) -> bool:
        """Whether its drift was judged (else only its latency was measured: it could not beat one that passed)."""
        return self.images > 0

    @property
    def passed(self) -> bool:
        return self.judged and (self.run.ok or (self.run.same_as_cpu and not self.run.fails))

    @property
    def status(self) -> str:
        """Its verdict's status, or why it was not judged."""
        return self.run.status if self.judged else f"not judged: {self.stopped}"

    @property
    def speed_ratio(self) -> float | None:
        """Median end-to-end time over the reference's median from the same loop: comparable between trials
        judged minutes apart, and, unlike a tail, not moved by a neighbour's burst on a shared machine (the SLA
        is still judged on p95)."""
        lat = self.run.latency
        return None if lat is None or self.reference.p50 <= 0 else lat.end_to_end.p50 / self.reference.p50


@dataclass(frozen=True)
class Recipe:
    """The vendor's published recipe (``Backend.recipe``) as the search judged it: the trial, or why it was not."""

    what: str
    trial: Trial | None
    why: str = ""  # not judged: a subgraph failed a check at the recipe's variant, no INT8 on this host, the budget

    def needed_drift(self) -> float | None:
        """The drift limit at which the recipe's drift would pass: the worse end of its interval (or the worse of
        its mAP50 and mAP50-95 drifts where it has none), as a positive number; None: no drift was judged."""
        if self.trial is None or self.trial.run.drift is None:
            return None
        d, interval = self.trial.run.drift, self.trial.run.drift_interval
        worst = min(d.map50, d.map50_95)
        if interval is not None:  # decided: the interval's lower end above the limit
            worst = min(worst, interval.lo.map50, interval.lo.map50_95)
        return max(0.0, -worst)


@dataclass(frozen=True)
class SearchRecord:
    """What a search found, as a report keeps it: its trials and why it stopped, and no runtime object (the
    detectors and units the search opened close with the deploy that opened them)."""

    trials: tuple[Trial, ...]
    chosen: Trial | None  # the fastest that passed (None: none did)
    candidates: int  # placements the checks left
    stopped: str  # why the search ended
    card: Trial | None = None  # the design card's layout beside the chosen: its placement, head FP32 on the CPU
    recipe: Recipe | None = None  # the vendor's published recipe beside the chosen (where the backend names one)
    fallback: Trial | None = None  # where none passed, the one deploy reports and bundles (:func:`hopeful`)

    @property
    def tally(self) -> str:
        """``9 timed, 3 judged on 450 judging images in all``: what the search measured."""
        judged = [t for t in self.trials if t.judged]
        return (
            f"{len(self.trials)} timed, {len(judged)} judged on {sum(t.images for t in judged)} judging images in all"
        )

    def card_line(self) -> str | None:
        """The chosen plan against the design card's layout (head and decode FP32 on the CPU), both judged."""
        chosen, card = self.chosen, self.card
        if chosen is None or card is None:
            return None
        if chosen is card:
            return f"the chosen plan is the design card's layout (head and decode FP32 on the CPU): {_verdict(card)}"
        assert chosen.run.latency is not None and card.run.latency is not None
        gain = card.run.latency.end_to_end.p95 - chosen.run.latency.end_to_end.p95
        return (
            f"the head on the accelerator (candidate {chosen.index}): {abs(gain):.2f} ms "
            f"{'faster' if gain >= 0 else 'slower'} at p95 than head and decode FP32 on the CPU (the design card's "
            f"layout, candidate {card.index}); {_verdict(chosen)} against {_verdict(card)}"
        )

    def recipe_line(self, limits: Limits) -> str | None:
        """The vendor's recipe beside the chosen plan: its latency and drift, the drift limit it would need, and
        whether the chosen plan is faster; or why it could not be judged."""
        r = self.recipe
        if r is None:
            return None
        if r.trial is None:
            return f"the vendor's recipe, {r.what}, was not judged: {r.why}"
        t, chosen = r.trial, self.chosen
        line = f"the vendor's recipe, {r.what} (candidate {t.index}): {_verdict(t)}"
        needed = r.needed_drift()
        if needed is not None and needed > limits.max_drift:
            line += f"; it would pass at max_drift {needed:.4f} (the limit is {limits.max_drift})"
        if chosen is not None and chosen is not t and chosen.speed_ratio and t.speed_ratio:
            lat, rl = chosen.run.latency, t.run.latency
            assert lat is not None and rl is not None
            ratio = lat.end_to_end.p95 / rl.end_to_end.p95
            line += f"; the chosen plan's p95 is {ratio:.2f}x the recipe's"
        elif chosen is t:
            line += "; it is the chosen plan"
        return line

    def undecided_lines(self, limits: Limits) -> list[str]:
        """The candidates faster than the chosen (by median against the reference) whose drift was undecided: its
        interval across the limit, and about how many more judging images would decide it."""
        bar = float("inf") if self.chosen is None else (self.chosen.speed_ratio or float("inf"))
        return [
            f"candidate {t.index} ({t.plan.label}) is faster but unproven: "
            + "; ".join(explain([UNDECIDED], t.run.drift, None, limits, t.run.drift_interval))
            for t in self.trials
            if UNDECIDED in t.run.fails and (t.speed_ratio or float("inf")) < bar
        ]

    @property
    def shown(self) -> Trial | None:
        """The trial deploy reports as its split plan: the chosen one, else the search's fallback (the fastest whose
        drift is undecided within the limit), else the first judged."""
        return self.chosen or self.fallback or (self.trials[0] if self.trials else None)


@dataclass
class SearchResult:
    """A search's record and what it left open for the deploy that ran it."""

    record: SearchRecord
    reference: PlanRun  # whole-cpu, the FP32 reference: its detections and accuracy
    reference_detector: Detector
    scorer: Scorer  # scores any other plan on the same images against the same reference
    detector: Detector | None  # the shown trial's (the chosen, else the fallback, else the first), still open
    units: list[Unit]
    events: EventLog


def plan_detector(
    split: SplitModel,
    plan: PlacementPlan,
    builder: Builder,
    cfg: DeployConfig,
    calib: Sequence[dict[str, np.ndarray]],
    events: EventLog,
) -> tuple[Detector, list[Unit]]:
    """``plan``'s detector as a trial judges it: its units compiled through the deploy's ``builder`` (for its
    profile; it keeps their executables: a later trial, or the bundle, may run them again), run as placed."""
    units = build_units(split, plan, builder, calib, events, cfg.runtime.fuse_units)
    executor = SplitExecutor(units, cfg.runtime, builder.profile, events, as_placed=True, borrowed=True)
    detector = Detector(executor, split.exported.meta, cfg.nms)
    detector.remember(LATENCY_IMAGES)  # its latency frames are evaluation images: simulated once
    return detector, units


def unit_labels(plan: PlacementPlan, units: Sequence[Unit]) -> tuple[str, ...]:
    """Each unit as ``name=device/variant`` (``backbone+neck=npu/int8/s8/nncf``, ``head=cpu/fp32``; an op-level
    piece, ``neck.0``, also says how many of its subgraph's nodes the plan keeps on the CPU). Two trials whose first
    whole units carry the same labels ran the same executables there (the builder compiles a graph at a variant
    once): the prefix whose outputs they could share (``benchmarks/deploys.py`` counts them)."""

    def label(u: Unit) -> str:
        sp = plan[u.subgraphs[0]]
        cut = f" ({len(sp.cpu_nodes)} nodes of {sp.name} on the CPU)" if sp.cpu_nodes else ""
        return f"{u.name}={sp.label if u.npu is not None else 'cpu/fp32'}{cut}"

    return tuple(label(u) for u in units)


class _Judge:
    """Builds a candidate and judges it: latency interleaved with the reference's, then drift at each look
    (:mod:`yolo_edge.validate.sequential`) until one decides it, against the reference's detections computed once."""

    def __init__(
        self,
        split: SplitModel,
        profile: DeviceProfile,
        cfg: DeployConfig,
        calib: Sequence[dict[str, np.ndarray]],
        evaldata: EvalData,
        reference: Detector,
        bar: Bar,
        builder: Builder,
        shards: Shards | None = None,
    ) -> None:
        self.split, self.profile, self.cfg, self.calib, self.shards = split, profile, cfg, calib, shards
        self.evaldata, self.bar = evaldata, bar
        self.reference_detector = reference
        self.builder = builder  # the deploy's: a graph the checks compiled is not compiled again for a trial
        dets = detect_all(reference, evaldata.dataset, cfg.val_nms, bar, "whole-cpu: validate")
        self.scorer = Scorer(evaldata, dets, cfg.validate, cfg.nms)
        accuracy = self.scorer.score(dets)
        self.reference = PlanRun(
            "whole-cpu", accuracy=accuracy, accuracy_drift=accuracy.minus(accuracy), detections=dets
        )
        self.looks = Looks(evaldata, dets, self.scorer, accuracy, cfg)
        self.bench = [read_image(r.path) for r in evaldata.dataset.records[:LATENCY_IMAGES]]
        self.limits = Limits(cfg.validate.max_drift, cfg.validate.sla_ms)

    def detector(self, plan: PlacementPlan, events: EventLog) -> tuple[Detector, list[Unit]]:
        return plan_detector(self.split, plan, self.builder, self.cfg, self.calib, events)

    def latency(self, name: str, detector: Detector) -> tuple[LatencyResult, LatencyResult, Spread | None]:
        """``detector``'s latency and the reference's, measured frame by frame in turn, in rounds whose load is read,
        and (a measured one) its p95's spread: the SLA is judged on that interval, as deploy's three plans and
        ``check`` judge it, so a busy machine leaves a trial undecided rather than failing it."""
        v = self.cfg.validate
        frames = Frames(self.bench, v.latency_warmup, v.latency_runs)
        timed, spreads = time_in_rounds({name: detector, "whole-cpu": self.reference_detector}, "whole-cpu", frames)
        return timed[name], timed["whole-cpu"], spreads.get(name)

    def drift(
        self, name: str, plan: PlacementPlan, detector: Detector, found: dict[int, Detections], looks: Sequence[Look]
    ) -> Judged:
        """``plan``'s drift (run by ``detector``, or by the shards) at each of ``looks`` in turn until one decides it
        (the last, whatever it says); ``found`` holds its detections by image index, kept across calls (a later look
        detects only what it adds)."""
        records, n = self.evaldata.dataset.records, len(self.evaldata.dataset)
        judged = None
        for look in looks:
            todo = [i for i in look.images if i not in found]
            if self.shards is not None:  # Ray's actors, in order: one call per look
                paths = [records[i].path for i in todo]
                found.update(zip(todo, self.shards.detect(plan, paths) if todo else []))
            else:
                for i in self.bar(todo, f"{name}: drift on {look.size} of {n} judging images"):
                    found[i] = detector.detect(read_image(records[i].path), self.cfg.val_nms)[0]
            judged = self.looks.judge(look, found)
            if judged.decided:
                break
        assert judged is not None
        return judged

    def run(
        self, name: str, plan: PlacementPlan, latency: LatencyResult, judged: Judged, spread: Spread | None
    ) -> PlanRun:
        """The plan's verdict: its drift as ``judged`` (at that look's interval), its latency against the SLA (on its
        ``spread`` where measured)."""
        run = PlanRun(
            name,
            latency=latency,
            accuracy=judged.accuracy,
            accuracy_drift=judged.drift,
            same_as_cpu=not plan.npu_subgraphs,
            spread=spread,
        )
        run.judge(self.limits)
        return run


@dataclass
class _Held:
    """A trial's detector kept open (every passing trial's, else the first's), its units, events and detections."""

    trial: Trial
    detector: Detector
    units: list[Unit]
    events: EventLog
    found: dict[int, Detections]


NOT_JUDGED = "not judged"


class _Trials:
    """The trials of one search: each built, timed and (where it could be chosen) judged; the detectors it keeps open;
    the budget; the choice."""

    def __init__(self, judge: _Judge, cfg: DeployConfig, say: Log, clock: Clock, pool: list[PlacementPlan]) -> None:
        self.judge, self.cfg, self.say, self.clock, self.pool = judge, cfg, say, clock, pool
        self.trials: list[Trial] = []
        self.seen: set[object] = set()
        # open: every passing trial's (a later trial can move the tie rule's choice to an earlier one), else the first's
        self.held: dict[int, _Held] = {}
        self.t0 = clock()

    def budget_left(self, count: bool = True) -> str | None:
        """Why the search may judge no more (``count``: the number judged counts too), or None."""
        if count and sum(t.judged for t in self.trials) >= self.cfg.plan.search_candidates:
            return f"budget: {self.cfg.plan.search_candidates} candidates judged (plan.search_candidates)"
        if self.clock() - self.t0 >= self.cfg.plan.search_seconds:
            return f"budget: {self.cfg.plan.search_seconds:.0f} s (plan.search_seconds)"
        return None

    def best(self) -> Trial | None:
        return fastest_passing(self.trials, self.cfg.plan.tie_margin)

    def beaten_by(self, trial: Trial) -> Trial | None:
        """The passing trial that ``trial`` (its latency measured) could not beat even if it passed: the choice rule
        (:func:`fastest_passing`) would not pick it; None where it could win, or nothing passed yet."""
        best = self.best()
        if best is None:
            return None
        supposed = replace(trial, run=replace(trial.run, fails=[]), images=self.judge.looks.all.size)
        return None if fastest_passing([*self.trials, supposed], self.cfg.plan.tie_margin) is supposed else best

    def try_plan(self, plan: PlacementPlan, why: str, always: bool = False) -> Trial:
        """Build ``plan``, time it beside the reference and, unless it cannot beat one that passed (``always``: judge
        it anyway, as the design card's layout and a sensitivity run are), judge its drift look by look."""
        self.seen.add(plan.key)
        index = len(self.trials) + 1
        name = f"candidate {index}"
        self.say(f"{name}: {plan.label} ({why}; estimated {plan.estimated_ms:.2f} ms; {len(self.pool)} waiting)")
        t0 = self.clock()
        events = EventLog()
        detector, units = self.judge.detector(plan, events)
        latency, reference, spread = self.judge.latency(name, detector)
        se = median_ratio_se(latency.samples_ms, reference.samples_ms)
        run = PlanRun(name, latency=latency, same_as_cpu=not plan.npu_subgraphs, fails=[NOT_JUDGED], spread=spread)
        trial = Trial(index, plan, why, run, reference.end_to_end, 0.0, se, units=unit_labels(plan, units))
        beaten = None if always else self.beaten_by(trial)
        found: dict[int, Detections] = {}
        if beaten is not None:
            trial.stopped = (
                f"cannot beat candidate {beaten.index}, which passed (p50 {trial.speed_ratio or 0:.2f}x the "
                f"reference's against {beaten.speed_ratio or 0:.2f}x; a tie goes to the first judged with the least "
                "at low precision)"
            )
        else:
            self.judge_drift(trial, detector, found, self.judge.looks.looks)
        trial.wall_s = round(self.clock() - t0, 1)
        self.trials.append(trial)
        self.say(f"{name}: {trial.status}" + (f" ({trial.stopped})" if trial.judged else ""))
        before = self.fallback()
        if trial.passed or not self.held or self.fallback(trial) is trial:
            self.held[trial.index] = _Held(trial, detector, units, events, found)
        else:
            detector.close()
        if before is not None and before.index in self.held and not self._needed(before):
            self.held.pop(before.index).detector.close()  # a faster hopeful one took its place
        return trial

    def fallback(self, candidate: Trial | None = None) -> Trial | None:
        """Where none passed, the trial deploy reports and bundles: the fastest (by measured median) of those held
        (and ``candidate``) whose drift is undecided within the limit (:func:`hopeful`): more judging images may
        prove it; None: none is."""
        pool = [t for t in self.trials if t.index in self.held] + ([candidate] if candidate is not None else [])
        return fastest_hopeful(pool, self.cfg.validate.max_drift)

    def shown(self) -> Trial | None:
        """The trial deploy reports: the chosen one, else the fallback, else the first judged."""
        return self.best() or self.fallback() or (self.trials[0] if self.trials else None)

    def _needed(self, trial: Trial) -> bool:
        """Whether a held trial's detector may still be the one deploy keeps."""
        return trial.passed or trial is self.trials[0] or trial is self.fallback()

    def judge_drift(
        self, trial: Trial, detector: Detector, found: dict[int, Detections], looks: Sequence[Look]
    ) -> None:
        """``trial``'s verdict from its drift at ``looks`` (the first that decides) and its latency."""
        assert trial.run.latency is not None
        judged = self.judge.drift(f"candidate {trial.index}", trial.plan, detector, found, looks)
        trial.run = self.judge.run(trial.run.name, trial.plan, trial.run.latency, judged, trial.run.spread)
        n, k = len(self.judge.evaldata.dataset), judged.look.size
        decided = "passes" if not judged.fails else "fails" if judged.decided else "undecided"
        trial.images = k
        trial.stopped = (
            f"drift {decided} on all {n} judging images"
            if k == n
            else f"drift {decided} on {k} of {n} judging images ({judged.look.level:.1%} interval)"
        )

    def complete(self) -> None:
        """The chosen trial (else the first) judged on every judging image: an early look's pass only ordered the
        search. One that no longer passes leaves the choice to the next; a trial left unjudged because it could not
        beat one that passed is judged where it now could."""
        while True:
            target = self.shown()
            if target is not None and target.images < self.judge.looks.all.size:
                held = self.held[target.index]
                self.say(f"candidate {target.index}: judged on every judging image, as the plan deploy reports")
                self.judge_drift(target, held.detector, held.found, [self.judge.looks.all])
                self.say(f"candidate {target.index}: {target.status} ({target.stopped})")
                continue
            waiting = [t for t in self.trials if not t.judged and self.beaten_by(t) is None]
            if not waiting or self.budget_left(count=False):
                return
            t = waiting[0]
            events = EventLog()
            detector, units = self.judge.detector(t.plan, events)
            found: dict[int, Detections] = {}
            self.say(f"candidate {t.index}: judged now: the one that beat it failed on every judging image")
            self.judge_drift(t, detector, found, self.judge.looks.looks)
            if t.passed:
                self.held[t.index] = _Held(t, detector, units, events, found)
            else:
                detector.close()

    def release(self, keep: Trial | None) -> _Held | None:
        """Close every held detector but ``keep``'s (the chosen trial's, else the first's); its own returned."""
        kept = None
        for index, held in list(self.held.items()):
            if keep is not None and index == keep.index:
                kept = held
                continue
            held.detector.close()
            del self.held[index]
        return kept

    def trial_of(self, plan: PlacementPlan) -> Trial | None:
        return next((t for t in self.trials if t.plan.key == plan.key), None)


class _Search(_Trials):
    """The search's order: the candidates the checks left, fastest estimate first; relaxing what fails drift; the
    one-unit run of the best and the design card's layout after it."""

    def __init__(self, space: PlanSpace, planner: Planner, judge: _Judge, cfg: DeployConfig, say: Log, clock: Clock):
        super().__init__(judge, cfg, say, clock, space.candidates())
        self.space, self.planner = space, planner
        self.candidates = len(self.pool)
        self.blamed: set[tuple[str, object]] = set()

    def next_plan(self) -> PlacementPlan:
        """The candidate to judge next: of those estimated within ``plan.search_margin`` of the fastest left (the
        estimate cannot tell them apart), the one with the least at low precision (a tie goes to it, so judged first
        it leaves the others nothing to win), then the fastest estimate."""
        margin = 1 + self.cfg.plan.search_margin
        best = self.best()
        reach = self.pool[0].estimated_ms * margin
        if best is not None:  # and within the margin of the best that passed, as the search stops beyond it
            reach = min(reach, best.estimated_ms * margin)
        near = [p for p in self.pool if p.estimated_ms < reach] or self.pool[:1]
        plan = min(near, key=lambda p: (_low_precision(p), p.estimated_ms))
        self.pool.remove(plan)
        return plan

    def run(self) -> str:
        while self.pool:
            best = self.best()
            margin = 1 + self.cfg.plan.search_margin
            if best is not None and self.pool[0].estimated_ms >= best.estimated_ms * margin:
                return (
                    f"the fastest candidate left is estimated {self.pool[0].estimated_ms / best.estimated_ms - 1:.0%}"
                    f" slower than one that passed (plan.search_margin {self.cfg.plan.search_margin:.0%})"
                )
            stop = self.budget_left()
            if stop:
                return stop
            plan = self.next_plan()
            if plan.key in self.seen or any((s.name, _opt(s)) in self.blamed for s in plan.subgraphs):
                continue
            trial = self.try_plan(plan, "the fastest candidate left")
            if past_limit(trial, self.cfg.validate.max_drift):
                self.relax(trial)
        best = self.best()
        return "a candidate passed" if best else "no candidate left"

    def fused(self) -> None:
        """Judge the best passing trial as :func:`one_unit` would run it, within the search's time (not its count:
        near-ties judged by estimate must not crowd out the plan as it would really run, one variant per run)."""
        best = self.best()
        if best is None or self.budget_left(count=False):
            return
        fallback = self.planner.checker.npu.fallback_quantizers
        self.widen(best.plan, fallback)
        for chosen in one_unit(best.plan.subgraphs, self.space.options, self.blamed, fallback):
            plan = self.space.placement(chosen)
            if self.trial_of(plan) is None and self.budget_left(count=False) is None:
                shown = chosen[next(k for k, s in enumerate(chosen) if s.device == "npu")].variant.label
                self.try_plan(plan, f"the accelerator subgraphs at one variant, {shown}: one unit")

    def widen(self, plan: PlacementPlan, fallback: Sequence[str]) -> None:
        """Check ``plan``'s other accelerator subgraphs at a ``fallback`` quantizer's variant one of them runs or passed
        at (:func:`unchecked`), so that :func:`one_unit` can fuse the run (OpenVINO: a head at NNCF with min-max ranges
        beside a backbone and neck at NNCF's default are two calls per frame)."""
        for name, variant in unchecked(plan.subgraphs, self.space.options, fallback):
            found = option_at(self.planner, name, variant, "checked for one unit with its neighbours")
            self.say(f"{name} at {variant.label} (one unit with its neighbours): {'passes' if found else 'fails'}")
            if found is not None:
                *accelerated, cpu = self.space.options[name]
                self.space.options[name] = (*accelerated, found, cpu)

    def card(self) -> Trial | None:
        """The design card's layout judged beside the chosen plan: the chosen placement with the head FP32 on the
        CPU (judged now if it was not; the faster of the two that pass stays chosen)."""
        best = self.best()
        if best is None or self.space.base.strict:
            return None
        card = {s.name: s for s in self.space.cpu_plans() if part(s.name).card_cpu}
        if all(best.plan[name].device == "cpu" for name in card):
            return best
        plan = self.space.placement([card.get(s.name, s) for s in best.plan.subgraphs])
        return self.trial_of(plan) or self.try_plan(
            plan, "the design card's layout: head and decode FP32 on the CPU", always=True
        )

    def recipe(self) -> Recipe | None:
        """The vendor's published recipe (``Backend.recipe``) judged beside the chosen plan, always (the toolkit is
        never slower than it without saying why): every subgraph but those a rule keeps on the CPU at the backend's
        first INT8 variant; not judged where one of them failed a check at it (its reason given)."""
        npu = self.planner.checker.npu
        if not npu.recipe or self.space.base.strict:
            return None
        if "int8" not in self.planner.precisions:
            return Recipe(npu.recipe, None, "this host computes no INT8 for the accelerator")
        variant, chosen = npu.resolve(Variant("int8")), []
        for name, opts in self.space.options.items():
            if opts[-1].granularity == "rule":
                chosen.append(opts[-1])
                continue
            found = next((o for o in opts if o.device == "npu" and _opt(o) == ("npu", variant, ())), None)
            if found is None:
                refused = next((r for r in self.space.rejected.get(name, ()) if r.variant == variant), None)
                why = refused.reason if refused else f"{name} has no option at {variant.label}"
                return Recipe(npu.recipe, None, f"{name} at {variant.label}: {why}")
            chosen.append(found)
        plan = self.space.placement(chosen)
        if self.budget_left(count=False):
            return Recipe(npu.recipe, self.trial_of(plan), "the search's time ran out")
        trial = self.trial_of(plan) or self.try_plan(plan, f"the vendor's recipe: {npu.recipe}", always=True)
        return Recipe(npu.recipe, trial)

    def relax(self, trial: Trial) -> None:
        """Judge each accelerator subgraph of a candidate that failed drift alone; drop and relax those that fail
        alone (with one accelerator subgraph, that is the one)."""
        if self.space.base.strict:  # no subgraph may leave the accelerator: nothing to judge alone
            return
        accelerated = [s for s in trial.plan.subgraphs if s.device == "npu"]
        for s in accelerated:
            alone = trial if len(accelerated) == 1 else self.trial_of(self.alone(trial.plan, s))
            if alone is None:
                if self.budget_left():
                    continue  # no budget left to find out
                why = f"sensitivity: {s.name} alone at {s.variant.label}"
                alone = self.try_plan(self.alone(trial.plan, s), why, always=True)
            if past_limit(alone, self.cfg.validate.max_drift):
                how = "failed drift" if "drift" in alone.run.fails else "drifted past the limit, undecided"
                self.blame(s, f"{s.name} alone at {s.variant.label} {how} (candidate {alone.index})")

    def blame(self, option: SubgraphPlan, why: str) -> None:
        """Drop ``option`` from every waiting candidate; put its relaxed form (a stronger quantizer, or more layers
        kept: :func:`~yolo_edge.plan.planner.relaxed`) in its place."""
        self.blamed.add((option.name, _opt(option)))
        found = relaxed(self.planner, option, why)
        if found is None:
            return
        self.say(f"{option.name}: relaxed to {found.variant.label} ({why})")
        having = [p for p in [*self.pool, *(t.plan for t in self.trials)] if _opt(p[option.name]) == _opt(option)]
        swapped = {}
        for p in having:  # every placement with the blamed option, judged or waiting, with the relaxed one instead
            relaxed_plan = self.space.placement([found if s.name == option.name else s for s in p.subgraphs])
            swapped[relaxed_plan.key] = relaxed_plan
        self.pool += [p for k, p in swapped.items() if k not in self.seen]
        self.pool.sort(key=lambda p: p.estimated_ms)

    def alone(self, plan: PlacementPlan, option: SubgraphPlan) -> PlacementPlan:
        """``plan`` with only ``option``'s subgraph on the accelerator (every other subgraph on the CPU)."""
        cpu = {s.name: s for s in self.space.cpu_plans()}
        return self.space.placement([option if s.name == option.name else cpu[s.name] for s in plan.subgraphs])


def _verdict(t: Trial) -> str:
    lat, d = t.run.latency, t.run.drift
    p95 = "-" if lat is None else f"{lat.end_to_end.p95:.2f} ms"
    drift = "-" if d is None else f"{d.map50:+.4f} / {d.map50_95:+.4f}"
    return f"p95 {p95}, drift {drift}, {t.status}"


def fastest_passing(trials: Sequence[Trial], tie_margin: float) -> Trial | None:
    """The fastest trial that passed, by measured median against the reference. Medians within ``tie_margin``
    of the fastest, or within twice their combined standard error, are a tie (a shared machine moves medians that
    much), won by the trial with the least at low precision, then by the first judged (the search judges the most
    precise of near-equal estimates first): a near-tie is the machine's load, not the plan, and a candidate that
    cannot win a tie need not be judged."""
    passed = [t for t in trials if t.passed and t.speed_ratio is not None]
    if not passed:
        return next((t for t in trials if t.passed), None)
    f = min(passed, key=lambda t: t.speed_ratio or 0.0)
    fast = f.speed_ratio or 0.0

    def tied(t: Trial) -> bool:
        gap = (t.speed_ratio or 0.0) - fast
        return gap <= max(tie_margin * fast, 2 * float(np.hypot(t.ratio_se, f.ratio_se)))

    return min(filter(tied, passed), key=lambda t: (_low_precision(t.plan), t.index))


_PRECISION_RANK = {"fp32": 0, "fp16": 1, "bf16": 1, "int8": 2}


def _low_precision(plan: PlacementPlan) -> int:
    """How much of ``plan`` runs below FP32: 1 per FP16/BF16 subgraph, 2 per INT8 one."""
    return sum(_rank(s.precision) for s in plan.subgraphs)


def _rank(precision: str) -> int:
    """How far below FP32 ``precision`` computes: 0 FP32, 1 FP16/BF16, 2 INT8."""
    return _PRECISION_RANK.get(precision, 2)


def fastest_hopeful(trials: Sequence[Trial], max_drift: float) -> Trial | None:
    """The fastest of ``trials`` (by measured median against the reference) whose drift is undecided within the
    limit (:func:`hopeful`); None: none is."""
    found = [t for t in trials if hopeful(t, max_drift) and t.speed_ratio is not None]
    return min(found, key=lambda t: t.speed_ratio or 0.0) if found else None


def hopeful(trial: Trial, max_drift: float) -> bool:
    """Whether ``trial`` failed no drift and its drift is undecided with both figures within ``max_drift``: the noise
    of too few judging images, not a loss the figures show (its latency may still fail or be undecided: on a busy
    machine every trial's SLA can be)."""
    run, d = trial.run, trial.run.drift
    return UNDECIDED in run.fails and d is not None and not past_limit(trial, max_drift)


def past_limit(trial: Trial, max_drift: float) -> bool:
    """Whether ``trial`` fails drift, or is undecided with its drift past ``max_drift``: where the backend's stronger
    quantization or layers kept out of INT8 may win the drift back (with few judging images a real loss is
    undecided; judged again at a stronger variant, it may pass outright)."""
    run = trial.run
    if "drift" in run.fails:
        return True
    d = run.drift
    return UNDECIDED in run.fails and d is not None and min(d.map50, d.map50_95) < -max_drift


def _opt(s: SubgraphPlan) -> object:
    return (s.device, s.variant, s.cpu_nodes)


def one_unit(
    placed: Sequence[SubgraphPlan],
    options: Mapping[str, Sequence[SubgraphPlan]],
    blamed: Set[tuple[str, object]],
    fallback: Sequence[str] = (),
) -> list[list[SubgraphPlan]]:
    """``placed`` with its accelerator subgraphs at one of the variants it runs them at, one list per variant,
    where they are consecutive and each has that variant among its ``options`` (not ``blamed`` for drift): they
    then compile as one unit (one call, no requantization between them), which an estimate that adds subgraphs
    timed apart cannot see; then at each ``fallback`` quantizer's variant any of them passed at (a head that passed
    at both schemes of the fallback runs at the faster, the other may be the one that fuses within the drift limit);
    then at every variant of higher precision than the lowest it runs that they all passed at (an all-INT8 plan's
    subgraphs that each passed at BF16 too: the estimate cannot see that one BF16 unit may be as fast, as on a CPU
    with AMX, and a tie goes to the plan with less at low precision; a lower precision than the plan's own won no
    place on its estimate already and would only add trials).
    A variant with layers kept at higher precision, or op-level pieces, never fuses."""
    at = [k for k, s in enumerate(placed) if s.device == "npu"]
    if len(at) < 2 or at != list(range(at[0], at[0] + len(at))):
        return []
    lowest = max(_rank(placed[k].variant.precision) for k in at)
    shared = (
        o.variant
        for o in options[placed[at[0]].name]
        if o.device == "npu" and not o.variant.kept and _rank(o.variant.precision) < lowest
    )
    found = []
    for variant in dict.fromkeys([*_run_variants(placed, options, fallback), *shared]):
        same = {k: next((o for o in options[placed[k].name] if _opt(o) == ("npu", variant, ())), None) for k in at}
        if all(o is not None and (o.name, _opt(o)) not in blamed for o in same.values()):
            found.append([same.get(k) or s for k, s in enumerate(placed)])
    return found


def _run_variants(
    placed: Sequence[SubgraphPlan], options: Mapping[str, Sequence[SubgraphPlan]], fallback: Sequence[str]
) -> list[Variant]:
    """The unkept variants ``placed`` runs its accelerator subgraphs at, then every variant any of them passed at by
    a ``fallback`` quantizer one of them runs at."""
    npu = [s for s in placed if s.device == "npu"]
    needed = {s.variant.quantizer for s in npu} & set(fallback)
    extra = (o.variant for s in npu for o in options[s.name] if o.device == "npu" and o.variant.quantizer in needed)
    return [v for v in dict.fromkeys([*(s.variant for s in npu), *extra]) if not v.kept]


def unchecked(
    placed: Sequence[SubgraphPlan], options: Mapping[str, Sequence[SubgraphPlan]], fallback: Sequence[str]
) -> list[tuple[str, Variant]]:
    """The accelerator subgraphs of ``placed`` never checked at a ``fallback`` quantizer's variant that one of them
    runs or passed at: the planner tries a fallback only where every INT8 variant failed precision, so a subgraph
    that passed at the first quantizer has no such option and :func:`one_unit` cannot put the run in one unit."""
    npu = [s for s in placed if s.device == "npu"]
    wanted = [v for v in _run_variants(placed, options, fallback) if v.quantizer in fallback]
    return [(s.name, v) for v in wanted for s in npu if not any(_opt(o) == ("npu", v, ()) for o in options[s.name])]


def search_plans(
    space: PlanSpace,
    planner: Planner,
    session: Session,
    calib: Sequence[dict[str, np.ndarray]],
    evaldata: EvalData,
    reference: Detector,
) -> SearchResult:
    """Judge ``space``'s candidates, fastest estimate first, until one passes or the budget ends (module
    docstring). ``reference`` is the whole-cpu detector; ``calib`` the boundary tensors units calibrate on.
    The result holds the best trial's detector open: close it (``result.detector``) when done."""
    cfg, say, clock = session.cfg, session.say, session.clock
    judge = _Judge(
        space.split, session.profile, cfg, calib, evaldata, reference, session.bar, planner.builder, session.shards
    )
    session.laps.lap("reference")  # its detections and scores on every judging image, once
    search = _Search(space, planner, judge, cfg, say, clock)
    stopped = search.run()
    search.fused()
    card = search.card()
    recipe = search.recipe()
    search.complete()
    session.laps.lap("search")
    kept = search.release(search.shown())
    chosen = search.best()
    fallback = None if chosen is not None else search.fallback()
    assert kept is None or chosen is None or kept.trial is chosen, "the open detector is the chosen trial's"
    detector, units, events = (kept.detector, kept.units, kept.events) if kept else (None, [], EventLog())
    return SearchResult(
        SearchRecord(tuple(search.trials), chosen, search.candidates, stopped, card, recipe, fallback),
        judge.reference,
        reference,
        judge.scorer,
        detector,
        units,
        events,
    )


def with_reason(plan: PlacementPlan, record: SearchRecord) -> PlacementPlan:
    """``plan`` with each CPU subgraph's reason saying what the search found (a variant that failed drift)."""
    failed = [t for t in record.trials if "drift" in t.run.fails]
    subs = []
    for s in plan.subgraphs:
        tried = [t for t in failed if t.plan[s.name].device == "npu" and s.device == "cpu"]
        if tried:
            shown = "; ".join(f"{t.plan[s.name].variant.label} in candidate {t.index}" for t in tried[:3])
            s = replace(s, reason=f"{s.reason}; the verdict rejected it on the accelerator (drift): {shown}")
        subs.append(s)
    return replace(plan, subgraphs=tuple(subs))
