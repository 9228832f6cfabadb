"""Small norms whose sums of squares leave fp16's range (``frontend/norm_range.py``): an FC whose
outputs reach thousands, a T5 RMSNorm or a LayerNorm of them, another FC."""
from __future__ import annotations

from typing import List

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: The norm's name: its ReduceMean of squares (``norm_scales``' key).
NORM = "norm/ReduceMean"
FORMS = ("t5", "reciprocal", "layernorm")


def norm_model(form: str = "t5", weight_scale: float = 250.0, seed: int = 0) -> onnx.ModelProto:
    """x [1, 8, 16] -> MatMul (outputs about 4 * ``weight_scale``) -> the norm -> gamma ->
    MatMul -> y [1, 8, 8]. ``form``: ``t5`` (``Mul(h, Div(1, Sqrt(..)))`` of ``Pow(h, 2)``, as
    T5's export), ``reciprocal`` (``Mul(h, Reciprocal(Sqrt(..)))`` of ``Mul(h, h)``) or
    ``layernorm`` (``Div(h - mean(h), Sqrt(..))``)."""
    rng = np.random.default_rng(seed)
    init = [numpy_helper.from_array(a, n) for n, a in [
        ("w1", (rng.standard_normal((16, 16)) * weight_scale).astype(np.float32)),
        ("w2", (rng.standard_normal((16, 8)) * 0.3).astype(np.float32)),
        ("gamma", rng.uniform(0.5, 1.5, 16).astype(np.float32)),
        ("two", np.array(2.0, np.float32)), ("axes", np.array([-1], np.int64)),
        ("eps", np.array(1e-6, np.float32)), ("one", np.array(1.0, np.float32))]]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1")] + _norm(form) + [
        helper.make_node("Mul", ["n", "gamma"], ["g"], name="norm/Mul_1"),
        helper.make_node("MatMul", ["g", "w2"], ["y"], name="fc2")]
    graph = helper.make_graph(
        nodes, f"norm_{form}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8])], init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


def _norm(form: str) -> List[onnx.NodeProto]:
    node = helper.make_node
    d = "h"
    nodes = []
    if form == "layernorm":
        d = "d"
        nodes = [node("ReduceMean", ["h", "axes"], ["mu"], name="ln/Mean"),
                 node("Sub", ["h", "mu"], ["d"], name="ln/Sub")]
    square = (node("Mul", [d, d], ["sq"], name="norm/Square") if form == "reciprocal"
              else node("Pow", [d, "two"], ["sq"], name="norm/Pow"))
    nodes += [square, node("ReduceMean", ["sq", "axes"], ["ms"], name=NORM),
              node("Add", ["ms", "eps"], ["v"], name="norm/Add"),
              node("Sqrt", ["v"], ["q"], name="norm/Sqrt")]
    if form == "layernorm":
        return nodes + [node("Div", [d, "q"], ["n"], name="norm/Div")]
    inverse = (node("Reciprocal", ["q"], ["r"], name="norm/Reciprocal") if form == "reciprocal"
               else node("Div", ["one", "q"], ["r"], name="norm/Div"))
    return nodes + [inverse, node("Mul", [d, "r"], ["n"], name="norm/Mul")]
