"""How many graphs a deploy compiles, and how many of them are distinct: every real ``Backend.compile`` of a
deploy of the demo (the checks', the planner's FP32 references, each trial's units, the reference, the whole-graph
plan), keyed by the backend, the graph, the resolved variant and the stored artifact (the calibration tensors are
left out of the key: a graph compiled again on other calibration would read as a repeat here, and none does).
Small settings (8 calibration images, 2 precision images, 6 judging images): the count, not the proof, is what
it shows. Prints the wall time, the count, the distinct count and where each repeat came from.

At 38c13f1 (each caller compiled on its own backends) a host-lowp deploy compiled 51 graphs for 18 distinct ones
and an rk3588 one 39 for 24 (three Rockchip builds done twice); with the deploy's one builder both compile each
graph once.

    YOLO_OFFLINE=1 python benchmarks/compile_count.py [--device host-lowp]
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import yaml

from yolo_edge.backends.base import Backend
from yolo_edge.core.config import configs_dir
from yolo_edge.core.host import cpu_name
from yolo_edge.flows.deploy import DeployRequest, deploy
from yolo_edge.pipeline.preprocess import default_calib_dir


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="host-lowp")
    args = p.parse_args()
    counts: Counter[tuple[str, str, str, bool]] = Counter()
    callers: defaultdict[tuple[str, str, str, bool], set[str]] = defaultdict(set)
    real = Backend.compile

    def counted(self: Backend, model: Any, variant: Any, calib: Any = None, artifact: Any = None) -> Any:
        graph = hashlib.blake2b(model.SerializeToString(), digest_size=6).hexdigest()
        key = (type(self).__name__, graph, self.resolve(variant).label, bool(artifact))
        counts[key] += 1
        frames = [f for f in traceback.extract_stack()[:-1] if "yolo_edge" in f.filename][-3:]
        callers[key].add(" < ".join(f"{Path(f.filename).name}:{f.name}" for f in reversed(frames)))
        return real(self, model, variant, calib, artifact)

    Backend.compile = counted  # type: ignore[method-assign]
    cfg = yaml.safe_load((configs_dir() / "default.yaml").read_text())
    cfg["calib_images"] = 8
    cfg["checks"]["precision"]["images"] = 2
    cfg["checks"]["performance"].update(warmup=1, runs=3)
    cfg["validate"].update(latency_warmup=1, latency_runs=6, sla_ms=10000.0)
    work = Path(tempfile.mkdtemp(prefix="compile-count-"))
    try:
        (work / "small.yaml").write_text(yaml.safe_dump(cfg))
        images = work / "images"
        images.mkdir()
        for path in sorted(default_calib_dir().glob("*.jpg"))[40:46]:
            shutil.copy(path, images)
        t0 = time.perf_counter()
        deploy(
            DeployRequest(device=args.device, config=work / "small.yaml", data=images), quiet=True, out=work / "bundle"
        )
        wall = time.perf_counter() - t0
    finally:
        shutil.rmtree(work, ignore_errors=True)
    repeats = {k: n for k, n in counts.items() if n > 1}
    print(f"CPU: {cpu_name()}")
    print(
        f"deploy --device {args.device} (small settings): {wall:.1f} s, {sum(counts.values())} compiles of "
        f"{len(counts)} distinct graphs, {sum(n - 1 for n in repeats.values())} repeats"
    )
    for key, n in sorted(repeats.items(), key=lambda kv: -kv[1]):
        print(f"  {n}x {key[0]} {key[1]} at {key[2]}: {'; '.join(sorted(callers[key]))}")


if __name__ == "__main__":
    import results_page

    with results_page.page("compile-count", "Compiles per deploy"):
        main()
