"""Generated forms the twelfth session's scout met in real models (``support/strategies/
scout.py``): a widened int8 weight becomes, bit for bit, the initializer onnxruntime computes
(``quantize/weights.py``), and two Ifs in any node order are put where every branch reads
what is made before it, computing what they did (``quantize/scope_order.py``)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from onnx import helper, numpy_helper

from mrvl_convert.quantize.scope_order import ordered_for_branches
from mrvl_convert.quantize.weights import weights_as_initializers
from support.scout_int8 import run_onnx
from support.strategies.scout import shuffled_two_ifs, two_ifs, widened_weights

pytestmark = pytest.mark.system


@settings(deadline=None)
@given(drawn=widened_weights())
def test_a_widened_weight_is_the_initializer_onnxruntime_computes(drawn):
    model, _ = drawn
    turned = weights_as_initializers(model)
    assert [n.name for n in turned.graph.node] == ["fc"]  # 8 and 16 bits are exact in float
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    exposed.graph.output.append(helper.make_empty_tensor_value_info("w"))
    k = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    feed = {"x": np.random.default_rng(0).standard_normal((1, k)).astype(np.float32)}
    w = run_onnx(exposed, feed)[1]
    made = numpy_helper.to_array(next(t for t in turned.graph.initializer if t.name == "w"))
    assert made.dtype == w.dtype and made.tobytes() == w.tobytes()
    want = run_onnx(model, feed, folded=True)[0]
    assert run_onnx(turned, feed, folded=True)[0].tobytes() == want.tobytes()


@settings(deadline=None)
@given(model=shuffled_two_ifs())
def test_ifs_in_any_order_are_put_in_an_order_the_checker_takes(model):
    ordered_for_branches(model)
    onnx.checker.check_model(model)
    feed = {"x": np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)}
    assert run_onnx(model, feed)[0].tobytes() == run_onnx(two_ifs(), feed)[0].tobytes()
