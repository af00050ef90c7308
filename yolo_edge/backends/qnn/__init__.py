"""Qualcomm HTP: ONNX Runtime's QNN execution provider and QNN recipe (``backend``), its spec."""
