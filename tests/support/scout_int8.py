"""The int8 conversion the scout's tests share: a built model saved, converted with Marvell's
recipe on given calibration samples, and the artifact held to onnxruntime's run of the QDQ
model it keeps, in output steps (as the int8 corpus measures)."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import numpy as np
import onnx

import mrvl_convert
from mrvl_convert.quantize.recipe import Quantization
from support.int8 import output_scale, run_both, steps


def int8_artifact(model: onnx.ModelProto, tmp_path: Path, calibration: Dict[str, np.ndarray]
                  ) -> "mrvl_convert.Result":
    """``model`` saved under ``tmp_path`` and converted there (``out/``) in int8."""
    path = tmp_path / f"{model.graph.name}.onnx"
    onnx.save(model, path)
    return mrvl_convert.convert(path, tmp_path / "out", quantize=Quantization(calibration))


def assert_near_qdq(result: "mrvl_convert.Result", feeds: List[Dict[str, np.ndarray]],
                    share: float = 0.99, most: int = 2) -> None:
    """At least ``share`` of the outputs within one int8 step of the QDQ model's, none more
    than ``most`` steps apart."""
    qdq = result.out_dir / result.manifest["quantization"]["file"]
    got, want = run_both(qdq, result.out_dir, feeds)
    diff = steps(got, want, output_scale(onnx.load(qdq)))
    assert np.mean(diff <= 1) >= share and diff.max() <= most, \
        np.bincount(diff.astype(int).ravel())
