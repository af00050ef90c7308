"""Which (model, imgsz, device profile) is the fastest that meets my SLA within the drift limit? ``sweep`` deploys
every configuration of the grid with the same evidence as ``yolo-edge deploy`` (status, drift, p50/p95/p99 and how
they were obtained, memory, placement), on Ray, and ranks them: what passes (the SLA and the drift limit) first, by
the objective (``latency``, the median, by default; ``drift``: least mAP50-95 lost; ``memory``: least peak); the
Pareto front of latency against drift; the best configuration (the first that passes).

- **Ray, local by default** (``cluster.ray_session``): each configuration is a Ray task. A configuration whose
  profile names a ``node_resource`` (``rk3588``: its board or toolchain) requests it, so it runs only on the nodes
  that have that device; a configuration whose latency is *measured* on the node's CPU holds all of that node's
  CPUs while it runs (nothing else is timed beside it); a simulated board's (latency modelled) takes one CPU.
- **Faults**: a task whose worker dies, or that fails on a bug, is retried (``retries``); then it is a failed row
  with its reason and the sweep goes on. A configuration that is bad input (a model that does not load, data that
  does not match it) is a failed row at once: retrying cannot change it. Ctrl-C cancels what is left.
- **Cache**: each configuration's outcome is stored under a key of everything it depends on (the model file's
  content, imgsz, the profile, the deploy settings, the data's file listing, yolo-edge's version): a rerun deploys
  only what changed. ``keep``: each configuration's bundle is kept in a folder of its own there.

Example:
    >>> grid = SweepRequest(["a.pt", "b.pt"], [320, 640], ["rk3588", "host-lowp"], data="val/", sla_ms=50)
    >>> result = sweep(grid)  # doctest: +SKIP
    >>> result.best.point.label  # doctest: +SKIP
    'a.pt@320 on rk3588'
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from yolo_edge.backends import device_status
from yolo_edge.core.cluster import has_resource, node_cpus, ray_session
from yolo_edge.core.codec import dumps, plain
from yolo_edge.core.config import DeployConfig, FrameKind, load_profile
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import cache_root, json_loads, read_cached, write_cached
from yolo_edge.core.version import __version__
from yolo_edge.flows.deploy import DeployRequest, deploy, deploy_settings
from yolo_edge.flows.plots import limit_line, png, pyplot, unclutter
from yolo_edge.model.export import check_model
from yolo_edge.model.meta import parse_imgsz, sha256_file

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Log = Callable[[str], None]
FAILED = "failed"  # the status of a configuration that did not complete
Objective = Literal["latency", "drift", "memory"]
OBJECTIVES: tuple[Objective, ...] = ("latency", "drift", "memory")


@dataclass(frozen=True)
class Point:
    """One configuration of the grid."""

    model: str
    imgsz: int
    device: str

    @property
    def label(self) -> str:
        return f"{Path(self.model).name}@{self.imgsz} on {self.device}"


@dataclass(frozen=True)
class Outcome:
    """One configuration's evidence, as its deploy proved it (or why it has none)."""

    point: Point
    status: str  # deploy's words: ok, fails drift, SLA, ...; or FAILED (error says why)
    passed: bool  # met the SLA at no more drift than the limit
    chosen: str | None = None  # whole-npu, whole-cpu or split
    placement: str | None = None  # where each subgraph runs, at what
    metric: str | None = None  # mAP (labels) or agreement (with the FP32 reference)
    drift_map50: float | None = None
    drift_map50_95: float | None = None
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    latency_kind: FrameKind | None = None
    memory_peak_bytes: int | None = None
    bundle: str | None = None  # kept bundle
    error: str | None = None
    node: str | None = None  # the Ray node it ran on
    cached: bool = False
    boxes_kept: int | None = None  # of the FP32 reference's boxes at the operating confidence, those the plan keeps
    boxes_of: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**plain(self), "label": self.point.label}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Outcome:
        fields = {f.name for f in dataclasses.fields(cls)} - {"point"}
        return cls(Point(**d["point"]), **{k: v for k, v in d.items() if k in fields})


