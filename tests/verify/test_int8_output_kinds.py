"""verify's cost of int8 against fp32 says of each output what means something
(``verify/output_kinds.py``, moved from the corpus harness): an output with one value per sample
is judged by its error over its peak, not by a cosine that is +-1 whatever the error (a VAD's
speech probability off by 2.9 times its peak was named by the corpus harness and not by the
CLI)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from mrvl_convert.verify.compare import compare
from mrvl_convert.verify.output_kinds import error_over_peak
from support.int8 import converted_int8
from support.models import Builder

def _heads(seed: int = 0) -> onnx.ModelProto:
    """A CNN with three heads: a score [1, 1] (one value), a box [1, 4] (regression) and class
    probabilities [1, 3] (a Softmax behind a Flatten)."""
    b = Builder(seed)
    x = b.input("x", [1, 3, 8, 8])
    y = b.op("Relu", [b.conv(x, 3, 4, pads=[1, 1, 1, 1])])
    y = b.op("Flatten", [b.op("GlobalAveragePool", [y])], axis=1)
    score, box = b.gemm(y, 4, 1, transB=1), b.gemm(y, 4, 4, transB=1)
    probs = b.op("Flatten", [b.op("Softmax", [b.gemm(y, 4, 3, transB=1)], axis=1)], axis=1)
    return b.model([score, box, probs])


def test_error_over_peak():
    assert error_over_peak([np.array([[0.521]])], [np.array([[0.135]])]) == \
        pytest.approx(0.386 / 0.135)
    assert error_over_peak([np.zeros(1)], [np.zeros(1)]) == 0.0
    assert error_over_peak([np.ones(1)], [np.zeros(1)]) == float("inf")


def test_a_wrecked_one_value_output_is_named(tmp_path):
    model = _heads()
    score, box, probs = [o.name for o in model.graph.output]
    result, qdq = converted_int8(model, tmp_path / "art", span=1e-3)  # saturates: wrecked
    cost = compare(qdq, result.out_dir, fp32=model).fp32
    rows = {r.tensor: r for r in cost.rows}
    assert rows[score].cosine is None and rows[score].over_peak > 0.5
    assert score in [r.tensor for r in cost.wrecked]
    assert "off by" in cost.warning() and "one-value error/peak" in cost.summary()
    assert rows[box].cosine is not None and rows[probs].cosine is not None
    assert cost.to_dict()["outputs"][0]["over_peak"] == pytest.approx(rows[score].over_peak)


def test_a_good_one_value_output_is_not_named(tmp_path):
    model = _heads()
    result, qdq = converted_int8(model, tmp_path / "art", span=3.0)
    cost = compare(qdq, result.out_dir, fp32=model).fp32
    score = model.graph.output[0].name
    assert next(r for r in cost.rows if r.tensor == score).over_peak < 0.5
    assert score not in [r.tensor for r in cost.wrecked]

