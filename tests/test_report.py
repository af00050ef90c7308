"""The report a person reads: report.md says what report.json says (statuses, the data and how accuracy
was measured, the placement with its INT8 schemes, phases, fallback events), and the plots are real images."""

from __future__ import annotations

from dataclasses import replace

import cv2
import numpy as np

from yolo_edge.deploy import DeployResult
from yolo_edge.report import markdown, plots


def test_markdown_says_what_the_json_says(deployed: DeployResult) -> None:
    report = deployed.report
    md, r = markdown(report), report.to_dict()
    assert f"Verdict: **{r['verdict'].upper()}**" in md and f"measured on {r['host_cpu']}" in md
    for p in r["plans"]:
        assert f"| {p['name']} | {p['status']} |" in md
    assert "| drift mAP50 | drift mAP50-95 |" in md and "mAP vs labels" in md and "Warning" not in md
    for s in r["placement"]["subgraphs"]:
        variant = "/".join(p for p in (s["precision"], s["int8_scheme"], s["quantizer"]) if p)
        variant += f"+{len(s['kept_layers'])}" if s["kept_layers"] else ""
        assert f"| {s['name']} | {s['device']} | {variant} |" in md
    for t in r["search"]["trials"]:  # every candidate judged, with its status
        assert f"| {t['index']}" in md and f"| {t['placement']} | {t['why']} |" in md and f"| {t['status']} |" in md
    chosen = next(p for p in r["plans"] if p["name"] == r["chosen_plan"])
    assert all(f"| {phase} |" in md for phase in chosen["latency"]["phases"])
    assert f"{r['fallback_events']['total']} events." in md


def test_a_report_is_data_that_outlives_its_deploy(deployed: DeployResult) -> None:
    """The report keeps what the search found, not the detectors and sessions it opened (closed with the deploy):
    it pickles, and comes back saying the same."""
    import pickle

    again = pickle.loads(pickle.dumps(deployed.report))
    assert again.to_dict() == deployed.report.to_dict() and markdown(again) == markdown(deployed.report)


def test_agreement_and_a_warning_change_the_words(deployed: DeployResult) -> None:
    report = deployed.report
    unlabelled = replace(report, data=replace(report.data, labelled=False, warning="no --data: ..."))
    md = markdown(unlabelled)
    assert "| drift agreement50 | drift agreement50-95 |" in md and "> **Warning:** no --data" in md
    assert unlabelled.to_dict()["map"]["kind"] == "agreement"


def test_plots_are_images_with_content(deployed: DeployResult) -> None:
    for name, data in plots(deployed.report).items():
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        assert image is not None and image.shape[0] > 200 and image.std() > 10, name
