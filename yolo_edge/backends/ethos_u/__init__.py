"""Arm Ethos-U: onnx2tf, TensorFlow Lite's quantizer and Vela in their own environment (``worker``), the backend and
LiteRT's delegate on the board (``backend``), its spec and toolchain (``spec``)."""
