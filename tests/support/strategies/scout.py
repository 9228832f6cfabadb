"""Forms the twelfth session's scout met in real models, drawn: a weight stored in int8 (or
uint8, int16) and widened at run time (``Mul(Cast(q), scale)``, a zero point ``Sub`` first or
not; scales per column, per row or one), and a graph of two Ifs whose second reads the first's
output and an initializer only inside its branches, its nodes in any order onnxruntime's
quantizer may write them."""
from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

_INTS = {TensorProto.INT8: (np.int8, -128, 127), TensorProto.UINT8: (np.uint8, 0, 255),
         TensorProto.INT16: (np.int16, -32768, 32767)}


@st.composite
def widened_weights(draw) -> Tuple[onnx.ModelProto, List[str]]:
    """(x[1, K] -> MatMul by a widened weight [K, N], the names of the widening nodes)."""
    k, n = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    elem = draw(st.sampled_from(sorted(_INTS)))
    dtype, low, high = _INTS[elem]
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    scale_shape = draw(st.sampled_from([[], [1, n], [k, 1], [k, n]]))
    scale = (rng.random(scale_shape) * draw(st.sampled_from([1e-3, 0.02, 7.0])) + 1e-6)
    inits = [numpy_helper.from_array(rng.integers(low, high + 1, (k, n)).astype(dtype), "q"),
             numpy_helper.from_array(np.asarray(scale, np.float32), "scale")]
    nodes = [helper.make_node("Cast", ["q"], ["f"], name="widen", to=TensorProto.FLOAT)]
    source = "f"
    if draw(st.booleans()):
        zero = float(draw(st.integers(low, high)))
        inits.append(numpy_helper.from_array(np.array(zero, np.float32), "zero"))
        nodes.append(helper.make_node("Sub", ["f", "zero"], ["c"], name="center"))
        source = "c"
    nodes += [helper.make_node("Mul", [source, "scale"], ["w"], name="scaled"),
              helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")]
    graph = helper.make_graph(
        nodes, "widened", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model, [node.name for node in nodes[:-1]]


SHAPE = [1, 8]


def _value(name: str, shape=None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _branch(name: str, nodes, output: str) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [_value(output, SHAPE)])


def two_ifs_nodes() -> Tuple[List[onnx.NodeProto], List[onnx.TensorProto]]:
    """x -> If_a(len == 8: Relu(x) | Neg(x)) = a; If_b(same: a * w_b | a) = b, reading a and
    the initializer w_b only inside its branches; y = MatMul(b, w): (nodes in order, inits)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array([8], np.int64), "eight"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.full(SHAPE, 0.5, np.float32), "w_b"),
             numpy_helper.from_array((rng.standard_normal((8, 4)) * 0.4).astype(np.float32), "w")]
    if_a = helper.make_node(
        "If", ["cond"], ["a"], name="if_a",
        then_branch=_branch("a_then", [helper.make_node("Relu", ["x"], ["a_t"])], "a_t"),
        else_branch=_branch("a_else", [helper.make_node("Neg", ["x"], ["a_e"])], "a_e"))
    if_b = helper.make_node(
        "If", ["cond"], ["b"], name="if_b",
        then_branch=_branch("b_then", [helper.make_node("Mul", ["a", "w_b"], ["b_t"])], "b_t"),
        else_branch=_branch("b_else", [helper.make_node("Identity", ["a"], ["b_e"])], "b_e"))
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "one"], ["n"], name="gather"),
             helper.make_node("Equal", ["n", "eight"], ["eq"], name="equal"),
             helper.make_node("Squeeze", ["eq"], ["cond"], name="squeeze"),
             if_a, if_b, helper.make_node("MatMul", ["b", "w"], ["y"], name="fc")]
    return nodes, inits


def two_ifs(order: Sequence[int] = range(7)) -> onnx.ModelProto:
    """``two_ifs_nodes``' model, its nodes in ``order`` (indices into them)."""
    nodes, inits = two_ifs_nodes()
    graph = helper.make_graph([nodes[k] for k in order], "two_ifs", [_value("x", SHAPE)],
                              [_value("y", [1, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def shuffled_two_ifs() -> st.SearchStrategy:
    """``two_ifs`` in any order of its nodes."""
    return st.permutations(range(7)).map(two_ifs)
