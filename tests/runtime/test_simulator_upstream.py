"""The simulator runs the real upstream TVM 0.19 Marvell codegen output (tests/data/reference)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from mrvl_convert.runtime import MrvlSimulator
from mrvl_convert.verify.tolerances import DEFAULT_TOLERANCE
from support.onnxref import run_model

REF = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                   "reference")
NODES = os.path.join(REF, "rfc_fashion_cnn.upstream-nodes.json")
CONSTS = os.path.join(REF, "rfc_fashion_cnn.upstream-consts.json")
ONNX = os.path.join(REF, "rfc_fashion_cnn.onnx")

pytestmark = pytest.mark.skipif(not os.path.exists(NODES), reason="reference data not present")


def test_upstream_pair_is_fully_supported():
    with open(NODES) as f:
        rows = MrvlSimulator().get_capability(json.load(f))
    assert [r["layer_name"] for r in rows] == ["layout_transform", "Conv2D", "Maxpool2D",
                                               "Conv2D", "Maxpool2D", "nn.batch_flatten", "FC",
                                               "FC"]
    assert all(r["supported"] for r in rows)


def test_upstream_pair_matches_the_onnx_model():
    import onnx

    model = onnx.load(ONNX)
    compiled = MrvlSimulator().compile(NODES, CONSTS)
    rng = np.random.default_rng(0)
    for _ in range(5):
        x = rng.random((1, 1, 28, 28), dtype=np.float32)
        [got] = compiled.run([x])
        [want] = run_model(model, {model.graph.input[0].name: x})
        err = np.abs(got - want).max()
        assert err <= DEFAULT_TOLERANCE.max_rel * np.abs(want).max()
        assert got.argmax() == want.argmax()
