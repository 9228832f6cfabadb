"""Fuzz: an int8 FC on tokens (``mrvl.qnn_fc_tokens``) is onnxruntime's run of the QDQ model as
written, bit for bit: random shapes, scales, weights and fused Relus or LUTs; every MatMul becomes an
int8 FC layer written NHWC, its MACs int8, and the artifact's output equals the QDQ model's."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import event, given, note, settings

import mrvl_convert
from mrvl_convert.runtime.session import HybridSession
from mrvl_convert.runtime.options import ort_options, qdq_as_written
from support.strategies.fc3d import token_fc_models

pytestmark = pytest.mark.system


@settings(max_examples=max(4, settings.default.max_examples // 5), deadline=None)
@given(gm=token_fc_models())
def test_token_fc_is_bit_equal_to_the_qdq_model(gm):
    note(gm.description)
    with tempfile.TemporaryDirectory() as tmp:
        art = Path(tmp) / "fc"
        result = mrvl_convert.convert(gm.model, art)
        assert result.report["precision"]["shares"]["int8"] == 1.0, result.report["precision"]
        fcs = [n["attrs"] for n in json.loads(next(art.glob("*-nodes.json")).read_text())["nodes"]
               if n["op"] == "tvm_op" and n["attrs"].get("layer_name") == ["FC"]]
        assert len(fcs) == 1 and fcs[0]["data_layout"] == ["NHWC"]
        activation = fcs[0].get("activation_type", [""])[0]
        event(f"fused {activation or 'none'}")
        got = dict(zip([o.name for o in gm.model.graph.output],
                       HybridSession(art).run(None, gm.feeds)))
    import onnxruntime as ort
    reference = ort.InferenceSession(gm.model.SerializeToString(), qdq_as_written(ort_options()),
                                     providers=["CPUExecutionProvider"])
    want = reference.run(None, gm.feeds)[0]
    np.testing.assert_array_equal(got[gm.model.graph.output[0].name], want)
