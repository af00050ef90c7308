"""Deploy's per-condition table (issue #54): the demo and the second model deployed with the shipped conditions, each
row (condition x plan) with its drift interval and boxes kept, then the same deploy with
``validate.calibrate_conditions`` to show what calibrating on changed images changes.

    YOLO_OFFLINE=1 python benchmarks/conditions.py [--device host-lowp] [--images 100] [--no-calibrated]

The demo is judged on the demo's val split, the second model on 160 labelled photos of its classes (both mAP vs
labels). The CPU first; then per model and calibration the deploy's wall time, the chosen plan, and the
table report.md shows.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.second_model import SECOND_CLASSES, SECOND_MODEL  # noqa: E402
from yolo_edge.core.config import load_deploy_config  # noqa: E402
from yolo_edge.core.host import cpu_name  # noqa: E402
from yolo_edge.demo.shapes import write_dataset  # noqa: E402
from yolo_edge.flows.deploy import DeployRequest, deploy  # noqa: E402
from yolo_edge.flows.report import DeployReport  # noqa: E402


def rows(report: DeployReport) -> list[str]:
    out = []
    for name, by in report.conditions.items():
        if not by:
            out.append(f"  {name:<13}not judged: the FP32 reference detects nothing under it (no labels)")
        for plan, j in by.items():
            i = j.drift_interval
            bounds = "" if i is None else f" [{i.lo.map50:+.4f}, {i.hi.map50:+.4f}]"
            kept = "" if j.kept is None else f"{j.kept} ({j.kept.kept / max(1, j.kept.of):.1%})"
            verdict = j.verdict(report.limits.max_drift) or ["ok"]
            out.append(
                f"  {name:<13}{plan:<12}{j.reference.map50:>9.4f}{j.deployed.map50:>9.4f}  "
                f"{j.drift.map50:+.4f}{bounds:<20}  {kept:<16}{', '.join(verdict)}"
            )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="host-lowp")
    ap.add_argument("--images", type=int, default=100, help="judging images per condition")
    ap.add_argument("--no-calibrated", action="store_true", help="skip the deploys calibrated with the conditions")
    args = ap.parse_args()
    print(f"CPU: {cpu_name()}, {len(os.sched_getaffinity(0))} cores; device {args.device}")
    base = load_deploy_config()
    with tempfile.TemporaryDirectory() as tmp:
        photos = Path(tmp) / "photos"
        labelled = write_dataset(photos, seed=11, sizes={"val": 160}, classes=SECOND_CLASSES)
        models = {"demo": (None, None), "second model": (str(SECOND_MODEL), labelled)}
        for label, (model, data) in models.items():
            for calibrated in (False, True)[: 1 if args.no_calibrated else 2]:
                cfg = replace(
                    base,
                    validate=replace(base.validate, conditions_images=args.images, calibrate_conditions=calibrated),
                )
                out = Path(tmp) / f"{label}-{calibrated}"
                result = deploy(
                    DeployRequest(model=model, device=args.device, data=data, config=cfg), out=out, quiet=True
                )
                r = result.report
                how = f"calibrated with {', '.join(r.calibrated_conditions)}" if calibrated else "calibrated as given"
                drift = 0.0 if r.chosen.drift is None else r.chosen.drift.map50
                print(
                    f"\n{label}, {how}: deploy {r.wall_s:.0f} s, chosen {r.chosen.name} ({r.placement.label}), "
                    f"{r.chosen.status}; {r.metric}50 drift as given {drift:+.4f}; the split judged under the "
                    f"conditions: {r.split_plan.label}"
                )
                if not r.conditions:
                    print("  nothing on the accelerator: no condition judged")
                    continue
                i = next((j.drift_interval for by in r.conditions.values() for j in by.values()), None)
                level = f"{i.level:.0%} " if i else ""
                print(
                    f"  {'condition':<13}{'plan':<12}{'FP32':>9}{'plan':>9}  drift ({level}interval){'':<8}boxes kept"
                )
                print("\n".join(rows(r)), flush=True)
    return 0


if __name__ == "__main__":
    import results_page

    with results_page.page("conditions", "Conditions the calibration never saw"):
        code = main()
    raise SystemExit(code)
