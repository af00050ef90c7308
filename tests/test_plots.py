"""The report's plots are looked at, not only generated: the geometry that makes them readable (labels that do not
cover each other, data that spans the axis rather than a limit far beyond it, a failed plan marked, NPU and CPU
units in different colours) is checked on the figures a deploy draws."""

from __future__ import annotations

from dataclasses import replace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from yolo_edge.flows.deploy import DeployResult  # noqa: E402
from yolo_edge.flows.plots import CPU_COLOURS, NPU_COLOURS, cdf_figure, phases_figure, search_figure, unclutter  # noqa: E402
from yolo_edge.flows.report import frame_order  # noqa: E402
from yolo_edge.validate.verdict import Limits  # noqa: E402


def _boxes(fig, texts):  # type: ignore[no-untyped-def]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [t.get_window_extent(renderer) for t in texts]


def test_search_plot_labels_never_overlap_and_the_data_fills_the_axis(deployed: DeployResult) -> None:
    search = deployed.report.search
    limits = deployed.report.limits
    assert limits.sla_ms > 10 * max(t.run.latency.end_to_end.p95 for t in search.trials if t.run.latency)
    fig = search_figure(search, limits)
    ax = fig.axes[0]
    boxes = _boxes(fig, ax.texts)
    assert len(boxes) >= 1 and not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    points = [ax.transData.transform(xy) for c in ax.collections for xy in c.get_offsets()]
    marks = [Bbox.from_bounds(x - 3, y - 3, 6, 6) for x, y in points]
    assert not any(b.overlaps(m) for b in boxes for m in marks)  # no label on a candidate's marker
    top = max(t.run.latency.end_to_end.p95 for t in search.trials if t.run.latency)
    assert top >= 0.5 * ax.get_ylim()[1]  # the SLA far above is named, not made the scale
    assert "off the scale" in ax.get_title()
    plt.close(fig)
    # eight candidates at one point (a board model gives them one estimate): one label naming them all
    same = replace(search, trials=tuple(replace(search.trials[0], index=i) for i in range(1, 9)))
    first = search.trials[0].run.latency
    assert first is not None
    fig = search_figure(same, Limits(limits.max_drift, first.end_to_end.p95 * 1.2))
    texts = fig.axes[0].texts
    assert [t.get_text() for t in texts] == ["1, 2, 3, 4, 5, 6, 7, 8"]
    assert "off the scale" not in fig.axes[0].get_title()  # an SLA near the data is drawn as a line
    plt.close(fig)


def test_labels_at_nearby_points_are_moved_apart() -> None:
    fig, ax = plt.subplots(figsize=(4, 3), dpi=100)
    ax.scatter([1.0, 1.001, 1.002], [5.0, 5.0, 5.001])
    ax.set_xlim(0, 2)  # three distinct points a hair apart at this scale
    labels = [ax.annotate(f"{k} candidates", (1.0 + k / 1000, 5.0), textcoords="offset points", xytext=(6, 4))
              for k in range(3)]  # fmt: skip
    assert _boxes(fig, labels)[0].overlaps(_boxes(fig, labels)[1])  # as drawn, on top of each other
    unclutter(fig, labels)
    boxes = _boxes(fig, labels)
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    plt.close(fig)


def test_cdf_marks_a_failed_plan_draws_an_identical_one_once_and_fits_the_data(deployed: DeployResult) -> None:
    report = deployed.report
    fig = cdf_figure(report.plans, report.limits.sla_ms, report.profile.name)
    ax = fig.axes[0]
    curves = {line.get_label(): line for line in ax.get_lines() if len(line.get_xdata()) > 2}
    timed = [p for p in report.plans if p.latency is not None]
    assert len(curves) == len(timed)
    for p in timed:
        (label,) = [k for k in curves if k.startswith(p.name)]
        assert (curves[label].get_linestyle() == "--") is (not p.ok) and (p.status in label) is (not p.ok)
    lo, hi = ax.get_xlim()
    samples = [v for p in timed for v in p.latency.samples_ms]  # type: ignore[union-attr]
    assert (max(samples) - min(samples)) >= 0.5 * (hi - lo)
    plt.close(fig)
    # a split that placed nothing on the NPU is the whole-CPU plan: one curve, named for both
    same = [replace(p, same_as_cpu=True) if p.name == "split" else p for p in report.plans]
    fig = cdf_figure(same, report.limits.sla_ms, report.profile.name)
    labels = [line.get_label() for line in fig.axes[0].get_lines() if len(line.get_xdata()) > 2]
    assert "whole-cpu (= split)" in labels and not any(k.startswith("split") for k in labels)
    plt.close(fig)


def test_phases_tell_npu_and_cpu_units_apart_by_colour(deployed: DeployResult) -> None:
    report = deployed.report
    timed = [p for p in report.plans if p.latency is not None]
    fig = phases_figure(report.plans, report.split_plan, frame_order([list(p.latency.phases) for p in timed]))  # type: ignore[union-attr]
    handles, labels = fig.axes[0].get_legend_handles_labels()
    colour = {k: matplotlib.colors.to_hex(h.patches[0].get_facecolor()) for h, k in zip(handles, labels)}
    npu = [c for k, c in colour.items() if k.endswith("(NPU)")]
    cpu = [c for k, c in colour.items() if k.endswith("(CPU)")]
    assert npu and cpu  # host-lowp's whole-cpu plan runs its units on the CPU, the split on the accelerator
    assert set(npu) <= set(NPU_COLOURS) and set(cpu) <= set(CPU_COLOURS)
    plt.close(fig)


def test_the_sweep_plot_moves_close_labels_apart_and_names_a_far_sla() -> None:
    from yolo_edge.flows.sweep import Outcome, Point, SweepResult, sweep_figure

    close = [
        Outcome(
            Point("model.pt", size, device),
            "ok",
            True,
            drift_map50=-0.001,
            drift_map50_95=-0.001 - size / 1e6,
            p50_ms=7.0,
            p95_ms=7.0 + size / 1e4,
            p99_ms=8.0,
        )  # fmt: skip
        for size in (320, 352, 384)
        for device in ("rk3588", "sim-edge-npu")
    ]
    fig = sweep_figure(SweepResult(tuple(close), 10000.0))
    ax = fig.axes[0]
    boxes = _boxes(fig, ax.texts)
    assert len(boxes) == 6 and not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    assert "SLA 10000 ms (p95): off the scale" in ax.get_title() and ax.get_xlim()[1] < 100
    plt.close(fig)
