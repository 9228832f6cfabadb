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


def stream_model(branch_scale: float = 14000.0, blocks: int = 3, seed: int = 0) -> onnx.ModelProto:
    """A pre-norm residual stream as T5's: h0 = FC(x) (about 4 * ``branch_scale``), then
    ``blocks`` times h += FC(RMSNorm(h)) (each branch about 4 * ``branch_scale``), a final
    RMSNorm -> y. With the default the stream itself passes 65504 (fp16's largest) in its last
    block while every FC output stays below it. Norms: ``norm{i}/ReduceMean``."""
    rng = np.random.default_rng(seed)
    node = helper.make_node
    init = [numpy_helper.from_array(np.array(v, np.float32), n)
            for n, v in (("two", 2.0), ("eps", 1e-6), ("one", 1.0))]
    init.append(numpy_helper.from_array(np.array([-1], np.int64), "axes"))
    nodes: List[onnx.NodeProto] = []

    def fc(x: str, name: str) -> str:
        w = (rng.standard_normal((16, 16)) * branch_scale / 4).astype(np.float32)
        init.append(numpy_helper.from_array(w, f"{name}_w"))
        nodes.append(node("MatMul", [x, f"{name}_w"], [f"{name}_out"], name=name))
        return f"{name}_out"

    def rms(x: str, i: int) -> str:
        p = f"norm{i}"
        nodes.extend([node("Pow", [x, "two"], [f"{p}_sq"], name=f"{p}/Pow"),
                      node("ReduceMean", [f"{p}_sq", "axes"], [f"{p}_ms"], name=f"{p}/ReduceMean"),
                      node("Add", [f"{p}_ms", "eps"], [f"{p}_v"], name=f"{p}/Add"),
                      node("Sqrt", [f"{p}_v"], [f"{p}_q"], name=f"{p}/Sqrt"),
                      node("Div", ["one", f"{p}_q"], [f"{p}_r"], name=f"{p}/Div"),
                      node("Mul", [x, f"{p}_r"], [f"{p}_n"], name=f"{p}/Mul")])
        return f"{p}_n"

    h = fc("x", "fc_in")
    for i in range(blocks):
        branch = fc(rms(h, i), f"fc{i}")
        nodes.append(node("Add", [h, branch], [f"res{i}"], name=f"residual{i}"))
        h = f"res{i}"
    nodes.append(node("Identity", [rms(h, blocks)], ["y"], name="out"))
    graph = helper.make_graph(
        nodes, "stream", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16])], init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
