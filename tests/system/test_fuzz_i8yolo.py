"""Generated YOLOv8 detectors (bins, classes, scales, input size drawn) quantized with Marvell's
recipe: the box decoding head stays on the accelerator with the backbone (one Mrvl subgraph, no
CPU stage) and verify against the QDQ model passes."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, note, settings

import mrvl_convert
from mrvl_convert.quantize import Quantization
from support.strategies.i8yolo import yolov8_models

pytestmark = pytest.mark.system


@settings(max_examples=max(3, settings.default.max_examples // 8), deadline=None)
@given(case=yolov8_models())
def test_an_int8_yolov8_head_stays_whole_and_verifies(case):
    model, shapes = case
    rng = np.random.default_rng(0)
    shape = shapes["images"]
    with tempfile.TemporaryDirectory(prefix="i8yolo_") as tmp:
        calibration = {"images": rng.uniform(-1, 1, [8] + shape[1:]).astype(np.float32)}
        result = mrvl_convert.convert(model, Path(tmp) / "out", shapes=shapes,
                                      quantize=Quantization(calibration))
        summary = result.summary
        note(str(summary))
        assert (summary["mrvl_subgraphs"], summary["cpu_subgraphs"]) == (1, 0)
        qdq = result.out_dir / result.manifest["quantization"]["file"]
        feeds = [{"images": rng.uniform(-1, 1, shape).astype(np.float32)} for _ in range(2)]
        comparison = mrvl_convert.compare(qdq, result.out_dir, feeds)
        note(str([(r.tensor, r.max_abs) for r in comparison.judged_rows]))
        assert comparison.passed
