"""Proof: accuracy (pycocotools mAP, drift, agreement) and latency (percentiles, SLA)."""
