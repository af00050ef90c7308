"""The deploy report: a typed :class:`DeployReport` built by :func:`yolo_edge.flows.deploy.deploy` from its plan
runs and its search, rendered here as Markdown and PNG plots (latency CDF with the SLA line, per-phase
bars, the search's candidates as latency against drift) and as report.json by ``to_dict()`` (the JSON
boundary: nothing in the package reads the dict back by key).
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from yolo_edge.core.codec import dumps, plain
from yolo_edge.core.config import BOARD, DeviceProfile
from yolo_edge.core.version import __version__
from yolo_edge.data.resolve import Calibration, EvalData
from yolo_edge.devices.limits import ResidentMemory
from yolo_edge.devices.throughput import Throughput
from yolo_edge.flows.plots import cdf_figure, phases_figure, png, search_figure
from yolo_edge.flows.search import SearchRecord, Trial
from yolo_edge.model.meta import DEMO_WEIGHTS, demo_model_path
from yolo_edge.pipeline.postprocess import KEPT_IOU
from yolo_edge.plan.placement import PlacementPlan, SubgraphPlan
from yolo_edge.runtime.build import BatchProof
from yolo_edge.runtime.events import EventSummary, Trigger
from yolo_edge.validate.accuracy import Interval, MapResult
from yolo_edge.validate.conditions import Judged
from yolo_edge.validate.latency import LatencyResult
from yolo_edge.validate.verdict import Limits, PlanRun, status


@dataclass(frozen=True)
class DeployReport:
    """What deploy proved: every plan run, the one chosen and why, the data and the placements."""

    model: str  # as the user named it
    model_names: tuple[str, ...]
    profile: DeviceProfile
    host_cpu: str
    imgsz: tuple[int, int]
    limits: Limits
    plans: tuple[PlanRun, ...]  # whole-npu, whole-cpu (the reference), split
    chosen: PlanRun
    reasons: tuple[str, ...]  # why the verdict is what it is (empty when it passes)
    data: EvalData
    calibration: Calibration
    placement: PlacementPlan  # the chosen plan's
    split_plan: PlacementPlan
    search: SearchRecord
    fallback_events: EventSummary  # the split's
    wall_s: float
    # condition -> plan (split, design card) -> its figures against the FP32 reference under it (validate.conditions)
    conditions: dict[str, dict[str, Judged]] = field(default_factory=dict)
    conditions_not_judged: str = ""  # why validate.conditions were not judged ('' where they were, or none are set)
    memory: ResidentMemory | None = None  # the split plan's accelerator units held together (None: none)
    batch: BatchProof | None = None  # deploy --batch N: the batch its units run at, each batched frame against batch 1
    throughput: Throughput | None = None  # the cameras the deployed plan serves (judged where deploy --streams/--fps)
    calibrated_conditions: tuple[str, ...] = ()  # conditions some calibration images were changed by
    timings_s: dict[str, float] = field(default_factory=dict)  # wall time of each phase, in order (Laps)

    @property
    def passed(self) -> bool:
        return self.chosen.ok and self._throughput in ("ok", None)

    @property
    def undecided(self) -> bool:
        """Neither passed nor failed: the chosen plan's drift or p95 is within the noise (exit 4, as ``check``), or it
        passes and its throughput, asked, is the profile's to measure (a host's), not modelled here."""
        if self._throughput == "fails":
            return False
        return self.chosen.undecided or (self.chosen.ok and self._throughput == "not modelled")

    @property
    def _throughput(self) -> str | None:
        """The throughput's status where deploy was asked for one (None: not asked)."""
        t = self.throughput
        return t.status if t is not None and t.asked else None

    @property
    def verdict(self) -> str:
        """``PASS``, ``UNDECIDED`` or ``FAIL``: what deploy's last line says and its exit code tells."""
        return "PASS" if self.passed else "UNDECIDED" if self.undecided else "FAIL"

    @property
    def reference(self) -> MapResult:
        ref = next(p for p in self.plans if p.name == "whole-cpu").map
        assert ref is not None
        return ref

    @property
    def metric(self) -> str:
        """``mAP`` or ``agreement``: what the accuracy columns are."""
        return "mAP" if self.data.labelled else "agreement"

    def to_dict(self) -> dict[str, Any]:
        """report.json."""
        return plain(
            {
                "yolo_edge": __version__,
                "model": self.model,
                "model_names": list(self.model_names),
                "device": self.profile.name,
                "device_kind": self.profile.kind,
                "host_cpu": self.host_cpu,
                "imgsz": list(self.imgsz),
                "sla_ms": self.limits.sla_ms,
                "max_drift": self.limits.max_drift,
                "verdict": self.verdict.lower(),  # pass, undecided or fail
                "verdict_reasons": list(self.reasons),
                "chosen_plan": self.chosen.name,
                "plans": [r.to_dict() for r in self.plans],
                "map": {
                    "reference": self.reference.to_dict(),
                    "deployed": self.chosen.map.to_dict() if self.chosen.map else None,
                    "kind": self.data.kind,
                    "text": self.data.kind_text,
                },
                "data": {
                    "source": self.data.source,
                    "images": len(self.data.dataset),
                    "kind": self.data.kind,
                    "class_map": self.data.class_map,
                    "warning": self.data.warning,
                    "left_out_to_calibrate": len(self.data.excluded),
                },
                "calibration": {
                    "source": self.calibration.source,
                    "images": len(self.calibration.files),
                    "warning": self.calibration.warning,
                },
                "placement": self.placement.to_dict(),
                "split_plan": self.split_plan.to_dict(),
                "search": search_dict(self.search, self.limits),
                "fallback_events": self.fallback_events.to_dict(),
                "wall_s": self.wall_s,
                "timings_s": dict(self.timings_s),
                "conditions": {c: {p: j.to_dict() for p, j in by.items()} for c, by in self.conditions.items()},
                "conditions_not_judged": self.conditions_not_judged or None,
                "memory": None if self.memory is None else self.memory.to_dict(),
                "batch": None if self.batch is None else self.batch.to_dict(),
                "throughput": None if self.throughput is None else self.throughput.to_dict(),
                "calibrated_conditions": list(self.calibrated_conditions),
            }
        )


