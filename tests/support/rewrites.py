"""Models whose layers the converter or the quantizer rewrites: what the analysis and the layer
comparison must map through (``verify/float_form.py``)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper


def sum_of_three() -> onnx.ModelProto:
    """conv1 -> div1 -> conv2, then Sum(c1, q1, c2): the converter's canonicalization makes the
    Sum two Adds, the first a node (and a partial sum) the float model does not have."""
    rng = np.random.default_rng(0)
    inits = {"w1": rng.standard_normal((8, 3, 3, 3)) * 0.3, "b1": np.zeros(8),
             "d": np.full((1,), 4.0), "w2": rng.standard_normal((8, 8, 1, 1)) * 0.3,
             "b2": np.zeros(8)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1] * 4),
             helper.make_node("Div", ["c1", "d"], ["q1"], name="div1"),
             helper.make_node("Conv", ["q1", "w2", "b2"], ["c2"], name="conv2"),
             helper.make_node("Sum", ["c1", "q1", "c2"], ["y"], name="sum1")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8, 8, 8])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
