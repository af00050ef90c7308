"""The model: its metadata and ONNX read back (``meta``, what a board imports), the exporter (``export``, the only
module that imports torch/ultralytics), the graph analysis and rewrites, the cut into four subgraphs (``split``) and
the decode.
"""
