"""The plan search judges candidates with the verdict, and layer-level mixed precision rescues a unit.

The model is the demo with one layer made sensitive to INT8 by construction, exactly as a user's model can
be: the neck's ``/model.16/conv/Conv`` reads one extra input channel holding 10000 everywhere, with zero
weights, so its FP32 output is unchanged while its activations' INT8 range (0 .. 10000) leaves no codes for
the real ones. Keeping that one convolution out of INT8 repairs the neck; nothing else does. The profile
is a simulated INT8 accelerator (numerics from OpenVINO, latency modelled), so the order of the candidates
is the cost model's on any CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import yaml
from onnx import helper, numpy_helper

from yolo_edge.backends import cpu_backend
from yolo_edge.core.config import DeployConfig, Variant, configs_dir, load_profile
from yolo_edge.flows.deploy import DeployRequest, deploy
from yolo_edge.flows.report import trial_dict
from yolo_edge.flows.search import SearchRecord, Trial, fastest_passing
from yolo_edge.model.meta import ExportedModel, load_onnx
from yolo_edge.model.split import split_model
from yolo_edge.pipeline.preprocess import default_calib_dir, load_calibration
from yolo_edge.plan.planner import plan_space

SENSITIVE = "/model.16/conv/Conv"


def _with_an_outlier_channel(model: onnx.ModelProto, conv: str) -> onnx.ModelProto:
    """``model`` whose ``conv`` also reads a constant channel of 10000 through zero weights: the same FP32 output,
    an INT8 activation range no real activation fits in."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    node = next(n for n in graph.node if n.name == conv)
    inits = {t.name: t for t in graph.initializer}
    weight = numpy_helper.to_array(inits[node.input[1]])
    wide = np.concatenate([weight, np.zeros((weight.shape[0], 1, *weight.shape[2:]), weight.dtype)], axis=1)
    graph.initializer.remove(inits[node.input[1]])
    base = conv.removesuffix("/Conv") + "/outlier"
    graph.initializer.extend(
        [
            numpy_helper.from_array(wide, node.input[1]),
            numpy_helper.from_array(np.array([0], np.int64), f"{base}/starts"),
            numpy_helper.from_array(np.array([1], np.int64), f"{base}/ends"),
            numpy_helper.from_array(np.array([1], np.int64), f"{base}/axes"),
            numpy_helper.from_array(np.array(1e4, np.float32), f"{base}/scale"),
        ]
    )
    x = node.input[0]
    added = [  # one real channel of the input, times 10000: an activation, not a constant
        helper.make_node(
            "Slice", [x, f"{base}/starts", f"{base}/ends", f"{base}/axes"], [f"{base}/one"], f"{base}/Slice"
        ),
        helper.make_node("Mul", [f"{base}/one", f"{base}/scale"], [f"{base}/big"], f"{base}/Mul"),
        helper.make_node("Concat", [x, f"{base}/big"], [f"{base}/wide"], f"{base}/Concat", axis=1),
    ]
    at = list(graph.node).index(node)
    for k, extra in enumerate(added):
        graph.node.insert(at + k, extra)
    node.input[0] = f"{base}/wide"
    return out


@pytest.fixture(scope="module")
def sensitive(demo: ExportedModel, tmp_path_factory: pytest.TempPathFactory) -> ExportedModel:
    path = tmp_path_factory.mktemp("sensitive") / "demo_sensitive.onnx"
    onnx.save(_with_an_outlier_channel(demo.load(), SENSITIVE), str(path))
    model = load_onnx(path)
    image = load_calibration(default_calib_dir(), model.meta.imgsz, 1)[0]
    got = cpu_backend().compile(model.load(), "fp32").run({"images": image})["output0"]
    want = cpu_backend().compile(demo.load(), "fp32").run({"images": image})["output0"]
    assert np.abs(got - want).max() <= 1e-3  # the same detector in FP32
    return model


