"""What the planner decides, as typed, explainable objects.

* :class:`SubgraphPlan`: where one subgraph runs (device, precision variant, granularity), why, and every
  check's numbers;
* :class:`PlacementPlan`: one placement of the whole model (a subgraph plan each, the transfers between them)
  and the whole-graph comparison row;
* :class:`PlanSpace`: every placement the four checks leave: per subgraph its options (each precision
  variant that passes, or the CPU), and the variants they ruled out with why. Its :meth:`PlanSpace.candidates`
  are the placements the search (``yolo_edge.flows.search``) judges with the verdict, fastest estimate first.

Example:
    >>> space = plan_space(split, load_profile("sim-edge-npu"), load_deploy_config(), images)  # doctest: +SKIP
    >>> [c.label for c in space.candidates()][:2]  # doctest: +SKIP
    ['backbone=npu/int8/u8/qdq, neck=npu/int8/u8/qdq, head=cpu/fp32, decode=cpu/fp32', ...]
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from yolo_edge.backends import cpu_backend
from yolo_edge.backends.base import Executable, run_chain
from yolo_edge.core.codec import plain
from yolo_edge.core.config import PRECISION_BYTES, Device, LatencyKind, Link, Variant, one_of
from yolo_edge.devices.cost import transfer_time
from yolo_edge.model.split import SplitModel
from yolo_edge.plan.results import CheckResult, Memory

FP32 = Variant("fp32")
PlanKind = Literal["real", "simulated", "cpu", "manual"]  # the profile's kind, or a hand-written plan


@dataclass(frozen=True)
class SubgraphPlan:
    name: str
    device: Device
    variant: Variant
    granularity: str  # "subgraph", "op" (some ops on the CPU) or "rule" (placed by a design rule)
    reason: str
    checks: dict[str, CheckResult]
    npu_ms: float | None
    cpu_ms: float
    latency_kind: LatencyKind
    transfer_bytes_in: int = 0
    transfer_bytes_out: int = 0
    cpu_nodes: tuple[str, ...] = ()  # op level: the nodes that run on the CPU
    kept_why: str = ""  # mixed precision: how the kept layers were chosen

    @property
    def precision(self) -> str:
        return self.variant.precision

    @property
    def label(self) -> str:
        """``npu/int8/s8/nncf``, ``cpu/fp32``: where and how."""
        return f"{self.device}/{self.variant.label}"

    @property
    def latency_ms(self) -> float:
        return self.npu_ms if self.device == "npu" and self.npu_ms is not None else self.cpu_ms

    def to_dict(self) -> dict[str, object]:
        v = self.variant
        return plain(
            {
                "name": self.name,
                "device": self.device,
                "precision": v.precision,
                "int8_scheme": v.scheme,
                "quantizer": v.quantizer,
                "kept_layers": list(v.kept),
                "kept_why": self.kept_why,
                "granularity": self.granularity,
                "reason": self.reason,
                "checks": {k: c.to_dict() for k, c in self.checks.items()},
                "latency_ms": {
                    "npu": self.npu_ms,
                    "cpu": self.cpu_ms,
                    "chosen": self.latency_ms,
                    "kind": self.latency_kind,
                },
                "transfer_bytes_in": self.transfer_bytes_in,
                "transfer_bytes_out": self.transfer_bytes_out,
                "cpu_nodes": list(self.cpu_nodes),
            }
        )

    @classmethod
    def from_dict(cls, s: dict[str, Any]) -> SubgraphPlan:
        variant = Variant(s["precision"], s["int8_scheme"], s["quantizer"], tuple(s["kept_layers"]))
        return cls(
            name=s["name"],
            device=one_of(s["device"], Device, "a subgraph's device"),
            variant=variant,
            granularity=s["granularity"],
            reason=s["reason"],
            checks=_checks(s["checks"]),
            npu_ms=s["latency_ms"]["npu"],
            cpu_ms=s["latency_ms"]["cpu"],
            latency_kind=one_of(s["latency_ms"]["kind"], LatencyKind, "a subgraph's latency kind"),
            transfer_bytes_in=s["transfer_bytes_in"],
            transfer_bytes_out=s["transfer_bytes_out"],
            cpu_nodes=tuple(s["cpu_nodes"]),
            kept_why=s["kept_why"],
        )


@dataclass(frozen=True)
class WholeGraphVerdict:
    """The whole model on the accelerator at its first precision: the safety-net comparison row."""

    passed: bool | None  # None: not evaluated (a hand-written plan)
    variant: Variant | None
    failed_check: str | None
    reason: str
    checks: dict[str, CheckResult]

    @property
    def precision(self) -> str | None:
        return None if self.variant is None else self.variant.precision

    @property
    def failed_checks(self) -> tuple[str, ...]:
        """Every check it failed, in the checks' order: the first, and precision judged had it fit the memory."""
        return tuple(name for name, result in self.checks.items() if result.passed is False)

    @property
    def required_bytes(self) -> int:
        """Device memory the whole graph needs (0 when the memory check did not run)."""
        mem = self.checks.get("memory")
        return mem.measured.required_bytes if mem is not None and isinstance(mem.measured, Memory) else 0

    def to_dict(self) -> dict[str, object]:
        return plain(
            {
                "passed": self.passed,
                "variant": None if self.variant is None else self.variant.label,
                "failed_check": self.failed_check,
                "reason": self.reason,
                "checks": {k: v.to_dict() for k, v in self.checks.items()},
            }
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WholeGraphVerdict:
        variant = None if d["variant"] is None else Variant.parse(d["variant"])
        return cls(d["passed"], variant, d["failed_check"], d["reason"], _checks(d["checks"]))


NOT_EVALUATED = WholeGraphVerdict(None, None, None, "not evaluated", {})


def _checks(d: dict[str, Any]) -> dict[str, CheckResult]:
    return {k: CheckResult.from_dict(k, c) for k, c in d.items()}


@dataclass(frozen=True)
class PlacementPlan:
    model: str
    device: str
    device_kind: PlanKind
    latency_kind: LatencyKind
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

    @property
    def label(self) -> str:
        """``backbone=npu/int8/u8/nncf, neck=...``: the placement in one line."""
        return ", ".join(f"{s.name}={s.label}" for s in self.subgraphs)

    @property
    def key(self) -> tuple[tuple[str, str, Variant, tuple[str, ...]], ...]:
        """What makes two plans the same placement (devices, variants, op-level cuts), whatever their reasons."""
        return tuple((s.name, s.device, s.variant, s.cpu_nodes) for s in self.subgraphs)

    @classmethod
    def manual(
        cls, split: SplitModel, npu: dict[str, str], device: str, latency_kind: LatencyKind = "measured"
    ) -> PlacementPlan:
        """A hand-written plan: ``npu`` maps subgraph name -> variant (``int8``, ``int8/s8``, ``int8/u8/qdq``,
        ``bf16``); the rest run on the CPU in FP32. No check is run: the executor and benchmarks can start from it."""
        checks = {
            c: CheckResult(c, None, "not evaluated: hand-written plan")
            for c in ("op_support", "memory", "precision", "performance")
        }
        subs = tuple(
            SubgraphPlan(
                sg.name,
                "npu" if sg.name in npu else "cpu",
                Variant.parse(npu[sg.name]) if sg.name in npu else FP32,
                "subgraph",
                "hand-written",
                checks,
                None,
                0.0,
                latency_kind,
            )
            for sg in split.subgraphs
        )
        meta = split.exported.meta
        return cls(
            str(split.exported.path), device, "manual", latency_kind, meta.imgsz, False, NOT_EVALUATED, subs, 0.0
        )

    def all_cpu(self) -> PlacementPlan:
        """This plan with every subgraph on the CPU in FP32 (the whole-CPU reference and safety net)."""
        subs = tuple(
            replace(
                s,
                device="cpu",
                variant=FP32,
                granularity="rule",
                reason="whole graph on the CPU",
                npu_ms=None,
                cpu_nodes=(),
                transfer_bytes_in=0,
                transfer_bytes_out=0,
                kept_why="",
            )
            for s in self.subgraphs
        )
        return replace(self, subgraphs=subs, transfer_ms=0.0)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PlacementPlan:
        return cls(
            model=d["model"],
            device=d["device"],
            device_kind=one_of(d["device_kind"], PlanKind, "the plan's device kind"),
            latency_kind=one_of(d["latency_kind"], LatencyKind, "the plan's latency kind"),
            imgsz=(int(d["imgsz"][0]), int(d["imgsz"][1])),
            strict=d["strict"],
            whole_graph_npu=WholeGraphVerdict.from_dict(d["whole_graph_npu"]),
            subgraphs=tuple(SubgraphPlan.from_dict(s) for s in d["subgraphs"]),
            transfer_ms=d["transfer_ms"],
            notes=tuple(d["notes"]),
        )

    def to_dict(self) -> dict[str, object]:
        return plain(
            {
                "model": self.model,
                "device": self.device,
                "device_kind": self.device_kind,
                "latency_kind": self.latency_kind,
                "imgsz": list(self.imgsz),
                "strict": self.strict,
                "whole_graph_npu": self.whole_graph_npu.to_dict(),
                "subgraphs": [s.to_dict() for s in self.subgraphs],
                "estimated_latency_ms": self.estimated_ms,
                "transfer_ms": self.transfer_ms,
                "notes": list(self.notes),
            }
        )


@dataclass(frozen=True)
class PlanSpace:
    """Every placement left by the four checks: ``options[s]`` are subgraph ``s``'s plans that pass them (its
    accelerator variants, fastest first, then the CPU); ``rejected[s]`` the variants a check ruled out."""

    split: SplitModel
    link: Link
    base: PlacementPlan  # the model, device and whole-graph row every candidate shares
    options: dict[str, tuple[SubgraphPlan, ...]]
    rejected: dict[str, tuple[SubgraphPlan, ...]]

    def placement(self, chosen: Sequence[SubgraphPlan]) -> PlacementPlan:
        """The plan running ``chosen`` (one plan per subgraph, in order), with its transfers."""
        placed, transfer_ms = with_transfers(self.split, self.link, list(chosen))
        return replace(self.base, subgraphs=tuple(placed), transfer_ms=transfer_ms)

    def cpu_plans(self) -> list[SubgraphPlan]:
        """Each subgraph's CPU plan (its last option)."""
        return [opts[-1] for opts in self.options.values()]

    def candidates(self) -> list[PlacementPlan]:
        """Every combination of the subgraphs' options, fastest estimated latency first (ties: fewer subgraphs
        on the accelerator, then the options' own order)."""
        plans = [self.placement(combo) for combo in itertools.product(*self.options.values())]
        return sorted(plans, key=lambda p: (round(p.estimated_ms, 6), len(p.npu_subgraphs)))


def boundary_tensors(
    split: SplitModel, images: Sequence[np.ndarray], exes: Sequence[Executable] | None = None
) -> list[dict[str, np.ndarray]]:
    """Every boundary tensor of every image from an FP32 CPU run of the subgraphs in sequence (``exes``: the
    subgraphs already compiled in FP32 on the CPU)."""
    if exes is None:
        cpu = cpu_backend()
        exes = [cpu.compile(sg.model, "fp32") for sg in split.subgraphs]
    return [run_chain(exes, {split.input.name: image}) for image in images]


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
