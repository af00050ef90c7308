"""The tests' second model, a user's own: YOLOv8n fine-tuned from the demo to 2 classes the demo does not have
(``scripts/train_second_model.py``; ``tests/data/README.md``). Importable without pytest (``benchmarks/`` read it)."""

from __future__ import annotations

from pathlib import Path

SECOND_MODEL = Path(__file__).parent / "data" / "coins_sparks_yolov8n.pt"
SECOND_CLASSES = {
    0: "coin",
    3: "spark",
}  # shape class id -> the second model's class name
