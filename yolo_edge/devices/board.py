"""A simulated board's CPU: every phase of a frame that the board's CPU runs, modelled from the profile's CPU
model (``cpu:``, fitted to published figures for that CPU, named in the profile) instead of measured on the
host that deploys. With it the end-to-end latency of a plan for a simulated board, and its SLA verdict, are
the board's, whatever machine deploy ran on (``tests/test_board.py`` slows every onnxruntime call and gets the
same percentiles).

- a CPU unit (the FP32 twin, a subgraph the plan keeps off the NPU, the whole-cpu reference): the three costs of
  :func:`yolo_edge.devices.cost.cpu_time` over its graph (arithmetic, activation traffic, one launch per op);
- letterbox: a memory-bound pass over the source image, the resized image and the float tensor (resize and
  normalise arithmetic at the CPU model's rate), one launch per pass;
- NMS over ``output0`` (a whole-model unit): reading the detector output once, the class maximum per anchor,
  sorting the candidates over the confidence threshold and the greedy IoU pass over them;
- the candidate-first decode of the head's raw outputs (``yolo_edge.model.decode``) and its NMS: a scan of every
  anchor's class logits for its best, then the DFL softmax, expectation and dist2bbox of the candidates only
  (their box distributions read), then NMS over them. Priced by that work and one launch per pass, not by the
  ONNX decode's operator count (its 24 launches at an earlier two-point fit's 545 us were 14 ms at 320).

Each figure is labelled ``modelled (board)`` wherever it is shown. ``yolo-edge bench`` on the board itself
measures instead (no board model there: the accelerator is present), and its result can be the baseline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from yolo_edge.core.config import CpuModel
from yolo_edge.devices.cost import cpu_time
from yolo_edge.model.graph import GraphInfo

RESIZE_OPS = 12  # bilinear resize: four taps, their weights and the sum, per output value
NORMALISE_OPS = 2  # scale to [0, 1] and the channel swap, per value
LETTERBOX_PASSES = 4  # resize, pad, normalise, HWC -> CHW
IOU_OPS = 16  # one box pair's intersection over union and the compare
SORT_OPS = 8  # per candidate and level of the candidates' sort
NMS_PASSES = 3  # class maximum, threshold, greedy suppression
SCAN_OPS = 2  # per class logit: the running maximum and its compare
DFL_OPS = 12  # per box-distribution value: the max, exp, sum, divide and the expectation's multiply-add
BOX_OPS = 16  # per candidate: dist2bbox, the stride, xywh -> xyxy and the mapping back to the image
DECODE_PASSES = 3  # the logit scan, the candidates' DFL, their boxes


@dataclass(frozen=True)
class BoardCpu:
    """The board CPU of a simulated profile (``DeviceProfile.cpu``): modelled seconds of its phases."""

    cpu: CpuModel

    @property
    def _flops(self) -> float:
        return self.cpu.gflops * 1e9

    @property
    def _bps(self) -> float:
        return self.cpu.dram_gbps * 1e9

    def graph_s(self, info: GraphInfo) -> float:
        """An FP32 graph run on the board's CPU."""
        return cpu_time(info, self.cpu).total_s

    def letterbox_s(self, height: int, width: int, imgsz: tuple[int, int]) -> float:
        """Letterboxing one ``height`` x ``width`` BGR image to the model's ``imgsz`` float tensor."""
        r = min(imgsz[0] / height, imgsz[1] / width)
        resized = round(height * r) * round(width * r) * 3
        canvas = imgsz[0] * imgsz[1] * 3
        moved = height * width * 3 + resized + canvas + canvas * 4  # u8 read, u8 resized, u8 padded, f32 out
        ops = resized * RESIZE_OPS + canvas * NORMALISE_OPS
        return moved / self._bps + ops / self._flops + LETTERBOX_PASSES * self._launch_s

    def nms_s(self, values: int, anchors: int, candidates: int) -> float:
        """NMS over a detector output of ``values`` floats for ``anchors`` anchors, ``candidates`` of them over the
        confidence threshold."""
        ops = values + anchors
        passes = NMS_PASSES - 1  # the class maximum and the threshold; the suppression is suppress_s's
        return values * 4 / self._bps + ops / self._flops + passes * self._launch_s + self.suppress_s(candidates)

    def suppress_s(self, candidates: int) -> float:
        """The candidates' sort by score and the greedy IoU suppression over them."""
        sort = candidates * max(math.log2(candidates), 1.0) * SORT_OPS if candidates else 0.0
        return (sort + candidates * candidates * IOU_OPS / 2) / self._flops + self._launch_s

    def decode_s(self, anchors: int, classes: int, reg_max: int, candidates: int) -> float:
        """The candidate-first decode of one frame: ``anchors`` x ``classes`` logits scanned, ``candidates`` of them
        over the confidence threshold decoded (4 x ``reg_max`` distribution values each). Its NMS: suppress_s."""
        dfl = candidates * 4 * reg_max
        ops = anchors * classes * SCAN_OPS + dfl * DFL_OPS + candidates * BOX_OPS
        moved = (anchors * classes + dfl) * 4
        return moved / self._bps + ops / self._flops + DECODE_PASSES * self._launch_s

    @property
    def _launch_s(self) -> float:
        return self.cpu.op_overhead_us * 1e-6
