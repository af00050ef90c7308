"""ONNX Runtime: the CPU's FP32 reference and fallback, and INT8 by its QDQ recipe (``spec``, ``backend``)."""
