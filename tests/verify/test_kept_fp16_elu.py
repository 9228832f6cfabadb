"""verify's int8 reference computes an fp16 Elu as the artifact's ten layers do
(``verify/fp16_chains.py`` after ``layers/_elu.py``). In an int8 model an Elu that reads a
dequantized Conv and feeds float ops runs as an fp16 layer of the int8 region; a reference that
computed ``Elu`` in one formula differed from it by fp16 roundings, each near a quantization
boundary an int8 step after it: madmom's beats TCN FAILed against its own QDQ model (max_rel
0.09) on the integration branch before this chain; it is bit-equal now. Here the chain itself is
checked against the simulator: an fp16 artifact Conv(identity) -> Elu -> Conv(identity), whose
identity 1x1 Convs are exact, computes fp16(x) through the Elu layers alone."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.verify.fp16_chains import chains_as_written
from mrvl_convert.verify.kept_fp16 import _cast_pair
from support.onnxref import run_model as run_ort

C, ALPHA = 8, 0.7


def _artifact_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 5, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, 5, 5])
    eye = numpy_helper.from_array(np.eye(C, dtype=np.float32).reshape(C, C, 1, 1), "eye")
    nodes = [helper.make_node("Conv", ["x", "eye"], ["c"], name="in_identity"),
             helper.make_node("Elu", ["c"], ["e"], name="elu", alpha=ALPHA),
             helper.make_node("Conv", ["e", "eye"], ["y"], name="out_identity")]
    graph = helper.make_graph(nodes, "elu", [x], [y], [eye])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _reference(chain: bool) -> onnx.ModelProto:
    """fp16(x) -> Elu -> fp16, with the Elu as the artifact's chain or as one formula."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 5, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, 5, 5])
    elu = helper.make_node("Elu", ["x16"], ["e"], name="elu", alpha=ALPHA)
    graph = helper.make_graph([elu], "ref", [x], [y])
    _cast_pair(graph, "x", "x16")
    if chain:
        chains_as_written(graph, [elu], _cast_pair)
    _cast_pair(graph, "e", "y")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    sorted_nodes = _toposorted(model.graph)
    del model.graph.node[:]
    model.graph.node.extend(sorted_nodes)
    return model


def _toposorted(graph: onnx.GraphProto):
    known = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    left, done = list(graph.node), []
    while left:
        ready = [n for n in left if all(not i or i in known for i in n.input)]
        assert ready, [n.name for n in left]
        for node in ready:
            done.append(node)
            known.update(node.output)
            left.remove(node)
    return done


def test_the_elu_chain_is_what_the_artifact_computes(tmp_path) -> None:
    got = mrvl_convert.convert(_artifact_model(), tmp_path / "a")
    assert got.summary["mrvl_subgraphs"] == 1 and got.summary["cpu_subgraphs"] == 0
    assert any(e.get("rule") == "mrvl.elu" for e in got.placements)  # the premise
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((1, C, 5, 5)) * 3).astype(np.float32)
    artifact, = mrvl_convert.HybridSession(tmp_path / "a").run(None, {"x": x})
    chained, = run_ort(_reference(chain=True), {"x": x})
    formula, = run_ort(_reference(chain=False), {"x": x})
    assert np.array_equal(artifact, chained), float(np.max(np.abs(artifact - chained)))
    assert not np.array_equal(artifact, formula)  # what the reference computed before
