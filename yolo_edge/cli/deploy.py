"""``yolo-edge deploy``: export, split, plan, build, validate; three plans compared; a bundle and a report.

Exit code 0 when the chosen plan meets the SLA and the drift limit, 1 when it does not, 2 on bad input.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from yolo_edge.cli.common import (
    add_device,
    add_imgsz,
    add_model,
    add_trial_shards,
    fraction,
    placement_line,
    positive_float,
    table,
)
from yolo_edge.core.codec import dumps
from yolo_edge.core.config import DeployConfig
from yolo_edge.devices.limits import ResidentMemory
from yolo_edge.devices.throughput import Throughput
from yolo_edge.flows.deploy import DeployRequest, deploy
from yolo_edge.flows.report import SEARCH_HEADER, DeployReport, search_rows
from yolo_edge.flows.search import SearchRecord
from yolo_edge.validate.noise import Spread
from yolo_edge.validate.verdict import OK, status


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("deploy", help="deploy a model to a device and prove it (bundle + report)", description=__doc__)
    add_model(p, required=False)
    add_device(p)
    add_imgsz(p)
    p.add_argument("--sla-ms", type=positive_float, default=None, help="p95 end-to-end latency limit (default: config)")
    p.add_argument(
        "--max-drift",
        type=fraction,
        default=None,
        help="mAP50 and mAP50-95 drift limit, a share (default: config, 0.01)",
    )
    p.add_argument(
        "--batch",
        type=int,
        default=None,
        help="frames a call of an accelerator unit is planned for (default: config, 1): the memory check counts "
        "them; a batch larger than fits runs as sub-batches of the largest that does",
    )
    p.add_argument(
        "--streams",
        type=int,
        default=None,
        help="cameras the plan must serve at once (default: config, 1): with --streams or --fps the verdict judges "
        "the throughput, every frame delivered and p95 within the SLA, on the board's cores (modelled)",
    )
    p.add_argument(
        "--fps", type=positive_float, default=None, help="frames a second each camera captures (default: 30)"
    )
    p.add_argument(
        "--data",
        default=None,
        help="data.yaml or COCO JSON labelled with the model's classes, or an image folder "
        "(agreement with the FP32 reference); default: the demo val split for the demo's classes. Without --calib, "
        "a model that is not the demo calibrates on some of these images (never judged on them)",
    )
    p.add_argument(
        "--class-map",
        default=None,
        help="map the data set's classes to the model's: DATA=MODEL,... (names or "
        "indices; unmapped data classes are dropped)",
    )
    p.add_argument(
        "--calib",
        type=Path,
        default=None,
        help="calibration image folder (default: the shipped calib_data for the demo model, else images of --data)",
    )
    p.add_argument("--config", type=Path, default=None)
    add_trial_shards(p)
    p.add_argument("--out", type=Path, default=Path("out/bundle"))
    p.add_argument("--strict", action="store_true", help="fail instead of falling back to the CPU")
    p.add_argument("--json", action="store_true", help="print report.json")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run)


SEARCH_COLUMNS = ("#", "placement", "est. ms", "p95 ms", "drift 50 / 50-95", "boxes kept", "images", "status")


def search_table(search: SearchRecord, rest: str) -> str:
    """The candidates judged, in the columns that decide (the report's table has every column): it fits the
    terminal, and says where the rest is (``rest``)."""
    keep = [SEARCH_HEADER.index(c) for c in SEARCH_COLUMNS]
    rows = [[row[i] for i in keep] for row in search_rows(search)]
    left = ", ".join(c for c in SEARCH_HEADER if c not in SEARCH_COLUMNS)
    return table(SEARCH_COLUMNS, rows) + f"\n(also {left}: {rest})"


def _print_search(r: DeployReport) -> None:
    """The candidates judged, the design card's layout beside the chosen, and the faster ones left undecided."""
    search = r.search
    print(f"search: {search.candidates} candidates passed the four checks, {search.tally} ({search.stopped}); * chosen")
    print(search_table(search, "the bundle's report.md") + "\n")
    if search.card_line():
        print(f"against the design card: {search.card_line()}\n")
    recipe = search.recipe_line(r.limits)
    if recipe:
        print(f"against {recipe}\n")
    for line in search.undecided_lines(r.limits):
        print(line + "\n")


def _print_plans(r: DeployReport) -> None:
    """The three plans (whole-npu, whole-cpu, split): status, p95, memory, drift and the boxes each keeps."""
    rows = []
    for p in r.plans:
        lat, d = p.latency, p.drift
        rows.append(
            (
                p.name,
                p.status,
                "-" if not lat else f"{lat.end_to_end.p95:.2f}" if not p.spread else _p95(p.spread),
                lat.kind if lat else "-",
                f"{p.memory_peak_bytes / 1e6:.1f}" if p.memory_peak_bytes else "-",
                f"{d.map50:+.4f}" if d else "-",
                f"{d.map50_95:+.4f}" if d else "-",
                "-" if p.kept is None else str(p.kept),
            )
        )
    what = r.metric
    headers = ("plan", "status", "p95 ms", "latency", "memory MB", f"drift {what}50", f"drift {what}50-95")
    print(table((*headers, "boxes kept"), rows, whole=(2,)))  # a p95 and its interval on one line
    timed = next((p.spread for p in r.plans if p.spread is not None), None)
    if timed is not None:
        load = "not readable" if timed.busy is None else f"others took {timed.busy:.0%} of its CPUs"
        print(
            f"measured p95 with its 95 % interval, the plans timed frame by frame in turn in {timed.rounds} rounds: "
            f"{timed.busy_rounds} busy ({load})"
        )


def _p95(s: Spread) -> str:
    return f"{s.p95:.2f} [{s.lo:.2f}, {s.hi:.2f}]"


def deploy_request(args: argparse.Namespace, config: DeployConfig | None = None) -> DeployRequest:
    """The deploy request of ``deploy``'s and ``plan``'s common arguments (``config``: loaded and changed by the
    command; else ``--config``'s path)."""
    return DeployRequest(
        model=args.model,
        device=args.device,
        imgsz=args.imgsz,
        data=args.data,
        calib=args.calib,
        class_map=args.class_map,
        config=config or args.config,
        strict=args.strict,
        shards=args.shards,
        ray_address=args.ray_address,
    )


def run(args: argparse.Namespace) -> int:
    asked = args.streams is not None or args.fps is not None
    streams = (1 if args.streams is None else args.streams, args.fps) if asked else None
    request = replace(
        deploy_request(args), sla_ms=args.sla_ms, max_drift=args.max_drift, batch=args.batch, streams=streams
    )
    result = deploy(request, out=args.out, quiet=args.quiet or args.json)
    r = result.report
    if args.json:
        print(dumps(r.to_dict()))
        return result.exit_code
    what, ref, data, k = r.metric, r.reference, r.data, r.chosen.kept
    board = f"modelled for {r.profile.name}; numerics on"
    print(f"latency {board if r.profile.latency == 'modelled' else 'measured on'} {r.host_cpu}")
    _print_search(r)
    _print_plans(r)
    mapped = f", classes mapped {data.class_map}" if data.class_map else ""
    print(
        f"\nreference {what}50 {ref.map50:.4f}, {what}50-95 {ref.map50_95:.4f} on {len(data.dataset)} images of "
        f"{data.source} [{data.kind_text}]{mapped}; INT8 calibration and the precision check on "
        f"{len(r.calibration.files)} others ({r.calibration.source})"
        + (f"; boxes kept: of its {k.of} {k.counted}" if k else "")
    )
    print("split plan: " + placement_line(r.split_plan))
    print("deployed:   " + placement_line(r.placement) + (f"  ({r.profile.stand_in})" if r.profile.stand_in else ""))
    ev = r.fallback_events
    print(f"fallback events: {ev.total}" + (f" {ev.by_trigger}" if ev.total else ""))
    if r.memory is not None:
        print(memory_line(r.memory))
    if r.batch is not None:
        p, worst = r.batch.plan, max(r.batch.difference.values(), default=None)
        same = (
            ""
            if worst is None
            else "; batched frames equal batch 1's "
            + ("bit for bit" if worst == 0 else f"within {worst:.1e} of the output's range")
        )
        print(f"batch {p.asked}: run --batch runs it at {p.runs_at}" + (f" ({p.why})" if p.why else "") + same)
    if r.throughput is not None:
        print(throughput_line(r.throughput))
    if r.conditions:
        print("split under conditions, boxes kept of the FP32 reference's there: " + conditions_line(r))
    elif r.conditions_not_judged:
        print(f"conditions not judged: {r.conditions_not_judged}")
    print(
        f"chosen: {r.chosen.name}  SLA p95 <= {r.limits.sla_ms} ms  verdict: {r.verdict}"
        + (f" ({'; '.join(r.reasons)})" if r.reasons else "")
    )
    print(f"bundle: {result.bundle}  (report.md, report.json, plots/)")
    return result.exit_code


def throughput_line(t: Throughput) -> str:
    """``cameras: serves up to N streams at F FPS (2 contexts a core: sustains X FPS, bottleneck ...)``: how
    many cameras the deployed plan serves, and the verdict on the streams asked (report.md's Throughput)."""
    if t.chosen is None:
        return f"cameras: {t.reason}" + (f" ({t.status})" if t.asked else "")
    c = t.chosen
    held = "" if t.held_out_error is None else f", multi-core model's held-out error {t.held_out_error:.1%}"
    line = (
        f"cameras: serves up to {t.max_streams} streams at {t.fps:g} FPS within p95 {t.sla_ms:g} ms "
        f"({c.mode.label(c.cores)}: sustains {c.capacity_fps:.0f} FPS, bottleneck {c.bottleneck}; modelled, "
        f"board{held})"
    )
    return line + (f"; {t.streams} x {t.fps:g} FPS asked: {t.status}" if t.asked else "")


def memory_line(m: ResidentMemory) -> str:
    """``memory: the split plan's accelerator units need X MiB at batch B (3 contexts a unit) of 4096 MiB; the
    largest batch that fits: K (report.md)``, with ``: runs as sub-batches of K`` where B does not fit."""
    contexts = {u.residency.contexts for _, u in m.units}
    held = f" ({max(contexts)} contexts a unit)" if max(contexts) > 1 else ""
    over = f": runs as sub-batches of {m.runs_at}" if m.batch_fit < m.batch else ""
    return (
        f"memory: the split plan's accelerator units need {m.need_at(m.batch) / 2**20:.1f} MiB at batch {m.batch}"
        f"{held} of {m.budget_bytes / 2**20:.0f} MiB{over}; the largest batch that fits: {m.batch_fit} (report.md)"
    )


def conditions_line(r: DeployReport) -> str:
    """``night 80.6 % (fails drift), blur 99.0 %, ...``: the split's boxes kept under each condition judged."""
    parts = []
    for name, by in r.conditions.items():
        j = by.get("split")
        if j is None or j.kept is None:
            parts.append(f"{name} not judged")
            continue
        verdict = status(j.verdict(r.limits.max_drift))
        parts.append(f"{name} {j.kept.kept / max(1, j.kept.of):.1%}" + ("" if verdict == OK else f" ({verdict})"))
    return ", ".join(parts) + " (report.md)"