@dataclass(frozen=True)
class SweepResult:
    """Every configuration's outcome, in grid order, and the SLA they were judged against."""

    outcomes: tuple[Outcome, ...]
    sla_ms: float
    max_drift: float = 0.01
    objective: Objective = "latency"

    @property
    def ranked(self) -> list[Outcome]:
        """Those that pass first, by the objective (then the others' figures break ties), then those that fail,
        then those that did not run. A gain over the FP32 model is no loss: it does not outrank a faster one."""
        inf = float("inf")

        def key(o: Outcome) -> tuple[float, ...]:
            lost = round(max(0.0, -o.drift_map50_95), 4) if o.drift_map50_95 is not None else inf
            p50 = o.p50_ms if o.p50_ms is not None else inf
            mem = float(o.memory_peak_bytes) if o.memory_peak_bytes is not None else inf
            group = 0 if o.passed else 1 if o.status != FAILED else 2
            order = {"latency": (p50, lost, mem), "drift": (lost, p50, mem), "memory": (mem, p50, lost)}
            return (group, *order[self.objective])

        return sorted(self.outcomes, key=key)

    @property
    def best(self) -> Outcome | None:
        """The first configuration that passes, by the objective (default: the fastest median)."""
        first = self.ranked[0] if self.outcomes else None
        return first if first is not None and first.passed else None

    @property
    def front(self) -> list[Outcome]:
        """The Pareto front of p95 latency against drift (mAP50-95 lost): no other configuration is both faster
        and closer to the FP32 model. Fastest first."""
        measured = [o for o in self.outcomes if o.p95_ms is not None and o.drift_map50_95 is not None]
        measured.sort(key=lambda o: (o.p95_ms, -(o.drift_map50_95 or 0.0)))
        front: list[Outcome] = []
        for o in measured:
            if not front or (o.drift_map50_95 or 0.0) > (front[-1].drift_map50_95 or 0.0):
                front.append(o)
        return front

    def to_dict(self) -> dict[str, Any]:
        best = self.best
        return plain(
            {
                "sla_ms": self.sla_ms,
                "max_drift": self.max_drift,
                "objective": self.objective,
                "outcomes": [o.to_dict() for o in self.ranked],
                "front": [o.point.label for o in self.front],
                "best": best.point.label if best else None,
            }
        )


@dataclass(frozen=True)
class SweepRequest:
    """The grid and what judges it: every (model, imgsz, device) deployed on ``data`` with the deploy settings
    ``config`` (and ``sla_ms``), ranked by ``objective``; ``cache``: the folder of stored outcomes (default: the user
    cache; ``""``: none); ``keep``: a folder for each configuration's bundle."""

    models: Sequence[str | Path]
    imgsz: Sequence[int]
    devices: Sequence[str]
    data: str | Path | None = None
    config: str | Path | DeployConfig | None = None
    sla_ms: float | None = None
    objective: Objective = "latency"
    cache: str | Path | None = None
    keep: str | Path | None = None


def sweep(
    request: SweepRequest,
    ray_address: str | None = None,
    workers: int | None = None,
    use_ray: bool = True,
    retries: int = 2,
    log: Log | None = None,
) -> SweepResult:
    """Deploy every configuration of the ``request``'s grid and rank them (see the module docstring).
    ``ray_address``: an existing Ray cluster (default: a local Ray with ``workers`` CPUs); ``use_ray`` False: one
    configuration after the other in this process; ``retries``: of a task whose worker died or that failed on a
    bug."""
    r = request
    if r.objective not in OBJECTIVES:
        raise YoloEdgeError(f"unknown sweep objective '{r.objective}'; choose one of {', '.join(OBJECTIVES)}")
    say: Log = log or (lambda m: print(f"yolo-edge: {m}", file=sys.stderr))
    cfg = deploy_settings(r.config, r.sla_ms)  # what every configuration's deploy runs with, checked once here
    # each axis once (a duplicated --device is deployed once and listed once); bad input one line now, not a failed
    # configuration each and "nothing meets the SLA"
    names, sizes, devices = (
        list(dict.fromkeys(map(str, r.models))),
        list(dict.fromkeys(r.imgsz)),
        list(dict.fromkeys(r.devices)),
    )
    for m in names:
        check_model(m)
    for s in sizes:
        parse_imgsz(s)
    points = [Point(m, int(s), d) for m in names for s in sizes for d in devices]
    if not points:
        raise YoloEdgeError("the sweep is empty: give at least one --model, --imgsz and --device")
    profiles = {d: load_profile(d) for d in dict.fromkeys(devices)}  # an unknown one: a one-line error, up front
    store = None if r.cache == "" else Path(r.cache) if r.cache else cache_root() / "sweeps"
    listing = _listing(Path(r.data)) if r.data is not None else "demo"  # read once: a large set is many files
    keys = {p: _key(p, cfg, listing, dataclasses.asdict(profiles[p.device])) for p in points}
    done = {p: o for p in points if (o := _cached(store, keys[p])) is not None}
    if done:
        say(f"{len(done)} of {len(points)} configurations unchanged since they were swept: read from {store}")
    todo = [p for p in points if p not in done]
    specs = {p: _spec(p, cfg, r.data, r.keep) for p in todo}
    run = _ray_run if use_ray else _in_turn
    for point, outcome in run(specs, ray_address, workers, retries, say) if specs else []:
        if outcome.status != FAILED and store is not None:
            write_cached(store / f"{keys[point]}.json", dumps(outcome.to_dict(), indent=None).encode())
        done[point] = outcome
    return SweepResult(tuple(done[p] for p in points), cfg.validate.sla_ms, cfg.validate.max_drift, r.objective)


