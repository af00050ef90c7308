"""``yolo-edge sweep --model a.pt b.pt --imgsz 320 640 --device rk3588 host-lowp --data D --sla-ms 50``: every
configuration of the grid deployed and proven on Ray (local unless --ray-address), ranked: what meets the SLA and
the drift limit first, by the objective (the fastest median by default); the Pareto front of latency against
drift; the best configuration.

Exit code 0 when some configuration meets the SLA at no more drift than the limit, 1 when none does, 2 on bad input.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from yolo_edge.cli.common import positive_float, positive_int, print_json, ray_address, table
from yolo_edge.core.files import atomic_write, check_can_write
from yolo_edge.flows.sweep import FAILED, OBJECTIVES, SweepRequest, SweepResult, sweep, sweep_plot
from yolo_edge.model.meta import demo_model_path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep", help="which model, size and device meet the SLA (a deployment sweep on Ray)", description=__doc__
    )
    p.add_argument("--model", nargs="+", default=None, help=".pt, .yaml or .onnx models (default: the demo model)")
    p.add_argument("--imgsz", nargs="+", type=positive_int, default=[320], help="input sizes (default: 320)")
    p.add_argument("--device", nargs="+", default=["cpu", "host-lowp"], help="device profiles (default: cpu host-lowp)")
    p.add_argument(
        "--objective", choices=OBJECTIVES, default="latency",
        help="what ranks the configurations that pass: latency (median, default), drift or memory",
    )  # fmt: skip
    p.add_argument("--data", default=None, help="as deploy's --data, for every model (default: the demo's)")
    p.add_argument("--config", default=None, help="deploy settings for every configuration (default: shipped)")
    p.add_argument("--sla-ms", type=positive_float, default=None, help="p95 latency limit (default: config)")
    p.add_argument("--keep", type=Path, default=None, help="keep each configuration's bundle in a folder here")
    p.add_argument("--cache", default=None, help="outcome cache folder (default: the user cache; '' for none)")
    what = "an existing Ray cluster, host:port (default: Ray on this machine)"
    p.add_argument("--ray-address", type=ray_address, default=None, help=what)
    p.add_argument("--workers", type=positive_int, default=None, help="local Ray CPUs (default: all)")
    p.add_argument("--retries", type=int, default=2, help="re-runs of a configuration whose worker dies (default 2)")
    p.add_argument("--no-ray", action="store_true", help="one configuration after the other, in this process")
    p.add_argument("--plot", type=Path, default=None, help="write the Pareto front (latency vs drift) as a PNG")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.plot:
        check_can_write(args.plot, "--plot")
    request = SweepRequest(
        args.model or [str(demo_model_path())],
        args.imgsz,
        args.device,
        data=args.data,
        config=args.config,
        sla_ms=args.sla_ms,
        objective=args.objective,
        cache=args.cache,
        keep=args.keep,
    )
    result = sweep(request, args.ray_address, args.workers, use_ray=not args.no_ray, retries=max(0, args.retries))
    if args.plot:
        atomic_write(args.plot, sweep_plot(result))
    if args.json:
        print_json(result.to_dict())
    else:
        print(render(result))
    return 0 if result.best is not None else 1


def render(result: SweepResult) -> str:
    """The ranked table, the front and the best configuration, as the terminal shows them."""
    front = {o.point for o in result.front}
    rows = []
    for o in result.ranked:
        drift = "-" if o.drift_map50_95 is None else f"{o.drift_map50:+.4f} / {o.drift_map50_95:+.4f}"
        p = "-" if o.p95_ms is None else f"{o.p50_ms:.2f} / {o.p95_ms:.2f} / {o.p99_ms:.2f}"
        status = o.status if o.status != FAILED else f"failed: {o.error}"
        rows.append(
            (
                o.point.label,
                status,
                o.chosen or "-",
                p,
                o.latency_kind or "-",
                drift,
                "-" if o.boxes_of is None else f"{o.boxes_kept}/{o.boxes_of}",
                "*" if o.point in front else "",
                "cache" if o.cached else "deployed",
            )
        )
    head = ("configuration", "status", "plan", "p50/p95/p99 ms", "latency", "drift 50 / 50-95", "boxes kept", "front",
            "from")  # fmt: skip
    best = result.best
    last = (
        f"best ({result.objective}): {best.point.label} ({best.placement})"
        if best
        else f"nothing meets the SLA {result.sla_ms} ms within the drift limit {result.max_drift}"
    )
    return table(head, rows) + "\n" + last
