"""Shared fixtures: tiny real models exported from ultralytics yaml (random weights), cached per session."""

from __future__ import annotations

import os

os.environ.setdefault("YOLO_OFFLINE", "1")
# The toolchain environments stay where `yolo-edge toolchain install` put them, though the tests keep every
# other cache (quantized graphs) in their session (_quant_cache below changes YOLO_EDGE_CACHE).
from tests.second_model import SECOND_MODEL
from yolo_edge.core.files import toolchains_root  # noqa: E402
from yolo_edge.core.host import THREADS_ENV  # noqa: E402

os.environ.setdefault("YOLO_EDGE_TOOLCHAINS", str(toolchains_root()))
# Under pytest-xdist each test's inference sessions get its worker's share of the cores (a pool per session
# sized to every core, in each worker, oversubscribes them): pytest_runtest_protocol below sets it, unless the
# user did.
USER_THREADS = os.environ.get(THREADS_ENV)

from collections.abc import Callable, Generator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TypeVar  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import pytest  # noqa: E402

from yolo_edge.backends.base import Executable  # noqa: E402
from yolo_edge.model.export import export_model  # noqa: E402
from yolo_edge.model.meta import ExportedModel  # noqa: E402
from yolo_edge.model.split import SplitModel  # noqa: E402

ExportFn = Callable[..., ExportedModel]
T = TypeVar("T")
_DECODES: dict[int, tuple[onnx.ModelProto, Executable]] = {}  # by the decode graph's id, kept alive beside it


def output0(split: SplitModel, outputs: dict[str, np.ndarray]) -> np.ndarray:
    """``output0`` of an executor's frame result: as it is where a unit runs the whole model, else the split's
    ONNX decode subgraph (FP32, CPU) over the head's raw outputs, which the detector decodes itself candidates
    first (``tests/test_pipeline.py`` shows the two decodes give the same detections)."""
    from yolo_edge.backends import cpu_backend

    if "output0" in outputs:
        return outputs["output0"]
    decode = split["decode"].model
    if id(decode) not in _DECODES:
        _DECODES[id(decode)] = (decode, cpu_backend().compile(decode, "fp32"))
    exe = _DECODES[id(decode)][1]
    return exe.run({t.name: outputs[t.name] for t in exe.inputs})["output0"]


LOCKS = "YOLO_EDGE_TEST_LOCKS"  # the folder of the locks below, made by the controller, inherited by its workers


def installed_from() -> tuple[Path | None, Path]:
    """Where pip installed ``yolo_edge`` in this environment (None for an editable install, which is the source tree
    by design: it puts no package folder in site-packages) and where this process imported it from. Read from the
    environment's site-packages, not from ``importlib.metadata``, which finds a source tree's ``*.egg-info`` first
    when the tree is on ``sys.path``."""
    import sysconfig

    import yolo_edge

    package = Path(sysconfig.get_paths()["purelib"], "yolo_edge", "__init__.py")
    return (package.resolve() if package.is_file() else None), Path(yolo_edge.__file__).resolve()


def pytest_configure(config: pytest.Config) -> None:
    """The suite tests what pip installed: from a regular install, ``yolo_edge`` must be imported from it, not from
    the source tree beside the tests (``--import-mode=append`` in the ini options puts the tree after the
    installed packages; ``python -m pytest`` would put the working folder first: run ``pytest``), and the
    commands the tests start (``python -m yolo_edge.cli.main``) must not import the working folder's copy either
    (``PYTHONSAFEPATH``). The xdist controller (``-n`` above 0) makes the lock folder, each worker its mark in it
    (:func:`_live`); one process (``-n 0``) needs none."""
    installed, imported = installed_from()
    if installed is not None and installed != imported:
        raise pytest.UsageError(
            f"the tests import yolo_edge from {imported}, not from the installed package at {installed}: "
            "run `pytest` (not `python -m pytest`, which puts the working folder first)"
        )
    os.environ["PYTHONSAFEPATH"] = "1"
    if not os.environ.get("PYTEST_XDIST_WORKER") and config.getoption("numprocesses", default=None):
        import tempfile

        os.environ[LOCKS] = tempfile.mkdtemp(prefix="yolo-edge-test-locks-")
    elif os.environ.get("PYTEST_XDIST_WORKER") and LOCKS in os.environ:
        _live().touch()


def _live() -> Path:
    """This worker's mark in the lock folder while it still runs tests (:func:`_share`)."""
    return Path(os.environ[LOCKS], f"live-{os.environ['PYTEST_XDIST_WORKER']}")


