"""Report: the deploy result as Markdown and PNG plots (latency CDF with the SLA line, per-phase bars).

The JSON report is built by :mod:`yolo_edge.deploy`; this module only renders it.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def markdown(report: dict[str, Any]) -> str:
    what = "mAP" if report["map"]["kind"] == "labels" else "agreement"
    data = report["data"]
    lines = [
        f"# yolo-edge deploy report: {report['model']}",
        "",
        f"Device **{report['device']}** ({report['device_kind']}), measured on {report['host_cpu']}, "
        f"imgsz {report['imgsz'][0]}x{report['imgsz'][1]}, "
        f"SLA p95 <= {report['sla_ms']} ms, mAP drift limit {report['max_drift']}. "
        f"Chosen plan: **{report['chosen_plan']}**. Verdict: **{report['verdict'].upper()}**"
        + (f" ({'; '.join(report['verdict_reasons'])})." if report["verdict_reasons"] else "."),
        "",
    ]
    if data["warning"]:
        lines += [f"> **Warning:** {data['warning']}", ""]
    lines += [
        "## Plans",
        "",
        f"| plan | status | p50 ms | p95 ms | p99 ms | latency | memory peak MB | {what}50 | {what}50-95 | drift "
        f"{what}50 | drift {what}50-95 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in report["plans"]:
        lat = p.get("latency_ms") or {}
        m = p.get("map") or {}
        d = p.get("map_drift") or {}
        mem = p.get("memory_peak_bytes")
        lines.append(
            f"| {p['name']} | {p['status']} | {_fmt(lat.get('p50'))} | {_fmt(lat.get('p95'))} | "
            f"{_fmt(lat.get('p99'))} | "
            f"{p.get('latency_kind') or '-'} | {_fmt(mem / 1e6 if mem else None, 1)} | {_fmt(m.get('map50'), 4)} | "
            f"{_fmt(m.get('map50_95'), 4)} | {_fmt(d.get('map50'), 4)} | {_fmt(d.get('map50_95'), 4)} |"
        )
    ref = report["map"]["reference"]
    lines += [
        "",
        f"Reference (FP32, CPU): {what}50 {ref['map50']:.4f}, {what}50-95 {ref['map50_95']:.4f} "
        f"on {data['images']} images of {data['source']} ({report['map']['text']})"
        + (f", data classes mapped to the model's: {data['class_map']}." if data["class_map"] else "."),
    ]
    lines += [
        "",
        "## Placement (chosen plan)",
        "",
        "| subgraph | device | precision | granularity | ms | kind | reason |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in report["placement"]["subgraphs"]:
        precision = s["precision"] + (f" ({s['int8_scheme']})" if s.get("int8_scheme") else "")
        lines.append(
            f"| {s['name']} | {s['device']} | {precision} | {s['granularity']} | {_fmt(s['latency_ms']['chosen'])} | "
            f"{s['latency_ms']['kind']} | {s['reason']} |"
        )
    w = report["placement"]["whole_graph_npu"]
    lines += [
        "",
        f"Whole graph on the NPU at {w['precision']}: "
        f"{'passes' if w['passed'] else 'fails ' + str(w['failed_check'])}: {w['reason']}",
    ]
    chosen = next(p for p in report["plans"] if p["name"] == report["chosen_plan"])
    phases = (chosen.get("latency") or {}).get("phases", {})
    if phases:
        lines += [
            "",
            "## Per-phase latency (chosen plan)",
            "",
            "| phase | p50 ms | p95 ms | p99 ms |",
            "|---|---|---|---|",
        ]
        for name, pct in phases.items():
            lines.append(f"| {name} | {_fmt(pct['p50'])} | {_fmt(pct['p95'])} | {_fmt(pct['p99'])} |")
    ev = report["fallback_events"]
    lines += ["", "## Runtime fallback", "", f"{ev['total']} events."]
    if ev["total"]:
        lines += ["", "| trigger | count |", "|---|---|"] + [f"| {k} | {v} |" for k, v in ev["by_trigger"].items()]
    lines += ["", "Plots: `plots/latency_cdf.png`, `plots/phases.png`.", ""]
    return "\n".join(lines)


def plots(report: dict[str, Any], samples: dict[str, list[float]]) -> dict[str, bytes]:
    """PNG bytes: ``latency_cdf.png`` (each plan's end-to-end CDF and the SLA) and ``phases.png`` (p50 per phase)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = {}
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for name, values in samples.items():
        v = np.sort(np.asarray(values))
        ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=name)
    ax.axvline(report["sla_ms"], color="red", linestyle="--", label=f"SLA {report['sla_ms']} ms (p95)")
    ax.axhline(0.95, color="grey", linewidth=0.5)
    ax.set_xlabel("end-to-end latency (ms)")
    ax.set_ylabel("fraction of frames")
    ax.set_title(f"Latency CDF on {report['device']}")
    ax.legend(loc="lower right")
    out["latency_cdf.png"] = _png(fig)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    plans = [p for p in report["plans"] if p.get("latency")]
    names = sorted({s for p in plans for s in p["latency"]["phases"]}, key=lambda s: _phase_order(s))
    bottom = np.zeros(len(plans))
    for phase in names:
        vals = np.array([p["latency"]["phases"].get(phase, {}).get("p50", 0.0) for p in plans])
        ax.bar([p["name"] for p in plans], vals, bottom=bottom, label=phase)
        bottom += vals
    ax.set_ylabel("p50 latency (ms)")
    ax.set_title("Per-phase latency")
    ax.legend(fontsize=8)
    out["phases.png"] = _png(fig)
    plt.close(fig)
    return out


def _phase_order(name: str) -> tuple[int, str]:
    order = ["preprocess", "whole", "backbone", "neck", "head", "decode", "transfers", "nms"]
    base = name.split(".")[0]
    return (order.index(base) if base in order else len(order), name)


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()