def trial_dict(t: Trial) -> dict[str, Any]:
    """One judged candidate in report.json."""
    run = t.run
    return plain(
        {
            "index": t.index,
            "placement": t.plan.label,
            "units": list(t.units),  # the units its executor ran (consecutive subgraphs at one variant fuse)
            "why": t.why,
            "estimated_ms": t.estimated_ms,
            "latency_kind": t.plan.latency_kind if run.latency is None else run.latency.kind,  # as its p95 was had
            "p95_ms": None if run.latency is None else run.latency.end_to_end.p95,
            "p50_vs_reference": t.speed_ratio,
            "map_drift": None if run.drift is None else run.drift.to_dict(),
            "map_drift_interval": None if run.drift_interval is None else run.drift_interval.to_dict(),
            "agreement_drift": None if run.agreement_drift is None else run.agreement_drift.to_dict(),
            "criterion": None if run.accuracy is None else run.accuracy.criterion,
            "images": t.images,  # judging images its drift was scored on (0: not judged)
            "stopped": t.stopped,  # why its judging stopped there
            "status": t.status,
            "passed": t.passed,
            "wall_s": t.wall_s,
        }
    )


def search_dict(search: SearchRecord, limits: Limits) -> dict[str, Any]:
    return plain(
        {
            "candidates": search.candidates,
            "judged": len(search.trials),
            "stopped": search.stopped,
            "chosen": None if search.chosen is None else search.chosen.index,
            "card_layout": None if search.card is None else search.card.index,
            "card_line": search.card_line(),
            "recipe": None
            if search.recipe is None
            else {
                "what": search.recipe.what,
                "candidate": None if search.recipe.trial is None else search.recipe.trial.index,
                "needed_max_drift": search.recipe.needed_drift(),
                "why_not_judged": search.recipe.why or None,
                "line": search.recipe_line(limits),
            },
            "undecided": search.undecided_lines(limits),
            "trials": [trial_dict(t) for t in search.trials],
        }
    )


def search_rows(search: SearchRecord) -> list[tuple[str, ...]]:
    """The candidate table: one row per candidate timed (``#``, placement, why, estimate, p95, drift, the judging
    images its drift was scored on, status: why it was not judged, where it was not)."""
    rows: list[tuple[str, ...]] = []
    for t in search.trials:
        run, d, a = t.run, t.run.drift, t.run.agreement_drift
        shown = "-" if d is None else " / ".join(_drift_num(d, run.drift_interval))
        other = (
            "-"
            if a is None or run.accuracy_drift is None or run.accuracy_drift.criterion == "agreement"
            else " / ".join(_drift_num(a, run.accuracy_drift.agreement_interval))
        )
        rows.append(
            (
                f"{t.index}{' *' if t is search.chosen else ''}",
                t.plan.label,
                t.why,
                f"{t.estimated_ms:.2f}",
                "-" if run.latency is None else f"{run.latency.end_to_end.p95:.2f}",
                "-" if t.speed_ratio is None else f"{t.speed_ratio:.2f}",
                shown,
                "-" if run.accuracy is None else run.accuracy.criterion,
                other,
                "-" if run.kept is None else str(run.kept),
                str(t.images) if t.judged else "-",
                t.status,
            )
        )
    return rows