@pytest.fixture(scope="module")
def int8_npu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A simulated INT8-only accelerator: sim-edge-npu with one INT8 variant (u8, NNCF) and no FP16."""
    profile = yaml.safe_load((configs_dir() / "devices" / "sim-edge-npu.yaml").read_text())
    profile.update(name="sim-int8", precisions=["int8"], peak_tops={"int8": 6.0, "fp32": 0.75})
    profile["runtime_options"].update(int8_activations="u8", int8_quantizer="nncf")
    path = tmp_path_factory.mktemp("profile") / "sim-int8.yaml"
    path.write_text(yaml.safe_dump(profile))
    return path


def test_a_unit_failing_only_on_precision_keeps_its_most_sensitive_layer(
    sensitive: ExportedModel, int8_npu: Path, fast_cfg: DeployConfig
) -> None:
    """The neck fails the precision check at INT8, by NNCF, by NNCF with min-max ranges and by the QDQ recipe
    (OpenVINO's other quantizers, tried first: the outlier breaks all three); ranked by OpenVINO's per-layer error,
    the convolution with the outlier comes first, and with it alone kept in FP32 the neck passes: the plan names the
    layer and why."""
    images = load_calibration(default_calib_dir(), sensitive.meta.imgsz, 16)
    space, planner = plan_space(split_model(sensitive), load_profile(int8_npu), fast_cfg, images)
    planner.close()
    neck = [o for o in space.options["neck"] if o.device == "npu"]
    tried = [Variant("int8", "u8", q) for q in ("nncf", "nncf-minmax", "qdq")]  # min-max ranges keep the outlier too
    assert [r.variant for r in space.rejected["neck"]] == tried
    assert all("failed precision" in r.reason for r in space.rejected["neck"])
    assert len(neck) == 1 and neck[0].variant == Variant("int8", "u8", "nncf", (SENSITIVE,))
    assert neck[0].granularity == "layer" and SENSITIVE in neck[0].kept_why and "failed precision" in neck[0].kept_why
    assert neck[0].checks["precision"].passed
    backbone = [o.variant for o in space.options["backbone"] if o.device == "npu"]
    assert backbone == [Variant("int8", "u8", "nncf")]  # nothing kept where nothing fails
    doc = space.candidates()[0].to_dict()
    assert next(s for s in doc["subgraphs"] if s["name"] == "neck")["kept_layers"] == [SENSITIVE]  # type: ignore[index]


def _deploy(model: ExportedModel, profile: Path, small_cfg: Path, data: Path, tmp_path: Path, **plan: float):  # type: ignore[no-untyped-def]
    """Deploy ``model`` with a precision check that lets anything finite through (the verdict must catch it) and
    the ``plan`` settings given."""
    cfg = yaml.safe_load(small_cfg.read_text())
    cfg["checks"]["precision"].update(min_cosine=0.0, max_flips=1.0)
    cfg["plan"]["head_on_npu"] = "never"  # the drift is planted in the neck: the head stays out of the candidates
    cfg["plan"].update(plan)
    path = tmp_path / "lenient.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return deploy(
        DeployRequest(model=model.path, device=str(profile), data=data, config=path), out=tmp_path / "b", quiet=True
    )


def test_a_candidate_failing_drift_is_followed_by_the_next_fastest_which_is_chosen(
    sensitive: ExportedModel, int8_npu: Path, small_cfg: Path, small_val: Path, tmp_path: Path
) -> None:
    """The fastest candidate (backbone and neck at INT8) passes the checks and fails drift on the labels. Judged
    alone, the backbone passes and the neck fails: every candidate with the neck at that variant is dropped, the
    neck is tried at the backend's stronger quantizers (NNCF with min-max ranges, then the QDQ recipe), which fail
    too, and the next fastest, the backbone alone, is deployed. Every candidate judged is in the report, in order."""
    result = _deploy(sensitive, int8_npu, small_cfg, small_val, tmp_path, max_kept_layers=0)
    search = result.report.search
    trials = [(t.plan.label, t.why, t.run.status) for t in search.trials]
    assert search.trials[0].plan.npu_subgraphs == ["backbone", "neck"] and "drift" in search.trials[0].run.fails
    assert search.trials[1].plan.npu_subgraphs == ["backbone"] and search.trials[2].plan.npu_subgraphs == ["neck"]
    assert "drift" in search.trials[2].run.fails, trials
    necks = [t.plan["neck"].variant.quantizer for t in search.trials if t.plan["neck"].device == "npu"]
    assert necks.index("nncf-minmax") < necks.index("qdq") and necks[0] == "nncf", trials  # stronger, in order
    assert all("drift" in t.run.fails for t in search.trials if t.plan["neck"].device == "npu"), trials
    assert search.chosen is search.trials[1] and search.trials[1].why == "sensitivity: backbone alone at int8/u8/nncf"
    assert result.report.split_plan.npu_subgraphs == ["backbone"]  # deployed if it beats whole-cpu on this host
    neck = result.report.split_plan["neck"]
    assert "the verdict rejected it on the accelerator (drift): int8/u8/nncf in candidate 1" in neck.reason
    doc = result.report.to_dict()["search"]
    assert [t["status"] for t in doc["trials"]] == [t[2] for t in trials] and doc["chosen"] == 2
    md = (result.bundle / "report.md").read_text()
    assert "## Search" in md and all(f"| {t[0]} | {t[1]} |" in md for t in trials)
    assert (result.bundle / "plots" / "search.png").stat().st_size > 1000


def test_a_subgraph_blamed_for_drift_is_relaxed_by_keeping_its_most_sensitive_layer(
    sensitive: ExportedModel, int8_npu: Path, small_cfg: Path, small_val: Path, tmp_path: Path
) -> None:
    """As above, but where the stronger quantizers fail drift too, the neck's INT8 is retried with its most
    sensitive layer (by OpenVINO's per-layer error) kept in FP32: backbone INT8 with that neck is judged next and
    passes. Of what passed, the fastest as measured is deployed; the plan names the kept layer and why."""
    result = _deploy(sensitive, int8_npu, small_cfg, small_val, tmp_path)
    search = result.report.search
    trials = [(t.plan.label, t.why, t.run.status) for t in search.trials]
    assert "drift" in search.trials[0].run.fails
    relaxed = next(t for t in search.trials if t.plan["neck"].variant.kept)
    before = [t for t in search.trials if t.index < relaxed.index and t.plan["neck"].device == "npu"]
    assert {t.plan["neck"].variant.quantizer for t in before} == {"nncf", "nncf-minmax", "qdq"}, trials
    assert relaxed.plan["backbone"].device == "npu" and relaxed.plan["neck"].variant.kept == (SENSITIVE,)
    assert relaxed.passed and relaxed.why == "the fastest candidate left", trials
    fastest = min((t for t in search.trials if t.passed), key=lambda t: t.speed_ratio or 0.0)
    assert search.chosen is fastest_passing(search.trials, 0.05)
    assert search.chosen.speed_ratio <= fastest.speed_ratio * 1.05 + 2 * (search.chosen.ratio_se + fastest.ratio_se)
    assert result.report.split_plan.key == search.chosen.plan.key
    neck = relaxed.plan["neck"]
    blamed = max(t.index for t in before if t.plan.npu_subgraphs == ["neck"])
    assert neck.granularity == "layer" and SENSITIVE in neck.kept_why, neck.kept_why
    assert f"failed drift (candidate {blamed})" in neck.kept_why, (neck.kept_why, trials)


def test_the_search_stops_at_its_budget(
    sensitive: ExportedModel, int8_npu: Path, small_cfg: Path, small_val: Path, tmp_path: Path
) -> None:
    """A budget of one candidate: the first fails drift, nothing else is judged, and the verdict says so."""
    cfg = yaml.safe_load(small_cfg.read_text())
    cfg["checks"]["precision"].update(min_cosine=0.0, max_flips=1.0)
    cfg["plan"]["search_candidates"] = 1
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(cfg))
    result = deploy(
        DeployRequest(model=sensitive.path, device=str(int8_npu), data=small_val, config=path),
        out=tmp_path / "b",
        quiet=True,
    )
    search = result.report.search
    assert len(search.trials) == 1 and search.chosen is None and "budget: 1 candidates" in search.stopped
    assert result.report.chosen.name == "whole-cpu"  # the reference, since no candidate passed
    assert result.report.plans[2].status.startswith("fails drift")


def test_candidates_estimated_within_the_margin_are_judged_and_the_measured_median_picks(
    demo: ExportedModel, int8_npu: Path, small_cfg: Path, small_val: Path, tmp_path: Path
) -> None:
    """With ``plan.search_margin: 1.0`` a candidate that passes does not end the search: those estimated less
    than twice its time are judged too, fastest estimate first, and the fastest by measured median is chosen."""
    result = _deploy(demo, int8_npu, small_cfg, small_val, tmp_path, max_kept_layers=0, search_margin=1.0)
    search = result.report.search
    first = next(t for t in search.trials if t.passed)
    later = search.trials[first.index :]
    assert later, [(t.plan.label, t.run.status) for t in search.trials]
    assert all(t.estimated_ms < 2 * first.estimated_ms for t in later)
    fastest = min((t for t in search.trials if t.passed), key=lambda t: t.speed_ratio or 0.0)
    assert search.chosen is fastest_passing(search.trials, 0.05)
    assert search.chosen.speed_ratio <= fastest.speed_ratio * 1.05 + 2 * (search.chosen.ratio_se + fastest.ratio_se)
    assert "plan.search_margin 100%" in search.stopped or search.stopped == "a candidate passed"
    for t in search.trials:  # the units each ran: consecutive subgraphs at one device and variant fused into one
        labels = [t.plan[name].label for name in ("backbone", "neck", "head")]
        assert "+".join(u.split("=")[0] for u in t.units).split("+") == ["backbone", "neck", "head"], t.units
        assert len(t.units) == 1 + sum(a != b for a, b in zip(labels, labels[1:])), (labels, t.units)
        assert trial_dict(t)["units"] == list(t.units)


def test_a_near_tie_goes_to_the_plan_with_less_at_low_precision_and_a_clear_win_to_the_faster() -> None:
    """Passing plans measured within ``tie_margin`` of the fastest median, or within twice their noise, are a
    tie: the one with less at low precision wins it, so a loaded machine does not pick the plan; a plan faster
    by more than both wins outright, and a failed one never."""
    from types import SimpleNamespace

    judged = iter(range(1, 100))

    def trial(ratio: float, precisions: tuple[str, ...], se: float = 0.0, passed: bool = True) -> Trial:
        plan = SimpleNamespace(subgraphs=[SimpleNamespace(precision=p) for p in precisions])
        index = next(judged)
        return SimpleNamespace(passed=passed, speed_ratio=ratio, ratio_se=se, plan=plan, estimated_ms=1.0, index=index)  # type: ignore[return-value]

    int8_head = trial(0.40, ("int8", "int8", "bf16", "fp32"))
    card = trial(0.41, ("int8", "int8", "fp32", "fp32"))
    assert fastest_passing([int8_head, card], 0.05) is card  # 2.5 % apart: a tie, the card has less at low precision
    assert fastest_passing([int8_head, card], 0.0) is int8_head  # no margin, no noise: the faster
    noisy = trial(0.40, ("int8", "int8", "bf16", "fp32"), se=0.01)
    assert fastest_passing([noisy, card], 0.0) is card  # within twice the noise
    clear = trial(0.30, ("int8", "int8", "bf16", "fp32"), se=0.01)
    assert fastest_passing([clear, card], 0.05) is clear
    failed = trial(0.10, ("int8", "int8", "int8", "fp32"), passed=False)
    assert fastest_passing([failed, card], 0.05) is card
    assert fastest_passing([failed], 0.05) is None
    later = trial(0.40, ("int8", "int8", "fp32", "fp32"))  # as much at low precision, a tie: the first judged keeps it
    assert fastest_passing([card, later], 0.05) is card and fastest_passing([later, card], 0.05) is card


def test_the_best_plan_is_judged_again_with_its_accelerator_subgraphs_at_one_variant_one_unit() -> None:
    """The best passing plan runs backbone and neck INT8 s8 and the head BF16: three subgraphs timed apart, two
    units. Where the head also passed the checks at INT8 s8, the plan with all three at s8 (one unit, which no
    estimate sees) is judged too; not where that option was blamed for drift, nor with the CPU between them."""
    from types import SimpleNamespace

    from yolo_edge.flows.search import one_unit

    s8, u8, bf16, fp32 = Variant("int8", "s8", "nncf"), Variant("int8", "u8", "nncf"), Variant("bf16"), Variant("fp32")

    def sub(name: str, variant: Variant) -> Any:
        return SimpleNamespace(name=name, device="cpu" if variant == fp32 else "npu", variant=variant, cpu_nodes=())

    options = {
        "backbone": [sub("backbone", s8), sub("backbone", u8), sub("backbone", fp32)],
        "neck": [sub("neck", s8), sub("neck", u8), sub("neck", fp32)],
        "head": [sub("head", bf16), sub("head", s8), sub("head", fp32)],
        "decode": [sub("decode", fp32)],
    }

    def labels(best: list[Any], blamed: set[tuple[str, object]]) -> list[list[str]]:
        return [[s.variant.label for s in chosen] for chosen in one_unit(best, options, blamed)]

    best = [sub("backbone", s8), sub("neck", s8), sub("head", bf16), sub("decode", fp32)]
    assert labels(best, set()) == [["int8/s8/nncf"] * 3 + ["fp32"]]
    assert labels(best, {("head", ("npu", s8, ()))}) == []  # that head failed drift alone: not tried again
    apart = [sub("backbone", s8), sub("neck", fp32), sub("head", bf16), sub("decode", fp32)]
    assert labels(apart, set()) == []  # the CPU between them: no one unit
    kept = [sub("backbone", s8), sub("neck", Variant("int8", "s8", "nncf", ("/model.16/conv/Conv",))), sub("head", s8)]
    assert labels([*kept, sub("decode", fp32)], set()) == [["int8/s8/nncf"] * 3 + ["fp32"]]  # the neck's kept layer
    # an all-INT8 best whose subgraphs each passed at BF16 too: one BF16 unit is judged as well (on a CPU with AMX
    # it can be as fast, which the sum of three subgraphs timed apart does not show); not where one lacks it, nor
    # at another INT8 scheme they all passed at (no higher a precision than the plan's own)
    every = [sub("backbone", s8), sub("neck", s8), sub("head", s8), sub("decode", fp32)]
    options["head"].append(sub("head", u8))
    assert labels(every, set()) == [["int8/s8/nncf"] * 3 + ["fp32"]]  # itself (judged already): no other they all have
    for name in ("backbone", "neck"):
        options[name].insert(0, sub(name, bf16))
    assert labels(every, set()) == [["int8/s8/nncf"] * 3 + ["fp32"], ["bf16"] * 3 + ["fp32"]]
    assert labels(every, {("neck", ("npu", bf16, ()))}) == [["int8/s8/nncf"] * 3 + ["fp32"]]


def test_a_run_with_a_fallback_quantizer_asks_for_its_neighbours_at_it_to_make_one_unit() -> None:
    """The second model's head passes INT8 only by the fallback quantizer (QDQ) while backbone and neck passed at
    NNCF and were never checked at QDQ: those two are what the one-unit step must have checked first (a subgraph
    already holding the variant, a CPU subgraph and a first-quantizer variant ask for nothing)."""
    from types import SimpleNamespace

    from yolo_edge.flows.search import one_unit, unchecked

    s8, qdq, fp32 = Variant("int8", "s8", "nncf"), Variant("int8", "u8", "qdq"), Variant("fp32")

    def sub(name: str, variant: Variant) -> Any:
        return SimpleNamespace(name=name, device="cpu" if variant == fp32 else "npu", variant=variant, cpu_nodes=())

    options = {
        "backbone": [sub("backbone", s8), sub("backbone", fp32)],
        "neck": [sub("neck", s8), sub("neck", qdq), sub("neck", fp32)],
        "head": [sub("head", qdq), sub("head", fp32)],
        "decode": [sub("decode", fp32)],
    }
    best = [sub("backbone", s8), sub("neck", s8), sub("head", qdq), sub("decode", fp32)]
    assert unchecked(best, options, ("qdq",)) == [("backbone", qdq)]
    assert unchecked(best, options, ()) == []  # no fallback quantizer: nothing to ask
    first = [sub("backbone", s8), sub("neck", s8), sub("head", fp32), sub("decode", fp32)]
    assert unchecked(first, options, ("qdq",)) == []  # the neck's QDQ option asks for nothing: no unit runs at QDQ
    # a head that passed at both schemes of the fallback runs at the faster; the other is asked for too, and the
    # one-unit step tries the run at each (the one it runs at first): the slower scheme may fuse within the limit
    qdq_s8 = Variant("int8", "s8", "qdq")
    options["head"] = [sub("head", qdq_s8), sub("head", qdq), sub("head", fp32)]
    best = [sub("backbone", s8), sub("neck", s8), sub("head", qdq_s8), sub("decode", fp32)]
    asked = unchecked(best, options, ("qdq",))
    assert asked == [("backbone", qdq_s8), ("neck", qdq_s8), ("backbone", qdq)]
    for name, variant in asked:  # the planner checked them, and they passed
        options[name] = [sub(name, variant), *options[name]]
    fused = [[s.variant for s in chosen] for chosen in one_unit(best, options, set(), ("qdq",))]
    assert fused == [[qdq_s8] * 3 + [fp32], [qdq] * 3 + [fp32]]
    # without the fallback named, only the scheme it runs: u8 is no higher a precision than the plan's own INT8
    assert [[s.variant for s in c] for c in one_unit(best, options, set())] == [[qdq_s8] * 3 + [fp32]]


@pytest.mark.slow
def test_sequential_judging_chooses_what_judging_every_candidate_on_every_image_chooses(
    demo: ExportedModel, small_cfg: Path, tmp_path: Path
) -> None:
    """The demo on sim-edge-npu (latency modelled: the same on any machine), searched on its 300 judging images with
    near-ties judged (``plan.search_margin`` as shipped): sequentially (a quarter, then half, then all of them) and
    serially on every image (``search_looks: []``). The same plan is chosen, judged on every image both ways, with
    the same verdict; the sequential search scored fewer images, and says for each trial how many and why it
    stopped; a candidate that could not beat one that passed was timed, not judged."""
    from yolo_edge.flows.deploy import search_plan

    cfg = yaml.safe_load(small_cfg.read_text())
    cfg["plan"].update(search_margin=0.05, max_kept_layers=0)
    found = {}
    for name, looks in (("sequential", [0.25, 0.5]), ("serial", [])):
        cfg["plan"]["search_looks"] = looks
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        result = search_plan(DeployRequest(model=demo.path, device="sim-edge-npu", config=path))
        assert result.search is not None
        found[name] = result.search
    seq, serial = found["sequential"], found["serial"]
    rows = {k: [(t.plan.label, t.images, t.status) for t in s.trials] for k, s in found.items()}
    assert seq.chosen is not None and serial.chosen is not None, rows
    assert seq.chosen.plan.key == serial.chosen.plan.key, rows
    assert seq.chosen.images == serial.chosen.images == 300 and seq.chosen.run.status == serial.chosen.run.status
    assert seq.chosen.run.drift == serial.chosen.run.drift  # the same images, the same scorer: the same figure
    judged = [t for t in seq.trials if t.judged]
    assert all(t.images == 300 for t in serial.trials if t.judged), rows
    assert any(t.images < 300 for t in judged) and all(t.stopped for t in seq.trials), rows
    assert sum(t.images for t in judged) < sum(t.images for t in serial.trials), rows
    early = next(t for t in judged if t.images < 300)
    assert f"on {early.images} of 300 judging images" in early.stopped
    assert early.run.drift_interval is not None and early.run.drift_interval.images == early.images
    assert early.run.drift_interval.level > 0.9  # an earlier look judges at a wider interval
    for t in seq.trials:
        if not t.judged:
            assert t.status.startswith("not judged: cannot beat candidate") and not t.passed, rows


@pytest.mark.slow
def test_trials_sharded_on_ray_judge_as_in_the_deploys_process(
    demo: ExportedModel, int8_npu: Path, small_cfg: Path, small_val: Path
) -> None:
    """The search's judging images detected by two Ray actors (``--shards 2``, a local Ray), each building the
    trial's detector as the deploy does: the same candidates judged in the same order, the same drift to the last
    digit, the same choice as the search in one process."""
    from yolo_edge.flows.deploy import search_plan

    found = {}
    for shards in (None, 2):
        request = DeployRequest(model=demo.path, device=str(int8_npu), data=small_val, config=small_cfg, shards=shards)
        result = search_plan(request)
        assert result.search is not None
        found[shards] = result.search
    serial, sharded = found[None], found[2]

    def rows(search: SearchRecord) -> list[tuple[object, ...]]:
        return [(t.plan.key, t.images, t.status, t.run.drift, t.run.drift_interval) for t in search.trials]

    assert rows(sharded) == rows(serial) and any(t.judged for t in serial.trials)
    assert sharded.chosen is not None and serial.chosen is not None
    assert sharded.chosen.plan.key == serial.chosen.plan.key
