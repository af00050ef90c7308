"""The conditions judged with an image's detectors on a thread each, against one after the other (issue #58: trials
in parallel where the machine has the cores). The demo is deployed to each profile (its conditions off, to spend
the time on what is measured here), then its bundle's FP32 reference and its plan twice (two detectors of their own,
as deploy judges the split and the design card's layout) are judged under the shipped conditions on the first
``--images`` judging images, on every image: one after the other, on a thread each (up to a thread per core), and
as the default does (the faster of the two on the first images, measured), in turn, ``--rounds`` times. Prints the
wall times, the speed-ups, and whether the figures are the same (they must be: ``tests/test_verdict.py`` checks it
too).

    YOLO_OFFLINE=1 python benchmarks/conditions_threads.py [--device host-lowp rk3588 ethos-u55] [--images 50]

A simulated board's plan runs on this host (its numerics backend), so its time here is the host's, not the board's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from yolo_edge.bundle.opened import load_bundle  # noqa: E402
from yolo_edge.core.config import load_deploy_config  # noqa: E402
from yolo_edge.core.host import cpu_name  # noqa: E402
from yolo_edge.core.progress import progress_bar  # noqa: E402
from yolo_edge.flows.deploy import DeployRequest, deploy  # noqa: E402
from yolo_edge.flows.val import bundle_eval_data  # noqa: E402
from yolo_edge.validate.conditions import CONDITIONS, first_images, judge_under  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", nargs="+", default=["host-lowp", "rk3588", "ethos-u55"])
    ap.add_argument("--images", type=int, default=50, help="judging images per condition")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    print(f"CPU: {cpu_name()}, {cores} cores; {len(CONDITIONS)} conditions on {args.images} images each\n")
    base = load_deploy_config()
    cfg = replace(base, validate=replace(base.validate, conditions=()))
    rows, code = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for device in args.device:
            out = Path(tmp) / device
            deploy(DeployRequest(device=device, config=cfg), out=out, quiet=True)
            bundle = load_bundle(out)
            ev = first_images(bundle_eval_data(bundle), args.images)
            conditions = tuple(CONDITIONS)
            every = replace(
                bundle.config,
                plan=replace(bundle.config.plan, search_looks=()),
                validate=replace(bundle.config.validate, conditions=conditions),
            )
            times: dict[str, list[float]] = {"one after the other": [], "a thread each": [], "measured": []}
            figures = []
            with (
                bundle.reference_detector() as reference,
                bundle.detector(as_placed=True) as deployed,
                bundle.detector(as_placed=True) as beside,
            ):
                plans = {"deployed": deployed, "beside": beside}  # two plans, as deploy judges the split and the card
                for _ in range(args.rounds):
                    for how, threads in zip(times, (False, True, None)):
                        t0 = time.perf_counter()
                        judged = judge_under(reference, plans, ev, every, progress_bar(False), threads)
                        times[how].append(time.perf_counter() - t0)
                        figures.append({c: {p: j.to_dict() for p, j in by.items()} for c, by in judged.items()})
            same = all(f == figures[0] for f in figures)
            code |= 0 if same else 1
            serial, threaded, measured = (statistics.median(t) for t in times.values())
            rows.append(
                f"| {device} | {serial:.1f} | {threaded:.1f} | {serial / threaded:.2f}x | {measured:.1f} "
                f"| {serial / measured:.2f}x | {'yes' if same else 'NO'} |"
            )
    print(f"Median of {args.rounds} rounds, seconds (the reference and the plan twice under every condition):\n")
    print(
        "| profile | one after the other | a thread each | speed-up | the faster of the two, measured (the default) "
        "| speed-up | same figures |"
    )
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return code


if __name__ == "__main__":
    import results_page

    with results_page.page("conditions-threads", "Conditions judged on a thread per detector"):
        code = main()
    raise SystemExit(code)
