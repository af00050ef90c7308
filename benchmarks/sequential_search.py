"""Sequential judging against judging every candidate on every image (issue #58): the demo and the second model
deployed to each profile twice, one after the other, with ``plan.search_looks`` as shipped and with ``[]`` (the serial,
full-sample search), the conditions off in both (they judge the chosen plan, not the choice). Prints per model and
profile both chosen placements and whether they agree, the three plans' statuses and p95 both ways, the judging
images the search scored, and both deploys' wall times.

    YOLO_OFFLINE=1 python benchmarks/sequential_search.py [--device host-lowp sim-edge-npu rk3588] [--model demo second]

The demo is judged on its 300 labelled val images, the second model on 160 labelled photos of its classes. On a
measured profile (host-lowp) each deploy times its candidates on this machine, so a near-tie can fall either way
between two deploys whatever the search does; a simulated board's latency is the board's and the same every run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.second_model import SECOND_CLASSES, SECOND_MODEL  # noqa: E402
from yolo_edge.core.config import load_deploy_config  # noqa: E402
from yolo_edge.core.host import cpu_name  # noqa: E402
from yolo_edge.demo.shapes import write_dataset  # noqa: E402
from yolo_edge.flows.deploy import DeployRequest, deploy  # noqa: E402
from yolo_edge.flows.report import DeployReport  # noqa: E402

HEADER = (
    "| model | profile | same split plan | same chosen plan | images scored (seq / serial) | deploy s (seq / serial) |"
)


def plans(report: DeployReport) -> str:
    return ", ".join(
        f"{p.name} {p.status} {'-' if p.latency is None else f'{p.latency.end_to_end.p95:.2f}'}" for p in report.plans
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", nargs="+", default=["host-lowp", "sim-edge-npu", "rk3588"])
    ap.add_argument("--model", nargs="+", choices=["demo", "second"], default=["demo", "second"])
    args = ap.parse_args()
    print(f"CPU: {cpu_name()}, {len(os.sched_getaffinity(0))} cores\n")
    base = load_deploy_config()
    rows, agree = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        photos = write_dataset(Path(tmp) / "photos", seed=11, sizes={"val": 160}, classes=SECOND_CLASSES)
        models = {"demo": (None, None), "second": (str(SECOND_MODEL), photos)}
        for label in args.model:
            model, data = models[label]
            for device in args.device:
                found: dict[str, tuple[DeployReport, float]] = {}
                for how, looks in (("sequential", base.plan.search_looks), ("serial", ())):
                    cfg = replace(
                        base,
                        plan=replace(base.plan, search_looks=looks),
                        validate=replace(base.validate, conditions=()),
                    )
                    t0 = time.perf_counter()
                    out = Path(tmp) / f"{label}-{device}-{how}"
                    request = DeployRequest(model=model, device=device, data=data, config=cfg)
                    found[how] = deploy(request, out=out, quiet=True).report, time.perf_counter() - t0
                (seq, seq_s), (full, full_s) = found["sequential"], found["serial"]
                same = seq.split_plan.key == full.split_plan.key
                agree += same
                scored = [sum(t.images for t in r.search.trials) for r in (seq, full)]
                print(f"### {label} on {device}\n")
                print(f"- sequential: {seq.split_plan.label}; {plans(seq)}; chosen {seq.chosen.name}")
                print(f"- serial:     {full.split_plan.label}; {plans(full)}; chosen {full.chosen.name}")
                print(f"- judging images scored: {scored[0]} sequential, {scored[1]} serial\n")
                rows.append(
                    f"| {label} | {device} | {'yes' if same else 'no'} | "
                    f"{'yes' if seq.chosen.name == full.chosen.name else 'no'} | {scored[0]} / {scored[1]} | "
                    f"{seq_s:.0f} / {full_s:.0f} |"
                )
    print(HEADER)
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\nThe same split plan in {agree} of {len(rows)}.")
    return 0


if __name__ == "__main__":
    import results_page

    with results_page.page("sequential-search", "Sequential judging against every candidate on every image"):
        code = main()
    raise SystemExit(code)