SEARCH_HEADER = (
    "#",
    "placement",
    "why tried",
    "est. ms",
    "p95 ms",
    "p50 / cpu",
    "drift 50 / 50-95",
    "decided by",
    "agreement drift",
    "boxes kept",
    "images",
    "status",
)


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _num(result: MapResult | None, signed: bool = False) -> tuple[str, str]:
    if result is None:
        return "-", "-"
    fmt = "+.4f" if signed else ".4f"
    return f"{result.map50:{fmt}}", f"{result.map50_95:{fmt}}"


def _drift_num(result: MapResult | None, interval: Interval | None) -> tuple[str, str]:
    """A drift's two figures, each with its bootstrap interval where it has one: ``-0.0012 [-0.0040, +0.0009]``."""
    if result is None or interval is None:
        return _num(result, signed=True)
    lo, hi = interval.lo, interval.hi
    return (
        f"{result.map50:+.4f} [{lo.map50:+.4f}, {hi.map50:+.4f}]",
        f"{result.map50_95:+.4f} [{lo.map50_95:+.4f}, {hi.map50_95:+.4f}]",
    )


def _plan_row(p: PlanRun) -> str:
    lat = p.latency.end_to_end.to_dict() if p.latency else {}
    mem = p.memory_peak_bytes
    s = p.spread  # a measured p95: of the rounds judged, with its interval
    p95 = _fmt(lat.get("p95")) if s is None else f"{s.p95:.2f} [{s.lo:.2f}, {s.hi:.2f}]"
    return (
        f"| {p.name} | {p.status} | {_fmt(lat.get('p50'))} | {p95} | {_fmt(lat.get('p99'))} | "
        f"{p.latency.kind if p.latency else '-'} | {_fmt(mem / 1e6 if mem else None, 1)} | "
        f"{' | '.join(_num(p.map))} | {' | '.join(_drift_num(p.drift, p.drift_interval))} | "
        f"{' | '.join(_agreement_beside(p))} | {'-' if p.kept is None else p.kept} |"
    )


def _agreement_beside(p: PlanRun) -> tuple[str, str]:
    if p.criterion != "labels" or p.accuracy_drift is None:
        return "-", "-"
    return _drift_num(p.agreement_drift, p.accuracy_drift.agreement_interval)


def _placement_row(s: SubgraphPlan) -> str:
    reason = s.reason + (f"; {s.kept_why}" if s.kept_why else "")
    return (
        f"| {s.name} | {s.device} | {s.variant.label} | {s.granularity} | {_fmt(s.latency_ms)} | {s.latency_kind} | "
        f"{reason} |"
    )


def _placement_section(report: DeployReport) -> list[str]:
    w = report.split_plan.whole_graph_npu
    return [
        "## Placement (chosen plan)",
        "",
        *([f"On {report.profile.name}, {report.profile.stand_in}.", ""] if report.profile.stand_in else []),
        "| subgraph | device | precision | granularity | ms | kind | reason |",
        "|---|---|---|---|---|---|---|",
        *(_placement_row(s) for s in report.placement.subgraphs),
        "",
        "`ms`: each subgraph alone, as the performance check timed or modelled it; the per-phase table below times "
        "the chosen plan's units inside whole frames (fused subgraphs, the frame's other work and the machine's "
        "load between them), so the two need not add up.",
        "",
        f"Whole graph on the NPU at {'-' if w.variant is None else w.variant.label}: "
        f"{'passes' if w.passed else f'fails {w.failed_check}'}: {w.reason}",
    ]


def _timings(report: DeployReport) -> list[str]:
    """Where the deploy's wall time went, phase by phase (before the bundle was written)."""
    if not report.timings_s:
        return []
    shown = ", ".join(f"{name} {s:.1f} s" for name, s in report.timings_s.items())
    return [f"Deploy took {report.wall_s:.1f} s before the bundle: {shown}.", ""]