def run_point(spec: dict[str, Any]) -> dict[str, Any]:
    """One configuration deployed (a Ray task, or called in turn): its outcome as a dict. Bad input is a failed
    outcome (retrying cannot change it); anything else raises, for Ray to retry."""
    point = Point(**spec["point"])
    keep = spec["keep"]
    out = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="yolo-edge-sweep-")) / "bundle"
    try:
        request = DeployRequest(point.model, point.device, point.imgsz, data=spec["data"], config=spec["config"])
        result = deploy(request, out=out, quiet=True)
        outcome = _outcome(point, result.report, str(out) if keep else None)
    except YoloEdgeError as exc:
        outcome = Outcome(point, FAILED, False, error=str(exc))
    finally:
        if not keep:
            shutil.rmtree(out.parent, ignore_errors=True)
    return {**outcome.to_dict(), "node": _node()}


def _outcome(point: Point, report: Any, bundle: str | None) -> Outcome:
    chosen = report.chosen
    drift, lat = chosen.drift, chosen.latency
    return Outcome(
        point,
        chosen.status,
        report.passed,
        chosen.name,
        report.placement.label,
        "mAP" if report.data.labelled else "agreement",
        None if drift is None else drift.map50,
        None if drift is None else drift.map50_95,
        None if lat is None else lat.end_to_end.p50,
        None if lat is None else lat.end_to_end.p95,
        None if lat is None else lat.end_to_end.p99,
        None if lat is None else lat.kind,
        chosen.memory_peak_bytes,
        bundle,
        boxes_kept=None if chosen.kept is None else chosen.kept.kept,
        boxes_of=None if chosen.kept is None else chosen.kept.of,
    )


def _node() -> str | None:
    """The Ray node this runs on (None outside Ray)."""
    try:
        import ray

        return str(ray.get_runtime_context().get_node_id()) if ray.is_initialized() else None
    except ImportError:
        return None


def _spec(point: Point, cfg: DeployConfig, data: str | Path | None, keep: str | Path | None) -> dict[str, Any]:
    """What a task needs, as plain data: the settings are written out with the spec (a task may run elsewhere)."""
    folder = None if keep is None else str(Path(keep).absolute() / _slug(point))
    return {
        "point": dataclasses.asdict(point),
        "data": None if data is None else str(Path(data).absolute()),
        "config": cfg,
        "keep": folder,
    }


def _slug(point: Point) -> str:
    return f"{Path(point.model).stem}-{point.imgsz}-{point.device}".replace("/", "_")


def _in_turn(
    specs: dict[Point, dict[str, Any]], _address: str | None, _workers: int | None, _retries: int, say: Log
) -> list[tuple[Point, Outcome]]:
    out = []
    for i, (point, spec) in enumerate(specs.items(), 1):
        say(f"[{i}/{len(specs)}] {point.label}")
        try:
            row = run_point(spec)
        except Exception as exc:  # a bug in one configuration: recorded, the sweep goes on
            row = Outcome(point, FAILED, False, error=f"{type(exc).__name__}: {exc}").to_dict()
        out.append((point, Outcome.from_dict(row)))
    return out


def _ray_run(
    specs: dict[Point, dict[str, Any]], address: str | None, workers: int | None, retries: int, say: Log
) -> list[tuple[Point, Outcome]]:
    """Every spec as a Ray task, each with the resources its device needs; outcomes as they complete."""
    profiles = {p.device: load_profile(p.device) for p in specs}
    local = {
        pr.node_resource: 1.0 for pr in profiles.values() if pr.node_resource and device_status(pr)[0]
    }  # this machine's devices, advertised by a local Ray as a lab's nodes advertise theirs
    out: list[tuple[Point, Outcome]] = []
    with ray_session(address, workers, None if address else local) as ray:
        task = ray.remote(run_point)
        whole_node = node_cpus(ray)
        pending: dict[Any, Point] = {}
        for point, spec in specs.items():
            profile = profiles[point.device]
            options: dict[str, Any] = {"max_retries": retries, "retry_exceptions": True}
            options["num_cpus"] = 1 if profile.latency == "modelled" else whole_node
            if profile.node_resource:
                if not has_resource(ray, profile.node_resource):
                    why = f"no Ray node advertises the resource '{profile.node_resource}' that {point.device} needs"
                    out.append((point, Outcome(point, FAILED, False, error=why)))
                    continue
                options["resources"] = {profile.node_resource: 1}
            pending[task.options(**options).remote(spec)] = point
        say(f"{len(pending)} configurations on Ray ({ray.cluster_resources().get('CPU', 0):g} CPUs)")
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)  # a signal is handled within 1 s
                if not ready:
                    continue
                point = pending.pop(ready[0])
                try:
                    outcome = Outcome.from_dict(ray.get(ready[0]))
                except Exception as exc:  # retries spent: a worker that kept dying, a bug
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                    outcome = Outcome(
                        point, FAILED, False, error=f"after {retries + 1} attempts: {type(exc).__name__}: {first}"
                    )
                say(f"[{len(out) + 1}/{len(specs)}] {point.label}: {outcome.status}")
                out.append((point, outcome))
        except BaseException:
            for ref in pending:  # Ctrl-C or an error here: nothing left running on the cluster
                ray.cancel(ref, force=True)
            raise
    return out


