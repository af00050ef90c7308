"""A search's trials sharded like validation: the images a trial's drift is judged on at each look detected by Ray
actors (``--shards N`` on a local Ray, at most one per CPU; ``--ray-address`` a cluster's, one per CPU), each holding
the trial's detector built as the deploy builds it (the same split, placement, variants and calibration tensors: the
same executables, an INT8 graph read back from the compile cache where the deploy's machine wrote it), their
detections merged in order and scored once by the deploy: the same drift as judged in the deploy's process
(``tests/test_search.py``). A trial's latency is never sharded: it is timed on the deploy's machine, interleaved with
the reference.

Example:
    >>> with TrialShards(exported, profile, cfg, calib, shards=2) as shards:  # doctest: +SKIP
    ...     detections = shards.detect(plan, paths)
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from yolo_edge.backends import open_backend
from yolo_edge.backends.builder import Builder
from yolo_edge.core.cluster import ray_session
from yolo_edge.core.config import DeployConfig, DeviceProfile
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.flows.search import plan_detector
from yolo_edge.model.meta import ExportedModel, load_onnx
from yolo_edge.model.split import split_model
from yolo_edge.pipeline.detector import Detector
from yolo_edge.pipeline.postprocess import Detections
from yolo_edge.pipeline.preprocess import read_image
from yolo_edge.plan.placement import PlacementPlan
from yolo_edge.runtime.events import EventLog

Tensors = dict[str, np.ndarray]


class TrialWorker:
    """A Ray actor: the profile's backend and a builder of its own, the split model, and the detectors of the plans it
    was asked to detect with (each built once)."""

    def __init__(self, model: bytes, profile: DeviceProfile, cfg: DeployConfig, calib: list[Tensors]) -> None:
        self.folder = tempfile.TemporaryDirectory(prefix="yolo-edge-trial-")
        path = Path(self.folder.name) / "model.onnx"
        path.write_bytes(model)
        self.split = split_model(load_onnx(path))
        self.stack = ExitStack()
        npu = self.stack.enter_context(open_backend(profile))
        self.builder = self.stack.enter_context(Builder(profile, npu))
        self.cfg, self.calib = cfg, calib
        self.detectors: dict[object, Detector] = {}

    def detect(self, plan: PlacementPlan, paths: list[str]) -> list[Detections]:
        detector = self.detectors.get(plan.key)
        if detector is None:
            detector, _ = plan_detector(self.split, plan, self.builder, self.cfg, self.calib, EventLog())
            self.detectors[plan.key] = self.stack.enter_context(detector)
        return [detector.detect(read_image(p), self.cfg.val_nms)[0] for p in paths]

    def close(self) -> None:
        """Close its detectors, builder and backend (a vendor's toolchain worker stops) and remove its folder."""
        self.stack.close()
        self.folder.cleanup()


class TrialShards:
    """Ray actors (:class:`TrialWorker`) that detect a trial's images in contiguous shards; open for the length of a
    ``with`` block (a local Ray is stopped at its end)."""

    def __init__(
        self,
        exported: ExportedModel,
        profile: DeviceProfile,
        cfg: DeployConfig,
        calib: Sequence[Tensors],
        shards: int | None = None,
        ray_address: str | None = None,
    ) -> None:
        if shards is not None and shards < 1:
            raise YoloEdgeError(f"--shards must be >= 1, got {shards}")
        self.args = (exported.path.read_bytes(), profile, cfg, list(calib))
        self.shards, self.address = shards, ray_address
        self.stack = ExitStack()
        self.workers: list[Any] = []
        self.ray: Any = None

    def __enter__(self) -> TrialShards:
        with ExitStack() as stack:
            self.ray = ray = stack.enter_context(ray_session(self.address))
            cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
            n = max(1, min(self.shards or cpus, cpus))  # an actor holds its CPU for life: at most one per CPU
            actor = ray.remote(num_cpus=1)(TrialWorker)
            shared = [ray.put(a) for a in self.args]
            self.workers = [actor.remote(*shared) for _ in range(n)]
            self.stack = stack.pop_all()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        try:
            if self.workers:  # each closes what it opened before Ray stops it: no toolchain worker is left behind
                self.ray.get([w.close.remote() for w in self.workers])
        finally:
            self.workers = []
            self.stack.close()

    @property
    def count(self) -> int:
        return len(self.workers)

    def detect(self, plan: PlacementPlan, paths: Sequence[Path]) -> list[Detections]:
        """``plan``'s detections of ``paths``, in order, one contiguous shard per actor."""
        names = [str(p) for p in paths]
        size = -(-len(names) // len(self.workers))
        parts = [(w, names[k * size : (k + 1) * size]) for k, w in enumerate(self.workers)]
        found = self.ray.get([w.detect.remote(plan, part) for w, part in parts if part])
        return [d for part in found for d in part]