def _search_section(report: DeployReport) -> list[str]:
    search = report.search
    return [
        "## Search",
        "",
        f"{search.candidates} candidate placements passed the four checks; {search.tally} by the verdict, "
        f"fastest estimate first ({search.stopped}); each trial's drift on the judging images until one look decided "
        "it (`images`), a candidate that could not beat one that passed timed only. `*`: chosen. "
        f"Latency {report.split_plan.latency_kind}; "
        "`est. ms`: the planner's estimate of the units and transfers (without letterbox, decode and NMS); "
        "`p50 / cpu`: the candidate's median frame time over the FP32 whole-CPU reference's, timed in turn in the "
        "same rounds (what ranks them: comparable between candidates judged minutes apart on a busy machine); "
        "drift decided by labels where there are labels (the agreement figure beside it), else by agreement with "
        "the FP32 reference; in brackets each drift's paired bootstrap interval over the judging images (and the "
        "agreement draws): one that straddles the limit is undecided; `boxes kept`: of the FP32 reference's boxes at "
        f"the operating confidence (`nms.conf`), how many the candidate's keep (same class, IoU >= {KEPT_IOU:g}), what "
        "a user comparing the two outputs sees and the mAP drift (scored down to `val_nms.conf`) can hide. "
        "Plot: `plots/search.png`.",
        "",
        "| " + " | ".join(SEARCH_HEADER) + " |",
        "|" + "---|" * len(SEARCH_HEADER),
        *("| " + " | ".join(row) + " |" for row in search_rows(search)),
        *(["", f"Against the design card: {search.card_line()}."] if search.card_line() else []),
        *(["", f"Against {line}."] if (line := search.recipe_line(report.limits)) else []),
        *(f"\n{line}." for line in search.undecided_lines(report.limits)),
    ]


def _phases(latency: LatencyResult | None) -> list[str]:
    """The chosen plan's per-phase latency section, and how each phase was obtained."""
    if latency is None:
        return []
    how = ": the board's CPU model for letterbox, NMS and the CPU units" if latency.kind == BOARD else ""
    lines = ["", "## Per-phase latency (chosen plan)", "", f"Every phase {latency.kind}{how}.", ""]
    lines += ["| phase | p50 ms | p95 ms | p99 ms |", "|---|---|---|---|"]
    return lines + [f"| {n} | {_fmt(p.p50)} | {_fmt(p.p95)} | {_fmt(p.p99)} |" for n, p in latency.phases.items()]


def _model_shown(model: str) -> str:
    """The model as the report names it: the shipped demo by its name, not by where this install put it."""
    return f"the demo model ({DEMO_WEIGHTS})" if Path(model) == demo_model_path() else model


