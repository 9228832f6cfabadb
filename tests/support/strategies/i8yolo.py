"""YOLOv8 detectors as exported (tests/support/yolov8_head.py) for the int8 head fuzz test:
the DFL's bins, the classes, the number of scales and the input size drawn."""
from __future__ import annotations

from typing import Dict, List, Tuple

import onnx
from hypothesis import strategies as st

from support.yolov8_head import yolov8_detect


@st.composite
def yolov8_models(draw) -> Tuple[onnx.ModelProto, Dict[str, List[int]]]:
    """(model, the input shape to pin): the input's sides multiples of the deepest stride. Two
    or three scales, as ultralytics' detectors have (with one, the head's Split has no Concat to
    undo: a 3-D Split on the CPU, in fp16 too)."""
    scales = draw(st.integers(2, 3))
    model = yolov8_detect(seed=draw(st.integers(0, 2 ** 16)),
                          reg=draw(st.sampled_from([4, 8, 16])),
                          classes=draw(st.integers(1, 5)), scales=scales)
    deepest = 8 * 2 ** (scales - 1)
    sides = [deepest * draw(st.integers(1, 3)) for _ in range(2)]
    return model, {"images": [1, 3] + sides}
