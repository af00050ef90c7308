"""Placement search at three granularities and the explainable PlacementPlan.

* whole graph: the full model on the NPU at the profile's first precision, checked like any subgraph
  (the safety-net comparison and the case study's first row);
* subgraph (the default): backbone and neck are NPU candidates, tried at each precision the profile
  lists, in order; head and decode stay on the CPU in FP32 (``plan.head_on_npu: auto`` makes the head
  a candidate too; decode always stays FP32);
* op level: when a candidate fails only on a few unsupported ops, its nodes are cut into NPU and CPU
  runs (connected groups in execution order, as onnxruntime's GetCapability partitions), kept only if
  the pieces plus their transfers beat running the subgraph on the CPU.

Example:
    >>> plan = plan_model(split, load_profile("sim-edge-npu"), load_deploy_config(), images)  # doctest: +SKIP
    >>> [(s.name, s.device, s.precision) for s in plan.subgraphs]  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import onnx

from yolo_edge.backends import cpu_backend, create_backend
from yolo_edge.backends.base import Backend, Executable, NpuCompileError, run_chain
from yolo_edge.config import PRECISION_BYTES, DeployConfig, DeviceProfile, Link
from yolo_edge.devices.cost import transfer_time
from yolo_edge.errors import YoloEdgeError
from yolo_edge.graph import GraphInfo
from yolo_edge.plan.checks import SENSITIVE_OPS, Candidate, Checker, CheckResult, first_failure, skipped, variant_label
from yolo_edge.plan.op_level import op_level_search
from yolo_edge.split import SplitModel

Log = Callable[[str], None]


@dataclass(frozen=True)
class SubgraphPlan:
    name: str
    device: str  # "npu" or "cpu"
    precision: str
    granularity: str  # "subgraph", "op" (some ops on the CPU) or "rule" (placed by a design rule)
    reason: str
    checks: dict[str, CheckResult]
    npu_ms: float | None
    cpu_ms: float
    latency_kind: str
    transfer_bytes_in: int = 0
    transfer_bytes_out: int = 0
    cpu_nodes: tuple[str, ...] = ()  # op level: the nodes that run on the CPU
    int8_scheme: str | None = None  # INT8 activations (u8 or s8) on the accelerator; None: not INT8

    @property
    def variant(self) -> str:
        """``int8/s8``, ``bf16``, ``fp32``: the precision with its INT8 scheme."""
        return variant_label(self.precision, self.int8_scheme)

    @property
    def latency_ms(self) -> float:
        return self.npu_ms if self.device == "npu" and self.npu_ms is not None else self.cpu_ms

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "device": self.device,
            "precision": self.precision,
            "int8_scheme": self.int8_scheme,
            "granularity": self.granularity,
            "reason": self.reason,
            "checks": {k: v.to_dict() for k, v in self.checks.items()},
            "latency_ms": {
                "npu": None if self.npu_ms is None else round(self.npu_ms, 3),
                "cpu": round(self.cpu_ms, 3),
                "chosen": round(self.latency_ms, 3),
                "kind": self.latency_kind,
            },
            "transfer_bytes_in": self.transfer_bytes_in,
            "transfer_bytes_out": self.transfer_bytes_out,
            "cpu_nodes": list(self.cpu_nodes),
        }


@dataclass(frozen=True)
class WholeGraphVerdict:
    """The whole model on the accelerator at its first precision: the safety-net comparison row."""

    passed: bool | None  # None: not evaluated (a hand-written plan)
    precision: str | None
    int8_scheme: str | None
    failed_check: str | None
    reason: str
    checks: dict[str, CheckResult]

    @property
    def required_bytes(self) -> int:
        """Device memory the whole graph needs (0 when the memory check did not run)."""
        mem = self.checks.get("memory")
        return int(mem.numbers.get("required_bytes") or 0) if mem else 0

    def to_dict(self) -> dict[str, object]:
        return {
            "passed": self.passed,
            "precision": self.precision,
            "int8_scheme": self.int8_scheme,
            "failed_check": self.failed_check,
            "reason": self.reason,
            "checks": {k: v.to_dict() for k, v in self.checks.items()},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WholeGraphVerdict:
        return cls(d["passed"], d["precision"], d["int8_scheme"], d["failed_check"], d["reason"], _checks(d["checks"]))


NOT_EVALUATED = WholeGraphVerdict(None, None, None, None, "not evaluated", {})


def _checks(d: dict[str, Any]) -> dict[str, CheckResult]:
    return {
        k: CheckResult(k, c["passed"], c["reason"], {n: v for n, v in c.items() if n not in ("passed", "reason")})
        for k, c in d.items()
    }


@dataclass(frozen=True)
class PlacementPlan:
    model: str
    device: str
    device_kind: str
    latency_kind: str
    imgsz: tuple[int, int]
    strict: bool
    whole_graph_npu: WholeGraphVerdict
    subgraphs: tuple[SubgraphPlan, ...]
    transfer_ms: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __getitem__(self, name: str) -> SubgraphPlan:
        return next(s for s in self.subgraphs if s.name == name)

    @property
    def estimated_ms(self) -> float:
        return sum(s.latency_ms for s in self.subgraphs) + self.transfer_ms

    @property
    def npu_subgraphs(self) -> list[str]:
        return [s.name for s in self.subgraphs if s.device == "npu"]

    @classmethod
    def manual(
        cls, split: SplitModel, npu: dict[str, str], device: str, latency_kind: str = "measured"
    ) -> PlacementPlan:
        """A hand-written plan: ``npu`` maps subgraph name -> precision (``int8/s8`` names an INT8 scheme);
        the rest run on the CPU in FP32. No check is run: the executor and benchmarks can start from it."""
        checks = {
            c: CheckResult(c, None, "not evaluated: hand-written plan")
            for c in ("op_support", "memory", "precision", "performance")
        }
        subs = []
        for sg in split.subgraphs:
            precision, _, scheme = npu.get(sg.name, "fp32").partition("/")
            subs.append(
                SubgraphPlan(
                    sg.name,
                    "npu" if sg.name in npu else "cpu",
                    precision,
                    "subgraph",
                    "hand-written",
                    checks,
                    None,
                    0.0,
                    latency_kind,
                    int8_scheme=scheme or None,
                )
            )
        return cls(
            str(split.exported.path),
            device,
            "manual",
            latency_kind,
            split.exported.meta.imgsz,
            False,
            NOT_EVALUATED,
            tuple(subs),
            0.0,
        )

    def all_cpu(self) -> PlacementPlan:
        """This plan with every subgraph on the CPU in FP32 (the whole-CPU reference and safety net)."""
        subs = tuple(
            replace(
                s,
                device="cpu",
                precision="fp32",
                granularity="rule",
                reason="whole graph on the CPU",
                npu_ms=None,
                cpu_nodes=(),
                transfer_bytes_in=0,
                transfer_bytes_out=0,
                int8_scheme=None,
            )
            for s in self.subgraphs
        )
        return replace(self, subgraphs=subs, transfer_ms=0.0)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PlacementPlan:
        subs = tuple(
            SubgraphPlan(
                name=s["name"],
                device=s["device"],
                precision=s["precision"],
                granularity=s["granularity"],
                reason=s["reason"],
                checks=_checks(s["checks"]),
                npu_ms=s["latency_ms"]["npu"],
                cpu_ms=s["latency_ms"]["cpu"],
                latency_kind=s["latency_ms"]["kind"],
                transfer_bytes_in=s["transfer_bytes_in"],
                transfer_bytes_out=s["transfer_bytes_out"],
                cpu_nodes=tuple(s["cpu_nodes"]),
                int8_scheme=s["int8_scheme"],
            )
            for s in d["subgraphs"]
        )
        return cls(
            model=d["model"],
            device=d["device"],
            device_kind=d["device_kind"],
            latency_kind=d["latency_kind"],
            imgsz=(int(d["imgsz"][0]), int(d["imgsz"][1])),
            strict=d["strict"],
            whole_graph_npu=WholeGraphVerdict.from_dict(d["whole_graph_npu"]),
            subgraphs=subs,
            transfer_ms=d["transfer_ms"],
            notes=tuple(d["notes"]),
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "device": self.device,
            "device_kind": self.device_kind,
            "latency_kind": self.latency_kind,
            "imgsz": list(self.imgsz),
            "strict": self.strict,
            "whole_graph_npu": self.whole_graph_npu.to_dict(),
            "subgraphs": [s.to_dict() for s in self.subgraphs],
            "estimated_latency_ms": round(self.estimated_ms, 3),
            "transfer_ms": round(self.transfer_ms, 3),
            "notes": list(self.notes),
        }


def boundary_tensors(
    split: SplitModel, images: Sequence[np.ndarray], exes: Sequence[Executable] | None = None
) -> list[dict[str, np.ndarray]]:
    """Every boundary tensor of every image from an FP32 CPU run of the subgraphs in sequence (``exes``: the
    subgraphs already compiled in FP32 on the CPU)."""
    if exes is None:
        cpu = cpu_backend()
        exes = [cpu.compile(sg.model, "fp32") for sg in split.subgraphs]
    return [run_chain(exes, {split.input.name: image}) for image in images]


def _rule(name: str, cfg: DeployConfig) -> str | None:
    """Why a design rule keeps subgraph ``name`` on the CPU in FP32, or None."""
    if name == "decode":
        return (
            "decode stays FP32 on the CPU: DFL softmax, dist2bbox and the box/score concat lose the class scores "
            "at low precision"
        )
    if name == "head" and cfg.plan.head_on_npu == "never":
        return "head on the CPU in FP32 by default (plan.head_on_npu: never)"
    return None


def _placed_by_rule(
    checker: Checker, cand: Candidate, rule: str, primary: str, cpu_ms: float, kind: str
) -> SubgraphPlan:
    """A subgraph a design rule keeps on the CPU, with the compile-time checks still reported."""
    sensitive = sorted({n.op_type for n in cand.info.nodes if n.op_type in SENSITIVE_OPS})
    precision = (
        CheckResult(
            "precision",
            False,
            f"{primary}: precision-sensitive ops {', '.join(sensitive)} and output0 at low precision",
            {"precision": primary},
        )
        if cand.name == "decode"
        else skipped("precision", "placed by rule")
    )
    checks = {
        "op_support": checker.op_support(cand),
        "memory": checker.memory(cand, primary),
        "precision": precision,
        "performance": skipped("performance", "placed by rule"),
    }
    return SubgraphPlan(cand.name, "cpu", "fp32", "rule", rule, checks, None, cpu_ms, kind)


class Planner:
    def __init__(
        self,
        split: SplitModel,
        profile: DeviceProfile,
        cfg: DeployConfig,
        images: Sequence[np.ndarray],
        log: Log | None = None,
        npu: Backend | None = None,
    ) -> None:
        if len(images) < 2:
            raise YoloEdgeError("planning needs at least 2 calibration images; pass --calib DIR with more images")
        self.split = split
        self.profile = profile
        self.cfg = cfg
        self.log = log or (lambda _msg: None)
        n_cal = min(cfg.calib_images, len(images) - 1)
        n_eval = min(cfg.checks.precision.images, len(images) - n_cal)
        self.log(f"running {len(images)} calibration images through the FP32 subgraphs")
        cpu = cpu_backend()
        self.fp32 = [cpu.compile(sg.model, "fp32") for sg in split.subgraphs]
        tensors = boundary_tensors(split, images, self.fp32)
        self.calib, self.eval = tensors[:n_cal], tensors[n_cal : n_cal + n_eval]
        self.checker = Checker(profile, cfg, npu or create_backend(profile))
        self.output_name = split.output.name

    def _candidate(
        self,
        name: str,
        model: onnx.ModelProto,
        inputs: Sequence[str],
        outputs: Sequence[str],
        cpu_inputs: int,
        cpu_outputs: int,
        transfers: int,
    ) -> Candidate:
        """``name`` is ``whole_graph`` or a subgraph: the subgraphs after it run in FP32 for the end-to-end check."""
        names = [sg.name for sg in self.split.subgraphs]
        later = self.fp32[names.index(name) + 1 :] if name in names else []
        return Candidate(
            name=name,
            model=model,
            info=GraphInfo.of(model),
            feeds_calib=[{n: t[n] for n in inputs} for t in self.calib],
            feeds_eval=[{n: t[n] for n in inputs} for t in self.eval],
            reference=[{n: t[n] for n in outputs} for t in self.eval],
            eval_tensors=self.eval,
            downstream=tuple(later),
            output_name=self.output_name,
            transfer_in_bytes=cpu_inputs,
            transfer_out_bytes=cpu_outputs,
            transfers=transfers,
        )

    def _variants(self, cand: Candidate, precision: str) -> tuple[list[str | None], str]:
        """What to try at ``precision``: the INT8 schemes fastest first (and how they were ordered), else one."""
        if precision != "int8":
            return [None], ""
        schemes, how = self.checker.int8_schemes(cand)
        return list(schemes), how

    @property
    def precisions(self) -> list[str]:
        """The profile's precisions that the accelerator's backend can really compute on this host."""
        return [p for p in self.profile.precisions if p in self.checker.npu.precisions]

    @property
    def skipped_precisions(self) -> list[str]:
        """Why the profile's other precisions are not tried (e.g. no FP16 kernels in this CPU's OpenVINO)."""
        return [
            f"{p} skipped: {self.checker.npu.name} cannot compute {p} on this host"
            for p in self.profile.precisions
            if p not in self.checker.npu.precisions
        ]

    def _attempts(self, cand: Candidate) -> Iterator[tuple[str, str | None, str]]:
        """(precision, INT8 scheme, how the schemes were ordered) in the order the placement tries them:
        the profile's precisions this host computes, and within INT8 the schemes fastest first. Lazy: the
        schemes are timed only when INT8 is reached."""
        for precision in self.precisions:
            schemes, how = self._variants(cand, precision)
            for scheme in schemes:
                yield precision, scheme, how

    # ---------------------------------------------------------------- whole graph
    def whole_graph(self) -> WholeGraphVerdict:
        model = self.split.exported.load()
        inp, out = self.split.input, self.split.output
        cand = self._candidate("whole_graph", model, [inp.name], [out.name], inp.bytes, out.bytes, 2)
        if not self.precisions:
            raise YoloEdgeError(
                f"{self.profile.name}: this host computes none of its precisions "
                f"({'; '.join(self.skipped_precisions)}); "
                "pick another --device"
            )
        precision = self.precisions[0]
        self.log(f"checking the whole graph on {self.profile.name} at {precision}")
        schemes, _ = self._variants(cand, precision)
        for scheme in schemes:  # the first INT8 scheme that passes, else the last one's failure
            results = self.checker.run_all(cand, precision, scheme)
            failed = first_failure(results)
            if failed is None:
                break
        return WholeGraphVerdict(
            failed is None,
            precision,
            scheme,
            failed,
            results[failed].reason if failed else "all four checks pass",
            results,
        )

    # ---------------------------------------------------------------- subgraphs
    def place(self, strict: bool) -> PlacementPlan:
        whole = self.whole_graph()
        placed: list[SubgraphPlan] = []
        device_of: dict[str, str] = {self.split.input.name: "cpu"}
        for sg in self.split.subgraphs:
            cpu_in = sum(t.bytes for t in sg.inputs if device_of.get(t.name, "cpu") == "cpu")
            out_bytes = sum(t.bytes for t in sg.outputs)
            cand = self._candidate(
                sg.name,
                sg.model,
                [t.name for t in sg.inputs],
                [t.name for t in sg.outputs],
                cpu_in,
                out_bytes,
                len(sg.inputs) + len(sg.outputs),
            )
            self.log(f"placing {sg.name}")
            plan = self._place_one(cand)
            placed.append(plan)
            for t in sg.outputs:
                device_of[t.name] = plan.device
        placed, transfer_ms = with_transfers(self.split, self.profile.link, placed)
        if strict:
            refused = [p for p in placed if p.granularity != "rule" and (p.device == "cpu" or p.cpu_nodes)]
            if refused:
                raise PlanRefused(
                    "strict mode: " + "; ".join(f"{p.name} would fall back to the CPU ({p.reason})" for p in refused)
                )
        notes = (f"latency is {self.profile.latency} ({self.profile.kind} device {self.profile.name})",)
        return PlacementPlan(
            model=str(self.split.exported.path),
            device=self.profile.name,
            device_kind=self.profile.kind,
            latency_kind=self.profile.latency,
            imgsz=self.split.exported.meta.imgsz,
            strict=strict,
            whole_graph_npu=whole,
            subgraphs=tuple(placed),
            transfer_ms=transfer_ms,
            notes=notes,
        )

    def _place_one(self, cand: Candidate) -> SubgraphPlan:
        cpu_s, kind = self.checker.cpu_s(cand)
        cpu_ms, primary = cpu_s * 1e3, self.precisions[0]
        rule = _rule(cand.name, self.cfg)
        if rule:
            return _placed_by_rule(self.checker, cand, rule, primary, cpu_ms, kind)
        reasons: list[str] = []
        results: dict[str, CheckResult] = {}
        for precision, scheme, how in self._attempts(cand):
            label = variant_label(precision, scheme)
            results = self.checker.run_all(cand, precision, scheme)
            failed = first_failure(results)
            if failed is None:
                perf = results["performance"].numbers
                after = [*reasons, how] if how else reasons
                why = f"all four checks pass at {label}" + (f" ({'; '.join(after)})" if after else "")
                return SubgraphPlan(
                    cand.name,
                    "npu",
                    precision,
                    "subgraph",
                    why,
                    results,
                    float(perf["npu_ms"]),  # type: ignore[arg-type]
                    cpu_ms,
                    kind,
                    int8_scheme=scheme,
                )
            reasons.append(f"{label} failed {failed}: {results[failed].reason.removeprefix(f'{label}: ')}")
            if (
                failed == "op_support"
                and self.cfg.plan.op_level
                and self.profile.latency == "modelled"
                and self.profile.cpu
            ):
                op_plan = _op_level_plan(self.checker, cand, precision, scheme, results, cpu_ms, kind)
                if op_plan is not None:
                    return op_plan
                reasons[-1] += " (op-level fallback does not pay)"
            if failed != "precision":
                break  # no other precision or scheme changes op support, memory or speed enough to matter
        why = "back to the CPU: " + "; ".join(reasons + self.skipped_precisions)
        return SubgraphPlan(cand.name, "cpu", "fp32", "subgraph", why, results, None, cpu_ms, kind)


def _op_level_plan(
    checker: Checker,
    cand: Candidate,
    precision: str,
    scheme: str | None,
    results: dict[str, CheckResult],
    cpu_ms: float,
    kind: str,
) -> SubgraphPlan | None:
    """The subgraph with its unsupported ops on the CPU and the rest on the accelerator, if that pays."""
    found = op_level_search(checker, cand, precision, scheme, cpu_ms)
    if found is None or not all(c.passed for c in found.checks.values()):
        return None
    checks = {**results, "memory": checker.memory(cand, precision), **found.checks}
    reason = (
        f"op-level: {len(found.cpu_nodes)} unsupported op(s) ({', '.join(found.cpu_nodes)}) run on the CPU, "
        f"the rest on the NPU at {precision}; {found.total_ms:.2f} ms beats all-CPU {cpu_ms:.2f} ms"
    )
    return SubgraphPlan(
        cand.name,
        "npu",
        precision,
        "op",
        reason,
        checks,
        found.total_ms,
        cpu_ms,
        kind,
        cpu_nodes=found.cpu_nodes,
        int8_scheme=scheme,
    )


def with_transfers(split: SplitModel, link: Link, placed: list[SubgraphPlan]) -> tuple[list[SubgraphPlan], float]:
    """``placed`` with the bytes each accelerator subgraph moves across the link, and the total transfer ms."""
    device_of = {split.input.name: "cpu"}  # preprocessing runs on the CPU
    consumers: dict[str, list[str]] = {}
    for sg, p in zip(split.subgraphs, placed):
        for t in sg.outputs:
            device_of[t.name] = p.device
        for t in sg.inputs:
            consumers.setdefault(t.name, []).append(p.device)
    consumers.setdefault(split.output.name, []).append("cpu")  # NMS runs on the CPU
    out = []
    total = 0.0
    for sg, p in zip(split.subgraphs, placed):
        width = PRECISION_BYTES[p.precision] / 4 if p.device == "npu" else 1.0
        ins = [t for t in sg.inputs if device_of[t.name] != p.device]
        outs = [t for t in sg.outputs if any(d != p.device for d in consumers.get(t.name, []))]
        b_in = b_out = 0
        if p.device == "npu":  # the NPU side moves the data; a CPU subgraph's inputs are counted by its producer
            b_in, b_out = int(sum(t.bytes for t in ins) * width), int(sum(t.bytes for t in outs) * width)
            total += transfer_time(b_in, link, len(ins)) + transfer_time(b_out, link, len(outs))
        out.append(replace(p, transfer_bytes_in=b_in, transfer_bytes_out=b_out))
    return out, total * 1e3


class PlanRefused(YoloEdgeError):
    """--strict: the plan would fall back to the CPU. Exit code 1 (not a usage error)."""

    exit_code = 1


def plan_model(
    split: SplitModel,
    profile: DeviceProfile,
    cfg: DeployConfig,
    images: Sequence[np.ndarray],
    strict: bool = False,
    log: Log | None = None,
    npu: Backend | None = None,
) -> PlacementPlan:
    """Place ``split`` on ``profile`` using letterboxed calibration ``images``; see the module docstring.
    ``npu``: the accelerator backend (default: the profile's)."""
    try:
        return Planner(split, profile, cfg, images, log, npu).place(strict)
    except NpuCompileError as exc:  # a compile failure outside a check is still explained, not a traceback
        raise YoloEdgeError(f"{profile.name}: {exc}") from None
