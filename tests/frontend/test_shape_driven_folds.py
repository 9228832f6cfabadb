"""frontend/sized_ops.py: Range, ConstantOfShape, Expand and Tile whose size the fixed input
shapes decide fold to constants, as the dynamo exporter writes them (``sym_size_int`` =
``Shape(x, start=d, end=d+1) -> Squeeze``), within the folding bounds.

Each canonical graph is run on onnxruntime against the original model: folding is exact, so the
outputs are bit for bit the same.
"""
from __future__ import annotations

from typing import Callable, Dict, List

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper

from mrvl_convert.frontend.canonicalize import canonicalize
from mrvl_convert.frontend.folding import FoldBounds, fold_constants
from mrvl_convert.frontend.load import load_model
from mrvl_convert.frontend.sized_ops import sized_shape
from support.corpus_dynamo import Dynamo
from support.models import run_ort

SHAPE = [2, 16, 4]


def _sizes(d: Dynamo, axes: List[int]) -> str:
    """The 1-D int64 shape tensor of ``x``'s ``axes``, each read as ``sym_size_int``."""
    return d.op("Concat", [d.unsqueezed(d.sym_size("x", a)) for a in axes], axis=0)


def _range(d: Dynamo) -> str:
    """``x + torch.arange(x.shape[1])[:, None]``."""
    steps = d.op("Range", [d.constant(np.array(0, np.int64)), d.sym_size("x", 1),
                           d.constant(np.array(1, np.int64))], name="node_arange")
    column = d.op("Unsqueeze", [d.op("Cast", [steps], to=TensorProto.FLOAT),
                                d.constant(np.array([1], np.int64))])
    return d.op("Add", ["x", column])


def _constant_of_shape(d: Dynamo) -> str:
    """``x + torch.full(x.shape, 0.5)``."""
    full = d.op("ConstantOfShape", [_sizes(d, [0, 1, 2])],
                value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5]))
    return d.op("Add", ["x", full])


def _expand(d: Dynamo) -> str:
    """``x * w.expand(x.shape)``, a [1, 1, C] weight."""
    w = d.init(np.arange(1, 5, dtype=np.float32).reshape(1, 1, 4), "w")
    return d.op("Mul", ["x", d.op("Expand", [w, _sizes(d, [0, 1, 2])])])


def _tile(d: Dynamo) -> str:
    """``x + w.repeat(B, T, 1)``, a [1, 1, C] weight."""
    w = d.init(np.linspace(-1, 1, 4, dtype=np.float32).reshape(1, 1, 4), "w")
    repeats = d.op("Concat", [_sizes(d, [0, 1]), d.constant(np.array([1], np.int64))], axis=0)
    return d.op("Add", ["x", d.op("Tile", [w, repeats])])


FORMS: Dict[str, Callable[[Dynamo], str]] = {
    "Range": _range, "ConstantOfShape": _constant_of_shape, "Expand": _expand, "Tile": _tile}


def _model(op: str) -> onnx.ModelProto:
    d = Dynamo(0)
    d.inputs.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, ["s0", "s1", 4]))
    y = FORMS[op](d)
    d.nodes.append(helper.make_node("Relu", [y], ["y"], name="node_relu"))
    return d.model({"y": ["s0", "s1", 4]}, f"sized_{op}")


def _exported(graph: gs.Graph) -> onnx.ModelProto:
    model = gs.export_onnx(graph, do_type_check=False)
    model.ir_version = 10
    return model


@pytest.mark.parametrize("op", sorted(FORMS))
def test_a_size_the_input_shapes_decide_folds_and_computes_the_same(op):
    model = _model(op)
    canonical = canonicalize(load_model(model, shapes={"x": SHAPE}))
    left = [n.op for n in canonical.graph.nodes]
    assert op not in left and "Shape" not in left, left
    assert canonical.graph.outputs[0].shape == SHAPE
    [node] = [n for n in model.graph.node if n.op_type == op]
    assert canonical.removed[node.name] == "computed at conversion time (constant folding)"
    assert node.name not in canonical.kept  # no stale refusal from a first folding pass
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    got = run_ort(_exported(canonical.graph), {"x": x})["y"]
    assert np.array_equal(got, run_ort(model, {"x": x})["y"])


def _unshaped(op: str, inputs: List[gs.Tensor]) -> gs.Graph:
    """One node of ``op`` on constants, its output shape unknown (as before inference)."""
    dtype = inputs[0].values.dtype if op == "Range" else np.float32
    out = gs.Variable("out", dtype=dtype)
    node = gs.Node(op, "node", inputs=inputs, outputs=[out])
    return gs.Graph(nodes=[node], outputs=[out], opset=18)


def _c(name: str, value) -> gs.Constant:
    return gs.Constant(name, np.asarray(value))


@pytest.mark.parametrize("op,inputs,shape", [
    ("Range", [_c("a", np.float32(1)), _c("b", np.float32(8.5)), _c("c", np.float32(2))], [4]),
    ("Range", [_c("a", 5), _c("b", 0), _c("c", 1)], [0]),
    ("Range", [_c("a", 5), _c("b", 0), _c("c", -2)], [3]),
    ("ConstantOfShape", [_c("s", np.array([2, 3], np.int64))], [2, 3]),
    ("Expand", [_c("w", np.ones((3, 1), np.float32)), _c("s", np.array([2, 1, 4]))], [2, 3, 4]),
    ("Tile", [_c("w", np.ones((3, 1), np.float32)), _c("r", np.array([2, 5]))], [6, 5]),
])
def test_the_size_follows_from_the_constant_inputs_as_onnxruntime_computes_it(op, inputs,
                                                                              shape):
    graph = _unshaped(op, inputs)
    assert sized_shape(graph.nodes[0]) == shape
    assert fold_constants(graph) == {}
    assert list(graph.outputs[0].values.shape) == shape


@pytest.mark.parametrize("op,inputs", [
    ("Range", [_c("a", 0), _c("b", 4), _c("c", 0)]),                # zero delta
    ("ConstantOfShape", [_c("s", np.array([2, -3], np.int64))]),      # negative dim
    ("Expand", [_c("w", np.ones((3, 2), np.float32)), _c("s", np.array([4, 4]))]),  # no broadcast
])
def test_a_size_the_spec_refuses_is_not_guessed(op, inputs):
    graph = _unshaped(op, inputs)
    assert sized_shape(graph.nodes[0]) is None
    assert "unknown before computing it" in fold_constants(graph)["node"]


def test_a_range_the_input_shapes_size_beyond_the_bounds_is_refused_by_its_size():
    """The size a Range's constants give is bounded like any other: 2**40 int64 steps are
    8 TiB, never computed."""
    graph = _unshaped("Range", [_c("a", 0), _c("b", 1 << 40), _c("c", 1)])
    refused = fold_constants(graph, bounds=FoldBounds(tensor_bytes=64 << 20,
                                                      total_bytes=256 << 20))
    assert "its output would take 8388608 MiB" in refused["node"]
    assert graph.nodes and graph.nodes[0].op == "Range"
