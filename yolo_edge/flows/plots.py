"""The report's figures, built to be read: axes fitted to the data (a limit far beyond it is named, not drawn as
the scale), failed plans marked, a plan identical to the reference drawn once, a modelled latency said to be one,
units on the NPU and on the CPU in different colours, labels that never cover each other (:func:`unclutter`)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from yolo_edge.core.config import BOARD
from yolo_edge.flows.search import SearchRecord
from yolo_edge.plan.placement import PlacementPlan
from yolo_edge.validate.latency import POSTPROCESS
from yolo_edge.validate.verdict import Limits, PlanRun

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.text import Annotation

NEAR = 1.5  # a limit within this factor of the data's largest figure is drawn; beyond it, named in the title
NPU_COLOURS = ("#1f77b4", "#17becf", "#2ca02c", "#9edae5", "#98df8a")  # blues and greens: on the accelerator
CPU_COLOURS = ("#ff7f0e", "#d62728", "#8c564b", "#ffbb78", "#e377c2")  # oranges, reds and browns: on the CPU
HOST_COLOURS = {"preprocess": "#c7c7c7", "transfers": "#7f7f7f", POSTPROCESS: "#bcbd22"}


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    pyplot().close(fig)
    return buf.getvalue()


def limit_line(ax: Axes, value: float, data_max: float, label: str, horizontal: bool) -> str:
    """Draw the limit where it is near the data; else say where it is (returned for the title)."""
    if value <= NEAR * data_max:
        (ax.axhline if horizontal else ax.axvline)(value, color="red", linestyle="--", label=label)
        return ""
    return f"; {label}: off the scale, above every figure"


def cdf_figure(plans: Sequence[PlanRun], sla_ms: float, profile: str) -> Figure:
    """Each timed plan's end-to-end CDF; a plan identical to the whole-CPU one is drawn once (named beside it),
    a failing plan dashed with its status, a modelled latency named in the title."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    timed = [p for p in plans if p.latency is not None and not p.same_as_cpu]
    same = [p.name for p in plans if p.same_as_cpu]
    top = 0.0
    for p in timed:
        assert p.latency is not None
        v = np.sort(np.asarray(p.latency.samples_ms))
        top = max(top, float(v[-1]))
        label = p.name + (f" (= {', '.join(same)})" if p.name == "whole-cpu" and same else "")
        label += "" if p.ok else f": {p.status}"
        ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=label, linestyle="-" if p.ok else "--")
    off = limit_line(ax, sla_ms, top, f"SLA {sla_ms:g} ms (p95)", horizontal=False)
    ax.axhline(0.95, color="grey", linewidth=0.5, linestyle=":", label="p95 (0.95 of frames)")
    modelled = any(p.latency is not None and p.latency.kind == BOARD for p in timed)
    ax.set_xlabel("end-to-end latency (ms" + (", modelled (board): each image's own time)" if modelled else ")"))
    ax.set_ylabel("fraction of frames")
    ax.set_title(f"Latency CDF on {profile}{off}", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    return fig


def unit_device(plan: str, unit: str, split: PlacementPlan) -> str | None:
    """Where a plan runs a unit: ``npu``/``cpu`` (None: a host phase, not a unit)."""
    if unit in HOST_COLOURS:
        return None
    if plan in ("whole-npu", "whole-cpu"):
        return plan.removeprefix("whole-")
    return split[unit.split("+")[0]].device


def phases_figure(plans: Sequence[PlanRun], split: PlacementPlan, order: list[str]) -> Figure:
    """p50 per phase, stacked in frame order; a unit's colour says where it ran (blues and greens: the NPU;
    oranges and reds: the CPU; greys: the host's letterbox, transfers and decode + NMS)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    timed = {p.name: p.latency.phases for p in plans if p.latency is not None and not p.same_as_cpu}
    bottom = np.zeros(len(timed))
    shades = {"npu": iter(NPU_COLOURS * 4), "cpu": iter(CPU_COLOURS * 4)}
    colours: dict[tuple[str, str | None], str] = {}
    for phase in order:
        for k, (plan, ph) in enumerate(timed.items()):
            if phase not in ph:
                continue
            where = unit_device(plan, phase, split)
            key = (phase, where)
            fresh = key not in colours
            if fresh:
                colours[key] = HOST_COLOURS[phase] if where is None else next(shades[where])
            label = (phase if where is None else f"{phase} ({where.upper()})") if fresh else None
            ax.bar(plan, ph[phase].p50, bottom=bottom[k], color=colours[key], label=label, edgecolor="white")
            bottom[k] += ph[phase].p50
    ax.set_ylabel("p50 latency (ms)")
    ax.set_title("Per-phase latency, stacked in frame order from the bottom", fontsize=10)
    handles, labels = ax.get_legend_handles_labels()  # outside the axes, top phase first: it covers no bar
    ax.legend(handles[::-1], labels[::-1], fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def search_figure(search: SearchRecord, limits: Limits) -> Figure:
    """The judged candidates as p95 latency against mAP50-95 drift; candidates at the same point share one label;
    the SLA drawn where it is near the data."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    points: dict[tuple[float, float], list[str]] = {}
    markers: list[tuple[float, float, float]] = []
    top = 0.0
    for t in search.trials:
        d, lat = t.run.drift, t.run.latency
        if d is None or lat is None:
            continue
        x, y = round(d.map50_95, 4), round(lat.end_to_end.p95, 2)
        points.setdefault((x, y), []).append(str(t.index))
        top = max(top, y)
        colour = "tab:green" if t.passed else "tab:red"
        star = t is search.chosen
        ax.scatter(x, y, c=colour, marker="*" if star else "o", s=160 if star else 40, zorder=3)
        markers.append((x, y, 9.0 if star else 5.0))
    labels = [
        ax.annotate(", ".join(ids), xy, textcoords="offset points", xytext=(6, 4), fontsize=8)
        for xy, ids in points.items()
    ]
    ax.axvline(-limits.max_drift, color="grey", linestyle="--", label=f"drift limit -{limits.max_drift}")
    off = limit_line(ax, limits.sla_ms, top, f"SLA {limits.sla_ms:g} ms", horizontal=True)
    if top:
        ax.set_ylim(0, max(top, limits.sla_ms if not off else 0) * 1.15)
    modelled = any(t.run.latency is not None and t.run.latency.kind == BOARD for t in search.trials)
    ax.set_xlabel("mAP50-95 drift vs the FP32 reference")
    ax.set_ylabel("p95 latency (ms" + (", modelled (board))" if modelled else ")"))
    ax.set_title(f"Candidates judged (green: pass, red: fail, star: chosen){off}", fontsize=10)
    ax.legend(loc="best", fontsize=8)
    unclutter(fig, labels, markers)
    return fig


def unclutter(fig: Figure, labels: list[Annotation], markers: Sequence[tuple[float, float, float]] = ()) -> None:
    """Move each label up, a line at a time, until it covers no label placed before it and no marker (``markers``:
    data x, y and a radius in pixels, on the first axes)."""
    from matplotlib.transforms import Bbox

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    to_pixels = fig.axes[0].transData.transform
    placed: list[Any] = []
    for x, y, r in markers:
        px, py = to_pixels((x, y))
        placed.append(Bbox.from_bounds(px - r, py - r, 2 * r, 2 * r))
    for label in labels:
        for _ in range(len(labels) + 1):
            box = label.get_window_extent(renderer)
            if not any(box.overlaps(other) for other in placed):
                break
            dx, dy = label.xyann
            label.xyann = (dx, dy + box.height * 72 / fig.dpi + 1)
        placed.append(label.get_window_extent(renderer))
