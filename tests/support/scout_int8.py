"""What the scout's tests share: a built model saved, converted with Marvell's int8 recipe on
given calibration samples, and the artifact held to onnxruntime's run of the QDQ model it keeps,
in output steps (as the int8 corpus measures); a model run on onnxruntime as written."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import numpy as np
import onnx
import onnxruntime as ort

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


def run_onnx(model: onnx.ModelProto, feed: Dict[str, np.ndarray], folded: bool = False
             ) -> List[np.ndarray]:
    """``model``'s outputs on onnxruntime: by default its nodes as written; ``folded``: with
    onnxruntime folding constants itself (its MatMul prepacks a constant B and sums in its own
    order, so a model and its folded twin compare so)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL if folded \
        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(None, feed)
