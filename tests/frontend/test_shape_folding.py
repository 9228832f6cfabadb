"""frontend/shape_arithmetic.py: with the input shapes fixed, the shape arithmetic exporters write folds away.

The canonical graph is run on onnxruntime against the original model: folding is exact, so the
outputs are bit for bit the same.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.frontend.canonicalize import canonicalize
from mrvl_convert.frontend.load import load_model
from mrvl_convert.frontend.folding import fold_constants
from mrvl_convert.frontend.shape_arithmetic import fold_shape_arithmetic, infer_model_shapes

SHAPE_ARITHMETIC = {"Shape", "Gather", "Unsqueeze", "Concat", "Slice", "Cast", "Range", "Equal",
                    "Where", "ConstantOfShape", "Expand"}


class _Graph:
    def __init__(self) -> None:
        self.nodes: List[onnx.NodeProto] = []
        self.inits: List[onnx.TensorProto] = []

    def const(self, value) -> str:
        name = f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: Sequence[str], **attrs) -> str:
        name = f"{op_type}_{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [name], name=name, **attrs))
        return name

    def dim(self, tensor: str, axis: int) -> str:
        picked = self.op("Gather", [self.op("Shape", [tensor]), self.const(np.int64(axis))],
                         axis=0)
        return self.op("Unsqueeze", [picked, self.const(np.array([0], np.int64))])

    def model(self, inputs, output: str, shape: Sequence) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, "shapes", inputs,
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, list(shape))], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                                  ir_version=8)
        onnx.checker.check_model(model)
        return model


def exporter_style(batch: object = 1) -> onnx.ModelProto:
    """Two Reshapes whose targets are computed from shapes (the second from the first's output,
    so one round of inference and folding does not reach it), and an attention-like mask built
    with Range, Equal, Where, ConstantOfShape, Expand and Cast from a shape value."""
    g = _Graph()
    x = "x"
    split = g.op("Reshape", [x, g.op("Concat", [g.dim(x, 0), g.dim(x, 1),
                                                g.const(np.array([2, 4], np.int64))], axis=0)])
    y = g.op("Relu", [split])
    head = g.op("Slice", [g.op("Shape", [y]), g.const(np.array([0], np.int64)),
                          g.const(np.array([2], np.int64))])
    z = g.op("Reshape", [y, g.op("Concat", [head, g.const(np.array([-1], np.int64))], axis=0)])
    n = g.op("Gather", [g.op("Shape", [z]), g.const(np.int64(1))], axis=0)
    steps = g.op("Range", [g.const(np.int64(0)), n, g.const(np.int64(1))])
    rows = g.op("Unsqueeze", [steps, g.const(np.array([1], np.int64))])
    cols = g.op("Unsqueeze", [steps, g.const(np.array([0], np.int64))])
    mask = g.op("Where", [g.op("Equal", [rows, cols]), g.const(np.float32(0.0)),
                          g.const(np.float32(-100.0))])
    n1 = g.op("Unsqueeze", [n, g.const(np.array([0], np.int64))])
    target = g.op("Concat", [g.const(np.array([1], np.int64)), n1, n1], axis=0)
    mask = g.op("Expand", [mask, target])
    ones = g.op("ConstantOfShape", [n1], value=helper.make_tensor("one", TensorProto.INT64,
                                                                  [1], [1]))
    scores = g.op("MatMul", [z, g.op("Transpose", [z], perm=[0, 2, 1])])
    out = g.op("Mul", [g.op("Add", [scores, mask]), g.op("Cast", [ones], to=TensorProto.FLOAT)])
    return g.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 6, 8])], out,
                   [batch, 6, 6])


def run(model: onnx.ModelProto, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feed)


def exported(graph: gs.Graph) -> onnx.ModelProto:
    model = gs.export_onnx(graph, do_type_check=False)
    model.ir_version = 8
    return model


def test_shape_arithmetic_leaves_nothing_behind_and_computes_the_same():
    model = exporter_style()
    canonical = canonicalize(load_model(model))
    left = [n.op for n in canonical.graph.nodes]
    assert not SHAPE_ARITHMETIC & set(left), left
    assert left == ["Reshape", "Relu", "Reshape", "Transpose", "MatMul", "Add", "Mul"]
    assert all(t.shape is not None and all(isinstance(d, int) for d in t.shape)
               for n in canonical.graph.nodes for t in n.outputs)
    folded = [n for n in model.graph.node if n.op_type in SHAPE_ARITHMETIC]
    assert all(canonical.removed[n.name] == "computed at conversion time (constant folding)"
               for n in folded)
    feed = {"x": np.random.default_rng(0).standard_normal((1, 6, 8)).astype(np.float32)}
    for got, want in zip(run(exported(canonical.graph), feed), run(model, feed)):
        assert np.array_equal(got, want)


def test_a_dynamic_batch_given_at_conversion_folds_the_same_way():
    canonical = canonicalize(load_model(exporter_style("N"), shapes={"x": [1, 6, 8]}))
    assert not SHAPE_ARITHMETIC & {n.op for n in canonical.graph.nodes}
    assert canonical.graph.outputs[0].shape == [1, 6, 6]


def test_weight_only_int8_folds_into_the_float_weight_onnxruntime_computes():
    """Cast(int8) -> Mul(scale): int8 to float32 is exact and the product one float32 multiply,
    so the folded weight is the one onnxruntime multiplies by at run time, bit for bit."""
    g = _Graph()
    values = np.random.default_rng(1).integers(-128, 128, (8, 5)).astype(np.int8)
    scale = np.float32(0.0123)
    weight = g.op("Mul", [g.op("Cast", [g.const(values)], to=TensorProto.FLOAT),
                          g.const(scale)])
    model = g.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8])],
                    g.op("MatMul", ["x", weight]), [1, 3, 5])
    canonical = canonicalize(load_model(model))
    [matmul] = canonical.graph.nodes
    folded = matmul.inputs[1]
    assert isinstance(folded, gs.Constant) and folded.values.dtype == np.float32
    assert np.array_equal(folded.values, values.astype(np.float32) * scale)
    feed = {"x": np.random.default_rng(2).standard_normal((1, 3, 8)).astype(np.float32)}
    assert np.array_equal(run(exported(canonical.graph), feed)[0], run(model, feed)[0])


def test_nothing_unknown_means_no_round_at_all():
    g = _Graph()
    model = g.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                    g.op("Relu", ["x"]), [1, 4])
    graph = gs.import_onnx(load_model(model).proto)
    rounds = []
    assert fold_shape_arithmetic(graph, model, rounds.append) is graph
    assert rounds == []


def test_a_data_dependent_shape_stays_and_the_rounds_end():
    """NonZero's output size depends on the values: no amount of folding makes it static."""
    g = _Graph()
    count = g.op("Gather", [g.op("Shape", [g.op("NonZero", ["x"])]), g.const(np.int64(1))],
                 axis=0)
    ones = g.op("ConstantOfShape", [g.op("Unsqueeze", [count, g.const(np.array([0], np.int64))])],
                value=helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0]))
    # The output is a sum, static whatever NonZero finds (an output of unknown shape is an error).
    total = g.op("ReduceSum", [ones], keepdims=0)
    model = g.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])], total, [])
    canonical = canonicalize(load_model(model))
    assert {"NonZero", "Shape", "ConstantOfShape"} <= {n.op for n in canonical.graph.nodes}


