"""An opened bundle: the stored units compiled into executors, detectors and pipelined streams."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import onnx

from yolo_edge.backends.builder import Builder
from yolo_edge.bundle.layout import CALIB, MODEL, BundleMeta
from yolo_edge.bundle.read import bundle_file, damaged, read_bundle, read_graph, read_unit_artifacts
from yolo_edge.core.config import DeployConfig, DeviceProfile, Variant
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.model.graph import SUBGRAPHS
from yolo_edge.model.meta import ExportedModel, load_onnx
from yolo_edge.model.split import SplitModel, split_model
from yolo_edge.pipeline.detector import Detector
from yolo_edge.pipeline.engine import StreamOptions, StreamRunner
from yolo_edge.pipeline.preprocess import load_calibration
from yolo_edge.pipeline.sources import parse_source
from yolo_edge.plan.placement import PlacementPlan
from yolo_edge.runtime.build import UnitFeeds, UnitPlan, UnitSources, batch_units, compile_units, plan_units
from yolo_edge.runtime.events import EventLog
from yolo_edge.runtime.executor import SplitExecutor


@dataclass
class Bundle:
    """An opened bundle: what it stores, read and checked, nothing compiled yet (``detector()`` compiles)."""

    path: Path
    meta: BundleMeta
    plan: PlacementPlan
    profile: DeviceProfile
    config: DeployConfig  # the settings deploy proved it with
    units: tuple[UnitPlan, ...]  # the deployed plan's units, in order, their FP32 graphs read
    sample: dict[str, np.ndarray]  # one frame's tensors at every unit's inputs

    @property
    def calib_dir(self) -> Path:
        return self.path / CALIB

    @cached_property
    def exported(self) -> ExportedModel:
        """model.onnx, the FP32 reference, read and validated when first asked for."""
        try:
            return load_onnx(bundle_file(self.path, MODEL))
        except YoloEdgeError as exc:
            raise damaged(
                self.path, str(exc).replace("; re-export it", "").replace(str(self.path / MODEL), MODEL)
            ) from None

    @cached_property
    def split(self) -> SplitModel:
        """The model split anew: only for running a plan other than the stored one."""
        return split_model(self.exported)

    def executor(
        self,
        plan: PlacementPlan | None = None,
        events: EventLog | None = None,
        as_placed: bool = False,
        batch: int = 1,
    ) -> SplitExecutor:
        """The stored units compiled into an executor (what is compiled is loaded as it is; the rest is compiled,
        calibrated on the stored images), or ``plan``'s units when another plan is asked for; its accelerator units
        also at ``batch`` frames a call, or the largest batch that fits (``executor.batch`` says which, and why).
        Where a unit cannot be placed as the plan says, ``executor.placement_problems`` says so."""
        events = events or EventLog()
        if plan is None or plan == self.plan:
            plan, planned = self.plan, list(self.units)
        else:
            planned = plan_units(self.split, plan, self.meta.fuse_units)
        input_name = planned[0].model.graph.input[0].name
        feeds = UnitFeeds(lambda: [{input_name: image} for image in self.calibration()])
        with ExitStack() as stack:  # closed here if a compile raises; else handed to the executor
            builder = stack.enter_context(Builder(self.profile))
            try:
                sources = UnitSources(
                    feeds, dict(self.sample), self._subgraph, read_unit_artifacts(self.path / "units")
                )
                units = compile_units(planned, sources, builder, events, self.profile.kind != "cpu", loaded=True)
            except (YoloEdgeError, MemoryError):
                raise
            except Exception as exc:  # a runtime refusing a stored graph or compiled file (an op of a custom
                # domain, renamed IR outputs, a damaged context): the bundle, someone else's, is damaged
                said = (str(exc).strip().splitlines() or [""])[0][:200]
                raise damaged(self.path, f"a runtime refused its stored units: {type(exc).__name__}: {said}") from None
            batching = batch_units(units, builder, batch, events, dict(self.sample))
            executor = SplitExecutor(
                units, self.config.runtime, self.profile, events, owns=stack.pop_all(), as_placed=as_placed
            )
            executor.batch = batching
        if self.meta.kept is not None and plan == self.plan:  # the frames' audit judges against what deploy proved
            executor.auditor.prove(self.meta.kept, self.meta.added, self.meta.lighting)
        built = {u.name: u for u in units}
        for unit in planned:
            if unit.device == "npu" and (built.get(unit.name) is None or built[unit.name].npu is None):
                why = next(
                    (e.detail for e in events.events if e.unit == unit.name and e.action == "compile_on_cpu"),
                    "the accelerator refused it as one graph",
                )
                executor.placement_problems.append(
                    f"unit {unit.name} was proven on {self.profile.name} at {unit.precision} "
                    f"but cannot be placed there now ({why})"
                )
        return executor

    def calibration(self) -> list[np.ndarray]:
        """The stored calibration images, letterboxed (each a regular file inside the bundle): read only when a
        unit has to be compiled from its FP32 graph."""
        for image in sorted(self.calib_dir.iterdir()) if self.calib_dir.is_dir() else []:
            bundle_file(self.path, f"{CALIB}/{image.name}")
        return load_calibration(self.calib_dir, self.meta.model.imgsz, self.config.calib_images)

    def _subgraph(self, name: str) -> onnx.ModelProto:
        return read_graph(self.path, f"subgraphs/{name}.onnx")[0]

    def detector(self, events: EventLog | None = None, as_placed: bool = False, batch: int = 1) -> Detector:
        """The stored plan's detector. ``as_placed``: every unit stays where the plan put it unless its accelerator
        fails (no move to the CPU because the accelerator ran slow on a busy machine): what val and the gate
        measure, so the same bundle and data give the same figures however loaded the machine is. ``batch``: frames
        a call of its accelerator units in a stream (:meth:`executor`)."""
        executor = self.executor(events=events, as_placed=as_placed, batch=batch)
        return Detector(executor, self.meta.model, self.config.nms)

    def stream(self, sources: Sequence[str], options: StreamOptions | None = None) -> StreamRunner:
        """A pipelined run over ``sources`` (files, folders, videos, camera indices, stream URLs):
        ``with bundle.stream(["cam.mp4", "rtsp://..."]) as s: for result in s: ...``; ``s.stats`` and
        ``summarize(s)`` account for every frame. A bad source is a one-line error here, before compiling."""
        parsed = [parse_source(s) for s in sources]
        return StreamRunner(self.detector(), parsed, options or StreamOptions(), close_detector=True)

    def reference_detector(self) -> Detector:
        """The monolithic model's FP32 result on the CPU (model.onnx as one unit): the drift reference."""
        whole = UnitPlan(SUBGRAPHS, self.exported.load(), "cpu", Variant("fp32"))
        with ExitStack() as stack:  # closed here if the compile raises; else handed to the executor
            builder = stack.enter_context(Builder(self.profile))
            units = compile_units(
                [whole], UnitSources(UnitFeeds([]), dict(self.sample), self._subgraph), builder, EventLog()
            )
            executor = SplitExecutor(units, self.config.runtime, self.profile, owns=stack.pop_all())
        return Detector(executor, self.meta.model, self.config.nms)


def load_bundle(path: str | Path) -> Bundle:
    """Open the bundle at ``path`` (any folder or machine: its paths are relative); a one-line error if it
    is not a bundle, is damaged, or was written by a yolo-edge with another bundle format. Reads and checks
    what it stores; compiles nothing (``Bundle.detector()`` does)."""
    path = Path(path)
    return Bundle(path, *read_bundle(path))


def stream(bundle: str | Path | Bundle, sources: Sequence[str], options: StreamOptions | None = None) -> StreamRunner:
    """``for result in yolo_edge.stream("out/bundle", ["a.mp4", "rtsp://cam/1"]): ...``, or as a context manager
    that stops the threads: the bundle's pipelined run over ``sources`` (see :meth:`Bundle.stream`)."""
    return (bundle if isinstance(bundle, Bundle) else load_bundle(bundle)).stream(sources, options)
