"""frontend/view_pairs.py: a float view that only a QuantizeLinear reads (our recipe's QDQ model
of a Keras head, vietcombank_captcha's ``GlobalAveragePool -> Squeeze -> Q -> DQ -> MatMul``)
reads a copy of that pair before it, a Squeeze written as its Reshape. On main the lone pair
was lifted to ``[N, C, 1, 1]`` with a Squeeze between it and the FC: the FC on CPU ("the
weights are not constant"), 2 Mrvl subgraphs. After, one Mrvl subgraph, the pool, the view and
the FC int8 layers, verify against the QDQ model PASS, and onnxruntime bit-equal before and
after the rewrite."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest

import mrvl_convert
from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.view_pairs import pair_views
from support.int8 import converted_int8
from support.models import Builder, canonicalized, run_ort


def _head() -> onnx.ModelProto:
    """Conv, Relu, GlobalAveragePool, Squeeze to [1, 16], MatMul + Add, Relu, MatMul + Add: a
    Keras classifier's head as tf2onnx writes it."""
    b = Builder(seed=3)
    y = b.op("Relu", [b.conv(b.input("x", [1, 3, 8, 8]), 3, 16, pads=[1, 1, 1, 1])])
    y = b.op("GlobalAveragePool", [y], name="pool")
    y = b.op("Squeeze", [y, b.const(np.array([2, 3], np.int64))], name="view")
    y = b.op("Relu", [b.matmul_add(y, 16, 12)])
    return b.model([b.matmul_add(y, 12, 5)])


def _qdq(tmp_path, view: str):
    """The head in our recipe's QDQ model (quantize_static leaves the pair before a Squeeze
    out: ``pool -> Squeeze -> Q``), its Squeeze then respelled as ``view`` (a Flatten or a
    Reshape another tool may leave so): (the QDQ file, its model)."""
    _, path = converted_int8(_head(), tmp_path / "recipe")
    qdq = onnx.load(path)
    node = next(n for n in qdq.graph.node if n.name == "view")
    producers = {o: n for n in qdq.graph.node for o in n.output}
    readers = [n.op_type for n in qdq.graph.node if node.output[0] in n.input]
    assert producers[node.input[0]].op_type == "GlobalAveragePool"
    assert readers == ["QuantizeLinear"]
    if view != "Squeeze":
        del node.input[1:]
        node.op_type = view
        if view == "Flatten":
            node.attribute.append(onnx.helper.make_attribute("axis", 1))
        else:
            qdq.graph.initializer.append(onnx.numpy_helper.from_array(
                np.array([1, 16], np.int64), "view_shape"))
            node.input.append("view_shape")
    path = tmp_path / f"{view}.qdq.onnx"
    onnx.save(qdq, path)
    return path, qdq


@pytest.mark.parametrize("view", ["Squeeze", "Flatten", "Reshape"])
def test_a_head_quantized_after_its_view_is_whole_and_verifies(view, tmp_path):
    path, _ = _qdq(tmp_path, view)
    result = mrvl_convert.convert(path, tmp_path / "art")
    summary = result.report["summary"]
    cpu = [(e["name"], e.get("reason")) for e in result.report["nodes"]
           if e["placement"] == "cpu"]
    assert (summary["mrvl_subgraphs"], summary["cpu_subgraphs"], cpu) == (1, 0, []), summary
    rules = {e["name"]: e.get("rule") for e in result.report["nodes"]}
    assert rules["view"] in ("mrvl.qnn_reshape", "mrvl.qnn_batch_flatten")
    assert rules["pool"] == "mrvl.qnn_globalavgpool2d_nhwc2nhwc"
    assert sum(r == "mrvl.qnn_fc_ni2no" for r in rules.values()) >= 4  # 2 MatMuls, 2 weights
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)} for _ in range(4)]
    comparison = mrvl_convert.compare(path, result.out_dir, feeds)
    assert comparison.passed, comparison


@pytest.mark.parametrize("view", ["Squeeze", "Flatten"])
def test_the_rewrite_is_bit_equal_on_onnxruntime(view, tmp_path):
    _, qdq = _qdq(tmp_path, view)
    canonical, proto = canonicalized(qdq)
    assert "view" in canonical.rewritten
    assert [n.op for n in canonical.graph.nodes if n.name == "view"] \
        == ["Reshape" if view == "Squeeze" else view]
    rng = np.random.default_rng(2)
    for _ in range(4):
        feed = {"x": rng.uniform(-2, 2, (1, 3, 8, 8)).astype(np.float32)}
        [before] = run_ort(qdq, feed, optimize=False).values()
        [after] = run_ort(proto, feed, optimize=False).values()
        np.testing.assert_array_equal(before, after)


def _graph(view_reader: str, model_output: bool = False, fc: bool = True) -> gs.Graph:
    """x -> Relu -> Squeeze -> ``view_reader``: a QuantizeLinear whose DequantizeLinear a
    MatMul (``fc``) or a Relu reads, or a Relu."""
    x = gs.Variable("x", np.float32, [1, 4, 1, 1])
    r = gs.Variable("r", np.float32, [1, 4, 1, 1])
    s = gs.Variable("s", np.float32, [1, 4])
    q, d = gs.Variable("q", np.int8, [1, 4]), gs.Variable("d", np.float32, [1, 4])
    out = gs.Variable("out", np.float32, [1, 4])
    params = [gs.Constant("scale", np.array(0.1, np.float32)),
              gs.Constant("zero", np.array(0, np.int8))]
    nodes = [gs.Node("Relu", "relu", inputs=[x], outputs=[r]),
             gs.Node("Squeeze", "view", inputs=[r, gs.Constant("axes", np.array([2, 3]))],
                     outputs=[s])]
    if view_reader == "QuantizeLinear":
        last = gs.Node("MatMul", "fc", inputs=[d, gs.Constant("w", np.eye(4, dtype=np.float32))],
                       outputs=[out]) if fc else gs.Node("Relu", "after", inputs=[d],
                                                           outputs=[out])
        nodes += [gs.Node("QuantizeLinear", "q", inputs=[s, *params], outputs=[q]),
                  gs.Node("DequantizeLinear", "dq", inputs=[q, *params], outputs=[d]), last]
    else:
        nodes.append(gs.Node("Relu", "reader", inputs=[s], outputs=[out]))
    return gs.Graph(nodes=nodes, inputs=[x], outputs=[out, s] if model_output else [out],
                    opset=13)


@pytest.mark.parametrize("reader,model_output,fc", [
    ("Relu", False, True), ("QuantizeLinear", True, True), ("QuantizeLinear", False, False)])
def test_a_view_not_quantized_for_an_fc_or_a_model_output_is_left(reader, model_output, fc):
    graph = _graph(reader, model_output, fc)
    ops = [n.op for n in graph.nodes]
    done = Rewrites()
    assert not pair_views(graph, done)
    assert [n.op for n in graph.nodes] == ops and not done.derived


def test_the_copies_are_derived_from_the_view():
    graph = _graph("QuantizeLinear")
    done = Rewrites()
    assert pair_views(graph, done)
    assert sorted(done.derived.values()) == ["view", "view"]
    view = next(n for n in graph.nodes if n.name == "view")
    assert view.op == "Reshape" and view.inputs[0].inputs[0].op == "DequantizeLinear"
    assert view.inputs[0].inputs[0].inputs[0].inputs[0].op == "QuantizeLinear"
