"""Models whose layers the converter or the quantizer rewrites: what the analysis and the layer
comparison must map through (``verify/float_form.py``)."""
from __future__ import annotations

from typing import Optional

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


def equalizable_chain(middle: Optional[str] = "Relu", seed: int = 0, spread: float = 100.0
          ) -> onnx.ModelProto:
    """conv1 (3->8, its output channels' ranges spread by ``spread``) -> ``middle`` -> conv2
    (8->8, its input channels spread the other way, so every channel matters as much: what a
    folded BatchNormalization leaves) -> conv3 (depthwise, 8 groups) -> y: two pairs, the
    second into a grouped Conv."""
    rng = np.random.default_rng(seed)
    spread_by = np.geomspace(1.0, 1.0 / spread, 8)
    w1 = rng.standard_normal((8, 3, 3, 3)) * spread_by[:, None, None, None]
    w2 = rng.standard_normal((8, 8, 3, 3)) * 0.2 / spread_by[None, :, None, None]
    inits = {"w1": w1, "b1": rng.standard_normal(8) * 0.01 * spread_by,
             "w2": w2, "b2": rng.standard_normal(8) * 0.1,
             "w3": rng.standard_normal((8, 1, 3, 3)) * 0.3, "b3": np.zeros(8)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1] * 4)]
    into = "c1"
    if middle == "Clip":
        nodes.append(helper.make_node("Clip", ["c1", "lo", "hi"], ["m1"], name="act"))
        inits.update(lo=np.array(0.0), hi=np.array(6.0))
        into = "m1"
    elif middle == "PRelu":
        nodes.append(helper.make_node("PRelu", ["c1", "slope"], ["m1"], name="act"))
        inits["slope"] = rng.uniform(0.05, 0.5, (8, 1, 1))
        into = "m1"
    elif middle is not None:
        nodes.append(helper.make_node(middle, ["c1"], ["m1"], name="act"))
        into = "m1"
    nodes += [helper.make_node("Conv", [into, "w2", "b2"], ["c2"], name="conv2", pads=[1] * 4),
              helper.make_node("Conv", ["c2", "w3", "b3"], ["y"], name="conv3", pads=[1] * 4,
                               group=8)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8, 8, 8])],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
