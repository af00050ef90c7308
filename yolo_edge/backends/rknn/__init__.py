"""Rockchip RKNPU2: rknn-toolkit2 in its own environment (``worker``), the backend and RKNNLite on the board
(``backend``), its spec and toolchain (``spec``)."""