def pytest_sessionfinish(session: pytest.Session) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") and LOCKS in os.environ:
        _live().unlink(missing_ok=True)  # no test left for it: the others may take its cores


def _share(alone: bool) -> str:
    """The cores a test's inference sessions may use: all of them for an ``alone`` test, else an equal share among
    the workers still running tests (the last one left takes every core)."""
    cores = len(os.sched_getaffinity(0))
    live = 1 if alone else max(1, len(list(Path(os.environ[LOCKS]).glob("live-*"))))
    return str(max(1, cores // live))


def pytest_unconfigure(config: pytest.Config) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER") and LOCKS in os.environ:
        import shutil

        shutil.rmtree(os.environ.pop(LOCKS), ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None]:
    """Under xdist, a test marked ``alone`` (a Ray cluster: its health checks call a raylet starved by the other
    worker's deploys dead; a real unit timeout: a starved frame reads as a hang) runs with no test of another
    worker beside it, its fixtures' setup included. Every test holds a shared lock, an ``alone`` one the
    exclusive lock; a turnstile lets no new shared holder in while an ``alone`` test waits for it (no
    starvation)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    import fcntl

    root = Path(os.environ[LOCKS])
    alone = item.get_closest_marker("alone") is not None
    with open(root / "turnstile.lock", "a") as turnstile, open(root / "alone.lock", "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        if USER_THREADS is None:  # sessions compiled for this test (its fixtures' too) get its share
            os.environ[THREADS_ENV] = _share(alone)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: a worker per core, at most 4 (each holds ~3 GB and its own copy of the session fixtures)."""
    return max(1, min(len(os.sched_getaffinity(0)), 4))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``--dist loadgroup``, in the ini options) a module's tests run in one worker: its
    module-scoped fixtures are built once. The session's deploys are built once for all workers (:func:`_once`)."""
    for test in items:
        if isinstance(test, pytest.Function):
            test.add_marker(pytest.mark.xdist_group(test.module.__name__))


def _shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder every xdist worker of this run sees (the parent of the workers' own base folders)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _once(tmp_path_factory: pytest.TempPathFactory, key: str, build: Callable[[Path], T]) -> T:
    """``build(folder)`` once per test run, by whichever xdist worker asks first: the others wait on its lock and
    read its pickled result (what it names, a bundle, lies in ``folder``, shared too). One deploy, not one per
    worker, and no module has to share a worker with every other user of that deploy."""
    import fcntl
    import pickle

    folder = _shared_root(tmp_path_factory) / f"shared-{key}"
    with open(f"{folder}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = folder / "result.pickle"
        if done.exists():
            result: T = pickle.loads(done.read_bytes())
            return result
        if folder.exists():  # a worker that failed building it: built anew
            import shutil

            shutil.rmtree(folder)
        folder.mkdir()
        result = build(folder)
        partial = done.with_suffix(".partial")
        partial.write_bytes(pickle.dumps(result))
        partial.replace(done)  # whole or absent: a worker killed while writing it leaves none
        return result


@pytest.fixture(scope="session")
def exported(tmp_path_factory: pytest.TempPathFactory) -> ExportFn:
    """``exported("yolov8n.yaml", (320, 320))`` exports once per session and returns the ExportedModel."""
    cache: dict[tuple[str, tuple[int, int]], ExportedModel] = {}

    def get(model: str, imgsz: tuple[int, int] = (320, 320)) -> ExportedModel:
        key = (model, imgsz)
        if key not in cache:
            out = tmp_path_factory.mktemp(f"{Path(model).stem}_{imgsz[0]}x{imgsz[1]}")
            cache[key] = export_model(model, imgsz=imgsz, out_dir=out)
        return cache[key]

    return get


@pytest.fixture(scope="session")
def yaml_nc3(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A YOLOv8n model yaml with 3 classes (the scale is read from the 'yolov8n' in the file name)."""
    import yaml
    from ultralytics.utils import ROOT

    cfg = yaml.safe_load((ROOT / "cfg" / "models" / "v8" / "yolov8.yaml").read_text())
    cfg["nc"] = 3
    path = tmp_path_factory.mktemp("cfg") / "yolov8n-nc3.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> ExportedModel:
    """The shipped demo model (trained YOLOv8n, 6 shape classes) exported at 320."""
    from yolo_edge.model.meta import demo_model_path

    return export_model(demo_model_path(), imgsz=320, out_dir=tmp_path_factory.mktemp("demo"))


# Every test config calibrates on the same images (the shipped set's first CALIB_IMAGES, for the demo): a subgraph
# quantized for one test is the session cache's entry for the next, not a quantization of its own.
CALIB_IMAGES = 12


@pytest.fixture(scope="session")
def fast_cfg():  # type: ignore[no-untyped-def]
    """The shipped deploy config with fewer calibration images and timing runs, for tests."""
    from dataclasses import replace

    from yolo_edge.core.config import load_deploy_config

    cfg = load_deploy_config()
    checks = replace(
        cfg.checks,
        precision=replace(cfg.checks.precision, images=4),
        performance=replace(cfg.checks.performance, warmup=1, runs=3),
    )
    # near-ties judged only where a test asks for it (test_search): each one is a full judgement
    return replace(
        cfg,
        calib_images=CALIB_IMAGES,
        checks=checks,
        plan=replace(cfg.plan, search_margin=0.0),
        validate=replace(cfg.validate, conditions=()),  # judged where a test asks for them (small_cfg)
    )


@pytest.fixture(scope="session")
def calib_images(demo: ExportedModel) -> list:  # type: ignore[type-arg]
    from yolo_edge.pipeline.preprocess import default_calib_dir, load_calibration

    return load_calibration(default_calib_dir(), demo.meta.imgsz, 16)


@pytest.fixture(scope="session", autouse=True)
def _quant_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep the yolo-edge cache (INT8 graphs, exports) inside the test session, one for all its xdist workers (an
    entry is written atomically with its digest: two workers writing the same key write the same bytes)."""
    cache = _shared_root(tmp_path_factory) / "yolo-edge-cache"
    cache.mkdir(exist_ok=True)
    os.environ["YOLO_EDGE_CACHE"] = str(cache)


@pytest.fixture(scope="session")
def second_model() -> Path:
    """A user's own model: YOLOv8n fine-tuned from the demo to 2 classes the demo does not have (coin, spark)."""
    return SECOND_MODEL


@pytest.fixture(scope="session")
def small_cfg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped deploy config as a file, with fewer calibration images and timing runs and a generous SLA."""
    import yaml

    from yolo_edge.core.config import configs_dir

    cfg = yaml.safe_load((configs_dir() / "default.yaml").read_text())
    cfg["calib_images"] = CALIB_IMAGES
    cfg["checks"]["precision"]["images"] = 4
    cfg["checks"]["performance"].update(warmup=1, runs=3)
    cfg["validate"].update(latency_warmup=2, latency_runs=12, sla_ms=10000.0)
    cfg["plan"]["search_margin"] = 0.0  # near-ties judged only where a test asks for it (test_search)
    cfg["validate"].update(conditions=["night", "blur"], conditions_images=40)  # two, on the small judging set
    path = tmp_path_factory.mktemp("cfg") / "small.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="session")
def few_images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of 16 unlabelled images (calibration images not among the first 40 deploy calibrates on):
    quick agreement data where a test needs a deploy, not a measurement of accuracy."""
    import shutil

    from yolo_edge.pipeline.preprocess import default_calib_dir

    folder = tmp_path_factory.mktemp("few_images")
    for p in sorted(default_calib_dir().glob("*.jpg"))[40:56]:
        shutil.copy(p, folder)
    return folder


@pytest.fixture(scope="session")
def demo_split(demo: ExportedModel):  # type: ignore[no-untyped-def]
    """The demo model split into its four subgraphs."""
    from yolo_edge.model.split import split_model

    return split_model(demo)


@pytest.fixture(scope="session")
def tensors(demo_split, calib_images: list) -> list:  # type: ignore[no-untyped-def, type-arg]
    """Every boundary tensor of 16 calibration images, from FP32 runs of the demo's subgraphs."""
    from yolo_edge.plan.placement import boundary_tensors

    return boundary_tensors(demo_split, calib_images)


@pytest.fixture(scope="session")
def small_val(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 40-image labelled val set of the demo's shapes (seed 0), its data.yaml."""
    from yolo_edge.demo.shapes import write_dataset

    return write_dataset(tmp_path_factory.mktemp("small") / "data", seed=0, sizes={"val": 40})


@pytest.fixture(scope="session")
def tiny_cfg(small_cfg: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small config with fewer judging images still: for the tests that deploy many times or through a vendor's
    simulator (a second per call) and check what was placed and run, not how accurate it is."""
    import yaml

    cfg = yaml.safe_load(small_cfg.read_text())
    cfg["checks"]["precision"]["images"] = 2
    cfg["validate"].update(latency_warmup=1, latency_runs=6, conditions=[])
    path = tmp_path_factory.mktemp("tiny") / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="session")
def tiny_images(few_images: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 6 of ``few_images``: agreement data for ``tiny_cfg``."""
    import shutil

    folder = tmp_path_factory.mktemp("tiny_images")
    for p in sorted(few_images.iterdir())[:6]:
        shutil.copy(p, folder)
    return folder


@pytest.fixture(scope="session")
def small_deploy(tiny_cfg: Path, tiny_images: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """``small_deploy(device)``: the demo deployed to ``device`` with the tiny config on ``tiny_images``, once per
    device and test run (the tests that use it only read the bundle); beside the bundle, ``workers_started``: the
    toolchain worker processes the deploy started."""
    from yolo_edge.flows.deploy import DeployRequest, DeployResult, deploy

    done: dict[str, DeployResult] = {}

    def build(device: str, folder: Path) -> DeployResult:
        from yolo_edge.toolchains.worker import Worker

        before = Worker.started
        result = deploy(
            DeployRequest(device=device, config=tiny_cfg, data=tiny_images), quiet=True, out=folder / "bundle"
        )
        (folder / "workers_started").write_text(str(Worker.started - before))  # a vendor's toolchain: once a deploy
        return result

    def get(device: str) -> DeployResult:
        if device not in done:
            done[device] = _once(tmp_path_factory, f"deploy-{device}", lambda folder: build(device, folder))
        return done[device]

    return get


@pytest.fixture(scope="session")
def deployed(small_val: Path, small_cfg: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The demo deployed to host-lowp with the small config on ``small_val``: one deploy shared by the tests
    that need a bundle or a report (none of them changes it)."""
    from yolo_edge.flows.deploy import DeployRequest, deploy

    def build(folder: Path):  # type: ignore[no-untyped-def]
        return deploy(
            DeployRequest(device="host-lowp", data=small_val, config=small_cfg), out=folder / "bundle", quiet=True
        )

    return _once(tmp_path_factory, "deployed", build)


@pytest.fixture(scope="session")
def deployed_cpu(tiny_cfg: Path, tiny_images: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo deployed to the ``cpu`` profile (onnxruntime only: what a board install runs), its bundle."""
    from yolo_edge.flows.deploy import DeployRequest, deploy

    def build(folder: Path):  # type: ignore[no-untyped-def]
        return deploy(DeployRequest(device="cpu", data=tiny_images, config=tiny_cfg), out=folder / "bundle", quiet=True)

    return Path(_once(tmp_path_factory, "deployed-cpu", build).bundle)


def plan_bundle(out: Path, split, plan, tensors: list, cfg) -> Path:  # type: ignore[no-untyped-def, type-arg]
    """``plan`` (no proof run) built and written as a bundle, as deploy writes one: its units' compiled files, their
    FP32 graphs, the boundary sample and the calibration images it was built with."""
    from yolo_edge.backends.builder import Builder
    from yolo_edge.bundle import BundleMeta, Contents, DataRecord, bundle_files, write_bundle
    from yolo_edge.core.config import load_profile
    from yolo_edge.core.version import __version__
    from yolo_edge.pipeline.preprocess import default_calib_dir
    from yolo_edge.runtime.build import build_units, plan_units, unit_sample
    from yolo_edge.runtime.events import EventLog

    profile = load_profile(plan.device)
    calib_files = sorted(default_calib_dir().glob("*.jpg"))[: cfg.calib_images]
    events = EventLog()
    builder = Builder(profile)
    units = build_units(split, plan, builder, tensors[: cfg.calib_images], events)
    planned = plan_units(split, plan)
    data = DataRecord("demo", "labels", None)
    names = tuple(p.name for p in calib_files)
    meta = BundleMeta(__version__, split.exported.meta, profile.name, "split", data, 100.0, True, names)
    sample = unit_sample(planned, tensors[0], builder)
    contents = Contents(
        meta=meta,
        exported=split.exported,
        split=split,
        plan=plan,
        profile=profile,
        config=cfg,
        planned=planned,
        units=units,
        sample=sample,
        calib_files=calib_files,
        events=events,
    )
    files = bundle_files(contents, {})
    builder.close()
    return write_bundle(out, files)