def reshape_chain(blocks: int) -> onnx.ModelProto:
    """Reshapes whose targets are each computed from the shape of the one before (a transformer
    block each, as exporters write them): one round of folding per block at opset 13, before."""
    g, y = _Graph(), "x"
    for _ in range(blocks):
        y = g.op("Reshape", [y, g.op("Concat", [g.dim(y, 0), g.dim(y, 1),
                                                g.const(np.array([2, 4], np.int64))], axis=0)])
        y = g.op("Relu", [y])
        head = g.op("Slice", [g.op("Shape", [y]), g.const(np.array([0], np.int64)),
                              g.const(np.array([2], np.int64))])
        y = g.op("Reshape", [y, g.op("Concat", [head, g.const(np.array([-1], np.int64))],
                                     axis=0)])
    return g.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 8])], y,
                   [1, 6, 8])


def test_an_opset_13_model_is_inferred_through_its_reshapes_at_once():
    """Inferred as opset 14, whose Reshape reads a target shape data propagation computed,
    loading already knows every shape: no round of inference and folding is left to do."""
    model = reshape_chain(3)
    loaded = load_model(model).proto
    assert [(o.domain, o.version) for o in loaded.opset_import] == [("", 13)]
    known = {v.name: [d.dim_value if d.HasField("dim_value") else None
                      for d in v.type.tensor_type.shape.dim]
             for v in list(loaded.graph.value_info) + list(loaded.graph.output)}
    reshapes = [n.output[0] for n in model.graph.node if n.op_type == "Reshape"]
    assert [known[name] for name in reshapes] == [[1, 6, 2, 4], [1, 6, 8]] * 3
    graph = gs.import_onnx(loaded)
    rounds = []
    fold_constants(graph)
    fold_shape_arithmetic(graph, loaded, rounds.append)
    assert rounds == []
    canonical = canonicalize(load_model(model))
    assert [n.op for n in canonical.graph.nodes] == ["Reshape", "Relu", "Reshape"] * 3
    feed = {"x": np.random.default_rng(3).standard_normal((1, 6, 8)).astype(np.float32)}
    assert np.array_equal(run(exported(canonical.graph), feed)[0], run(model, feed)[0])


def test_inferring_as_opset_14_leaves_the_models_opset_as_it_was():
    model = exporter_style()
    inferred = infer_model_shapes(model)
    assert [o.version for o in model.opset_import] == [13]
    assert [o.version for o in inferred.opset_import] == [13]
    assert any(v.name.startswith("Reshape") for v in inferred.graph.value_info)


def test_an_opset_13_model_that_opset_14_refuses_is_inferred_as_written():
    """BatchNormalization-9 may write its training outputs; at 14 inference refuses them."""
    stats = [numpy_helper.from_array(np.ones(3, np.float32), n) for n in "sbmv"]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"],
                            ["y", "mean", "var", "saved_mean", "saved_var"], name="bn")
    graph = helper.make_graph(
        [node], "bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])], stats)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    inferred = infer_model_shapes(model, check_type=True, strict_mode=True)
    assert [o.version for o in model.opset_import] == [13]
    assert [o.version for o in inferred.opset_import] == [13]
    [y] = inferred.graph.output
    assert [d.dim_value for d in y.type.tensor_type.shape.dim] == [1, 3, 4, 4]
