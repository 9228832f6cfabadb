"""``verify/kept_graph.py``: ``round_groups`` keeps its look-ups (nodes by name, producers,
readers, initializers) as indexes across the fp16 layers instead of scanning the graph per
layer. The model it makes is the one rounding each layer on a graph read afresh makes (one
``round_groups`` call per layer: every look-up a new scan of the proto, as before): the same
nodes, the same initializers, bit-equal outputs on onnxruntime. On a model with a layer of each
form the rounding treats apart: a Conv + BatchNormalization fold, a BatchNormalization alone,
a Div by a constant, HardSigmoid and HardSwish steps, an Rsqrt, an Elu, a LayerNormalization,
an erf GELU, a Pow, a weight shared with an unrounded node, a rounded result that is a graph
output and read further on."""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.verify.kept_fp16 import round_groups
from mrvl_convert.verify.kept_graph import WorkingGraph
from support.models import run_ort

_C = 4  # channels


def _model() -> Tuple[onnx.ModelProto, List[List[str]]]:
    """A chain through every form above, and its fp16 layers' groups."""
    rng = np.random.default_rng(7)
    weights: Dict[str, np.ndarray] = {
        "w": rng.standard_normal((_C, 3, 3, 3)) * 0.4, "b": rng.standard_normal(_C) * 0.1,
        "k": np.array(3.0), "s2": np.array(np.sqrt(2.0)), "one": np.array(1.0),
        "half": np.array(0.5), "p": np.array(2.0), "shared": rng.standard_normal(6) * 1.3,
        "gamma": rng.standard_normal(6) + 1.0, "beta": rng.standard_normal(6) * 0.2}
    for name, shift in (("bn", 0.0), ("bn2", 0.3)):
        weights.update({f"{name}_g": rng.uniform(0.5, 1.5, _C), f"{name}_b": rng.standard_normal(
            _C) * 0.1 + shift, f"{name}_m": rng.standard_normal(_C) * 0.1,
            f"{name}_v": rng.uniform(0.5, 2.0, _C)})
    node = helper.make_node
    nodes = [
        node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        node("BatchNormalization", ["c", "bn_g", "bn_b", "bn_m", "bn_v"], ["cb"], name="bn"),
        node("BatchNormalization", ["cb", "bn2_g", "bn2_b", "bn2_m", "bn2_v"], ["d"],
             name="bn2"),
        node("Div", ["d", "k"], ["e"], name="div"),
        node("HardSigmoid", ["e"], ["f"], name="hs", alpha=0.3),
        node("HardSwish", ["e"], ["g"], name="hw"),
        node("Abs", ["f"], ["fa"], name="abs"),  # no fp16 layer: left as it is
        node("Sqrt", ["fa"], ["sq"], name="sqrt"),
        node("Div", ["g", "sq"], ["dv"], name="rsqrt_div"),
        node("Elu", ["dv"], ["h"], name="elu", alpha=0.7),
        node("LayerNormalization", ["h", "gamma", "beta"], ["i"], name="ln", axis=-1),
        node("Div", ["i", "s2"], ["g0"], name="g_div"), node("Erf", ["g0"], ["g1"], name="erf"),
        node("Add", ["g1", "one"], ["g2"], name="g_add"),
        node("Mul", ["i", "g2"], ["g3"], name="g_mul"),
        node("Mul", ["g3", "half"], ["j"], name="g_half"),
        node("Pow", ["j", "p"], ["pw"], name="pow"),
        node("Mul", ["pw", "shared"], ["m"], name="mul_kept"),
        node("Add", ["m", "shared"], ["y"], name="add_float")]  # reads "shared" unrounded
    groups = [["conv", "bn"], ["bn2"], ["div"], ["hs"], ["hw"], ["sqrt", "rsqrt_div"],
              ["elu"], ["ln"], ["g_div", "erf", "g_add", "g_mul", "g_half"], ["pow"],
              ["mul_kept"]]
    graph = helper.make_graph(
        nodes, "forms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 6])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, _C, 5, 6]) for n in ("y", "e")],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), groups


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def _nodes(model: onnx.ModelProto) -> List[bytes]:
    return sorted(n.SerializeToString(deterministic=True) for n in model.graph.node)


def _inits(model: onnx.ModelProto) -> Dict[str, bytes]:
    return {t.name: t.SerializeToString(deterministic=True) for t in model.graph.initializer}


def test_the_indexed_rounding_is_the_rounding_of_a_graph_read_afresh_per_layer():
    model, groups = _model()
    unrounded = [set() for _ in groups]
    unrounded[1] = {"cb"}  # an exact layer's result reaches bn2 unrounded
    once, afresh = _copy(model), _copy(model)
    assert round_groups(once, groups, unrounded) == [n for g in groups for n in g]
    for group, kept in zip(groups, unrounded):
        round_groups(afresh, [group], [kept])
    onnx.checker.check_model(once)
    assert _nodes(once) == _nodes(afresh)
    assert _inits(once) == _inits(afresh)
    x = np.random.default_rng(1).standard_normal((1, 3, 5, 6)).astype(np.float32) * 2
    got, want = run_ort(once, {"x": x}), run_ort(afresh, {"x": x})
    for name in ("y", "e"):
        np.testing.assert_array_equal(got[name], want[name])
    # and every form was rounded: not the float32 run
    assert not np.array_equal(got["y"], run_ort(model, {"x": x})["y"])
    ops = {n.op_type for n in once.graph.node}
    assert {"Reciprocal", "Tanh", "Sigmoid", "Clip"} <= ops  # Rsqrt, Elu, GELU, gate steps
    assert "LayerNormalization" not in ops and "Erf" not in ops


def test_the_look_ups_follow_edits_made_in_place():
    model, _ = _model()
    graph = WorkingGraph(model.graph)
    div = graph.members(["div"])[0]
    assert graph.leaves("e", ["div"])  # a graph output
    assert graph.leaves("d", ["div"]) is False  # only div reads it
    div.input[0] = "cb"
    graph.refresh(div)
    assert graph.leaves("cb", ["div"]) and not graph.leaves("cb", ["div", "bn2"])
    assert not graph.leaves("d", [])  # nobody reads it now
    graph.node.remove(graph.members(["hs"])[0])
    assert graph.members(["hs", "hw", "conv"]) == [graph.members(["conv"])[0],
                                                   graph.members(["hw"])[0]]
    assert not graph.produces("f") and graph.produces("g")
    graph.node.append(helper.make_node("Relu", ["e"], ["f"], name="hs"))
    assert graph.produces("f") and graph.named["hs"].op_type == "Relu"
    inits = graph.inits()
    assert "w" in inits and "z" not in inits
    graph.initializer.append(numpy_helper.from_array(np.zeros(2, np.float32), "z"))
    assert "z" in graph.inits() and graph.inits() is inits
    graph.commit()
    assert [n.name for n in model.graph.node][-2:] == ["add_float", "hs"]
    assert "hs" not in [n.name for n in model.graph.node][:-1]
