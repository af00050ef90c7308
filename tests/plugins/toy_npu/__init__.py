"""A toy NPU backend from a package of its own, as a vendor would ship one outside yolo-edge: registered through the
``yolo_edge.backends`` entry-point group (``spec.SPEC``), built by ``backend.backend_for``. Its numerics are
onnxruntime's on the CPU (FP32, and INT8 by its QDQ recipe); its profile (``toy-npu.yaml``) is a simulated board, so
its latency is modelled. ``tests/test_backends.py`` installs it in a temporary folder (a dist-info with its entry
point) and runs it through the contract test and a deploy, with no edit under ``yolo_edge/``."""