def markdown(report: DeployReport) -> str:
    what, data, limits = report.metric, report.data, report.limits
    host = report.host_cpu
    modelled = report.profile.latency == "modelled"
    where = f"numerics on {host}, latency modelled for the board" if modelled else f"measured on {host}"
    lines = [
        f"# yolo-edge deploy report: {_model_shown(report.model)}",
        "",
        f"Device **{report.profile.name}** ({report.profile.kind}), {where}, "
        f"imgsz {report.imgsz[0]}x{report.imgsz[1]}, SLA p95 <= {limits.sla_ms} ms, "
        f"mAP drift limit {limits.max_drift}. "
        f"Chosen plan: **{report.chosen.name}**. Verdict: **{report.verdict}**"
        + (f" ({'; '.join(report.reasons)})." if report.reasons else "."),
        "",
    ]
    lines += [f"> **Warning:** {data.warning}", ""] if data.warning else []
    lines += [
        "## Plans",
        "",
        f"| plan | status | p50 ms | p95 ms | p99 ms | latency | memory peak MB | {what}50 | {what}50-95 | drift "
        f"{what}50 | drift {what}50-95 | agreement drift 50 | agreement drift 50-95 | boxes kept |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [_plan_row(p) for p in report.plans]
    ref, cal = report.reference, report.calibration
    lines += [
        "",
        f"Reference (FP32, CPU): {what}50 {ref.map50:.4f}, {what}50-95 {ref.map50_95:.4f} "
        f"on {len(data.dataset)} images of {data.source} ({data.kind_text})"
        + (f", data classes mapped to the model's: {data.class_map}" if data.class_map else "")
        + f". INT8 calibration and the precision check on {len(cal.files)} other images: {cal.source}."
        + (f" Warning: {cal.warning}." if cal.warning else ""),
        "",
        *_timings(report),
        *_search_section(report),
        "",
        *_placement_section(report),
        *_phases(report.chosen.latency),
    ]
    lines += _memory_section(report.memory)
    lines += _batch_lines(report.batch)
    lines += throughput_lines(report.throughput)
    lines += _conditions_section(report)
    ev = report.fallback_events
    lines += ["", "## Runtime fallback", "", f"{ev.total} events while judging, by trigger (the four of the"
              " reference's decision engine, the per-frame failures, and recoveries):", "",
              "| trigger | count |", "|---|---|"]  # fmt: skip
    lines += [f"| {k} | {ev.by_trigger.get(k, 0)} |" for k in typing.get_args(Trigger)]
    lines += ["", "Plots: `plots/latency_cdf.png`, `plots/phases.png`, `plots/search.png`.", ""]
    return "\n".join(lines)


def _batch_lines(proof: BatchProof | None) -> list[str]:
    """The batch deploy was asked to plan (``--batch N``), as ``run`` takes it, and its frames against batch 1."""
    if proof is None:
        return []
    p = proof.plan
    why = f" ({p.why})" if p.why else ""
    lines = ["", f"Batch {p.asked} asked: the accelerator units run at {p.runs_at}{why}."]
    for unit, diff in proof.difference.items():
        same = "bit for bit" if diff == 0 else f"within {diff:.1e} of the output's range"
        lines.append(f"- {unit}: each frame of a batched call equals its batch-1 call {same} ({proof.frames} frames)")
    return lines


def throughput_lines(t: Throughput | None) -> list[str]:
    """How many cameras the deployed plan serves: each way of running it on the cores, what it sustains, its p95
    at the streams asked, its bottleneck and memory (modelled, board), and the chosen one."""
    if t is None:
        return []
    head = f"{t.streams} x {t.fps:g} FPS" + ("" if t.asked else " (not asked: deploy --streams N --fps F judges it)")
    lines = ["", "## Throughput", "", f"{head}: **{t.status}**: {t.reason}.", ""]
    if t.chosen is None:
        return lines
    held = "" if t.held_out_error is None else f"; the multi-core model's held-out error {t.held_out_error:.1%}"
    lines += [
        f"Serves up to **{t.max_streams} streams at {t.fps:g} FPS** within p95 {t.sla_ms:g} ms, modelled "
        f"(board){held}.",
        "",
        "| cores run as | sustains FPS | p50 ms | p95 ms | bottleneck | accelerator memory MiB | |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in t.options:
        mem = "-" if o.memory_bytes is None else f"{o.memory_bytes / 2**20:.1f} of {t.budget_bytes / 2**20:.0f}"
        mark = "chosen" if o is t.chosen else ""
        lines.append(
            f"| {o.mode.label(o.cores)} | {o.capacity_fps:.0f} | {o.p50_ms:.1f} | {o.p95_ms:.1f} | "
            f"{o.bottleneck} ({o.utilisation[o.bottleneck]:.0%}) | {mem} | {mark} |"
        )
    return lines


def _memory_section(memory: ResidentMemory | None) -> list[str]:
    """The accelerator units held together, by batch, against the budget (the memory check's figures)."""
    if memory is None:
        return []
    batches = memory.batches
    over = (
        f" A batch of {memory.batch} does not fit: it runs as sub-batches of {memory.runs_at}."
        if memory.batch_fit < memory.batch
        else ""
    )
    lines = [
        "",
        "## Memory",
        "",
        f"The split plan's accelerator units as the runtime holds them together (each context's own activations x "
        f"the batch, the weights once per context unless the runtime shares them, and the runtime's own memory where "
        f"measured: devices/limits.RuntimeMemory), against the budget of {memory.budget_bytes / 2**20:.0f} MiB: "
        f"planned batch {memory.batch}, the largest that fits {memory.batch_fit}.{over}",
        "",
        "| unit | contexts | weights MiB | activations MiB a frame | fits batch | "
        + " | ".join(f"B={b}" for b in batches)
        + " |",
        "|---|---|---|---|---|" + "---|" * len(batches),
    ]
    for (name, u), fit in zip(memory.units, memory.unit_fits):
        shared = " (shared weights)" if u.residency.runtime.shares_weights else ""
        by = " | ".join(f"{u.dram_at(b) / 2**20:.1f}" for b in batches)
        lines.append(
            f"| {name} | {u.residency.contexts}{shared} | {u.weight_bytes / 2**20:.1f} | "
            f"{u.peak_activation_bytes / 2**20:.1f} | {fit} | {by} |"
        )
    every = " | ".join(f"{memory.need_at(b) / 2**20:.1f}" for b in batches)
    lines.append(f"| all together | | | | {memory.batch_fit} | {every} |")
    return lines


def _conditions_section(report: DeployReport) -> list[str]:
    """The plans under conditions the calibration never saw, each against the FP32 reference under the same one."""
    calibrated = (
        f" Calibrated with images changed by {', '.join(report.calibrated_conditions)}."
        if report.calibrated_conditions
        else " Calibrated on the images as they are."
    )
    if report.conditions_not_judged:
        return [
            "",
            "## Conditions the calibration never saw",
            "",
            f"Not judged: {report.conditions_not_judged}.{calibrated}",
        ]
    if not report.conditions:
        return []
    rows = [j for by in report.conditions.values() for j in by.values()]
    last = max(rows, key=lambda j: j.images, default=None)  # judged on every image of the sample
    level = f"{last.drift_interval.level:.0%} " if last is not None and last.drift_interval else ""
    images = "" if last is None else f"The first {last.images} "
    what = report.metric
    lines = [
        "",
        "## Conditions the calibration never saw",
        "",
        f"{images or 'The '}judging images changed (validate/conditions.py), seen alike by each plan and the "
        f"FP32 reference; drift of {what}50 with its {level}interval, boxes kept of the reference's there; `images`: "
        "a plan's row is judged on fewer where an earlier look of the same images decided it (at a wider interval, "
        "`plan.search_looks`)." + calibrated,
        "",
        f"| condition | plan | reference {what}50 | plan {what}50 | drift {what}50 | boxes kept | images | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, by in report.conditions.items():
        if not by:
            unjudged = "not judged: the FP32 reference detects nothing under it (no labels to score against)"
            lines.append(f"| {name} | - | - | - | - | - | - | {unjudged} |")
        for plan, j in by.items():
            bounds = "" if j.drift_interval is None else (
                f" [{j.drift_interval.lo.map50:+.4f}, {j.drift_interval.hi.map50:+.4f}]")  # fmt: skip
            kept = "" if j.kept is None else f"{j.kept} ({j.kept.kept / max(1, j.kept.of):.1%})"
            verdict = status(j.verdict(report.limits.max_drift))
            lines.append(
                f"| {name} | {plan} | {j.reference.map50:.4f} | {j.deployed.map50:.4f} | {j.drift.map50:+.4f}{bounds} "
                f"| {kept} | {j.images} | {verdict} |"
            )
    return lines


def plots(report: DeployReport) -> dict[str, bytes]:
    """PNG bytes: ``latency_cdf.png`` (each plan's end-to-end CDF and the SLA), ``phases.png`` (p50 per phase, NPU
    and CPU units in their colours) and ``search.png`` (:mod:`yolo_edge.flows.plots`)."""
    timed = [p for p in report.plans if p.latency is not None]
    order = frame_order([list(p.latency.phases) for p in timed if p.latency is not None])
    return {
        "latency_cdf.png": png(cdf_figure(report.plans, report.limits.sla_ms, report.profile.name)),
        "phases.png": png(phases_figure(report.plans, report.split_plan, order)),
        "search.png": search_plot(report.search, report.limits),
    }


def report_files(report: DeployReport) -> dict[str, bytes]:
    """The report as a bundle stores it: ``report.json``, ``report.md`` and ``plots/*.png``."""
    return {
        "report.json": dumps(report.to_dict()).encode(),
        "report.md": markdown(report).encode(),
        **{f"plots/{name}": data for name, data in plots(report).items()},
    }


def search_plot(search: SearchRecord, limits: Limits) -> bytes:
    """The judged candidates as p95 latency against mAP50-95 drift, the drift limit and the SLA drawn in."""
    return png(search_figure(search, limits))


def frame_order(orders: Sequence[Sequence[str]]) -> list[str]:
    """Every plan's phases (each list in its own frame order: preprocess, its units, transfers, decode + NMS) in one
    order that keeps each plan's: a phase after every phase any plan runs before it, ties by first appearance.
    Unit names are not parsed (``backbone+neck`` after ``backbone`` because the frames say so)."""
    before: dict[str, set[str]] = {}
    for order in orders:
        for k, name in enumerate(order):
            before.setdefault(name, set()).update(order[:k])
    out: list[str] = []
    left = list(before)
    while left:  # frame orders never contradict (preprocess first, NMS last); if they did, first appearance wins
        ready = next((n for n in left if before[n] <= set(out)), left[0])
        out.append(ready)
        left.remove(ready)
    return out