def _key(point: Point, cfg: DeployConfig, data: object, profile: dict[str, Any]) -> str:
    """Everything the configuration's outcome depends on (``data``: the data's file listing), hashed."""
    model = Path(point.model)
    parts = {
        "model": sha256_file(model) if model.is_file() else point.model,
        "imgsz": point.imgsz,
        "profile": profile,
        "config": dataclasses.asdict(cfg),
        "data": data,
        "version": __version__,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _listing(path: Path) -> list[tuple[str, int, int]]:
    """A data set's identity: every file under it with its size and modification time (not its bytes: a COCO-size
    set would be read whole at every sweep)."""
    if path.is_file():
        st = path.stat()
        return [(str(path.absolute()), st.st_size, st.st_mtime_ns)]
    rows = []
    for root, _dirs, files in os.walk(path):
        for name in files:
            st = (Path(root) / name).stat()
            rows.append((str(Path(root, name).absolute()), st.st_size, st.st_mtime_ns))
    return sorted(rows)


def _cached(store: Path | None, key: str) -> Outcome | None:
    """The stored outcome of the configuration ``key`` (verified by its digest: a damaged one is swept again)."""
    data = None if store is None else read_cached(store / f"{key}.json")
    if data is None:
        return None
    try:
        return dataclasses.replace(Outcome.from_dict(json_loads(data)), cached=True)
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError):
        return None


def sweep_plot(result: SweepResult) -> bytes:
    """:func:`sweep_figure` as PNG bytes."""
    return png(sweep_figure(result))


def sweep_figure(result: SweepResult) -> Figure:
    """Every configuration's p95 latency against its drift (mAP50-95), the Pareto front joined, the SLA (where
    it is near the data: else named in the title) and the drift limit drawn in, the best ringed, labels moved
    apart; the drift axis spans the limit, so a drift well inside it looks so."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)

    def xy(o: Outcome) -> tuple[float, float]:
        return o.p95_ms or 0.0, o.drift_map50_95 or 0.0

    shown = [o for o in result.outcomes if o.p95_ms is not None and o.drift_map50_95 is not None]
    labels = []
    for o in shown:
        ax.scatter(*xy(o), color="tab:green" if o.passed else "tab:grey", zorder=3)
        labels.append(ax.annotate(o.point.label, xy(o), fontsize=7, xytext=(4, 4), textcoords="offset points"))
    best = result.best
    if best is not None and best in shown:
        ax.scatter(*xy(best), s=160, facecolors="none", edgecolors="tab:orange", linewidths=2, zorder=4,
                   label=f"best ({result.objective}): {best.point.label}")  # fmt: skip
    front = [xy(o) for o in result.front]
    ax.plot([x for x, _ in front], [y for _, y in front], color="tab:blue", label="Pareto front")
    top = max((x for x, _ in map(xy, shown)), default=result.sla_ms)
    off = limit_line(ax, result.sla_ms, top, f"SLA {result.sla_ms:g} ms (p95)", horizontal=False)
    ax.axhline(-result.max_drift, color="purple", linestyle=":", label=f"drift limit -{result.max_drift}")
    low = min([-2 * result.max_drift, *(y for _, y in map(xy, shown))])
    high = max([result.max_drift / 2, *(y for _, y in map(xy, shown))])
    ax.set_ylim(low - 0.1 * (high - low), high + 0.1 * (high - low))
    ax.set_xlabel("p95 end-to-end latency (ms)")
    ax.set_ylabel("drift, mAP50-95 (0 = the FP32 model)")
    ax.set_title(f"Deployment sweep: latency against drift{off}", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    unclutter(fig, labels, [(*xy(o), 5.0) for o in shown])
    return fig
