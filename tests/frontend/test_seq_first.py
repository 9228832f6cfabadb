"""Sequence-first transformers' per-position ops on ``[T, 1, E]`` computed on ``[1, T, E]``
(issue 45, g2p-id's tiny-pron; ``frontend/seq_first.py``): torch's default ``batch_first=False``
layers carry ``[T, N, E]`` with N = 1, and the layer set read T as the device's batch ("Mul2D
takes batch 1; this one has batch T"), cutting every LayerNorm and residual Add."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.seq_first import run_sequence_first
from mrvl_convert.quantize.recipe import Quantization
from mrvl_convert.verify.compare import compare
from support.models import run_ort
from support.strategies.seqaxis import assert_whole_and_verified

_T, _E, _F = 12, 16, 32


def _layer_norm(x: str, tag: str) -> list:
    """torch's exported LayerNorm over the last axis, as tiny-pron spells it."""
    return [
        helper.make_node("ReduceMean", [x], [f"{tag}_mu"], name=f"{tag}_mean", axes=[-1]),
        helper.make_node("Sub", [x, f"{tag}_mu"], [f"{tag}_d"], name=f"{tag}_sub"),
        helper.make_node("Pow", [f"{tag}_d", "two"], [f"{tag}_sq"], name=f"{tag}_pow"),
        helper.make_node("ReduceMean", [f"{tag}_sq"], [f"{tag}_var"], name=f"{tag}_var_mean",
                         axes=[-1]),
        helper.make_node("Add", [f"{tag}_var", "eps"], [f"{tag}_ve"], name=f"{tag}_eps"),
        helper.make_node("Sqrt", [f"{tag}_ve"], [f"{tag}_sd"], name=f"{tag}_sqrt"),
        helper.make_node("Div", [f"{tag}_d", f"{tag}_sd"], [f"{tag}_n"], name=f"{tag}_div"),
        helper.make_node("Mul", [f"{tag}_n", f"{tag}_g"], [f"{tag}_ng"], name=f"{tag}_gamma"),
        helper.make_node("Add", [f"{tag}_ng", f"{tag}_b"], [f"{tag}_out"], name=f"{tag}_beta")]


def _encoder_layer(entry: str = "Transpose") -> onnx.ModelProto:
    """A sequence-first encoder layer on ``[T, 1, E]``: positional Add, a projection
    (MatMul + bias Add), residual, LayerNorm, feed-forward, residual, LayerNorm. ``entry``
    makes the ``[T, 1, E]`` from a batch-first input by a Transpose (torch's
    ``src.transpose(0, 1)``), or from token ids by an embedding Gather (tiny-pron's)."""
    rng = np.random.default_rng(0)
    arrays = {"pos": rng.standard_normal((_T, 1, _E)), "wp": rng.standard_normal((_E, _E)) / 4,
              "bp": rng.standard_normal(_E), "w1": rng.standard_normal((_E, _F)) / 4,
              "b1": rng.standard_normal(_F), "w2": rng.standard_normal((_F, _E)) / 4,
              "b2": rng.standard_normal(_E), "two": np.array(2.0), "eps": np.array(1e-5),
              "emb": rng.standard_normal((20, _E))}
    for tag in ("ln1", "ln2"):
        arrays[f"{tag}_g"] = 1 + rng.standard_normal(_E) / 8
        arrays[f"{tag}_b"] = rng.standard_normal(_E) / 8
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in arrays.items()]
    if entry == "Transpose":
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, _T, _E])
        nodes = [helper.make_node("Transpose", ["x"], ["s"], name="seq_first", perm=[1, 0, 2])]
    else:
        x = helper.make_tensor_value_info("x", TensorProto.INT64, [_T, 1])
        nodes = [helper.make_node("Gather", ["emb", "x"], ["s"], name="embed")]
    nodes += [
        helper.make_node("Add", ["s", "pos"], ["h"], name="positions"),
        helper.make_node("MatMul", ["h", "wp"], ["p0"], name="proj"),
        helper.make_node("Add", ["bp", "p0"], ["p"], name="proj_bias"),
        helper.make_node("Add", ["h", "p"], ["r1"], name="residual1"),
        *_layer_norm("r1", "ln1"),
        helper.make_node("MatMul", ["ln1_out", "w1"], ["f0"], name="ff1"),
        helper.make_node("Add", ["f0", "b1"], ["f1"], name="ff1_bias"),
        helper.make_node("Relu", ["f1"], ["f2"], name="ff_relu"),
        helper.make_node("MatMul", ["f2", "w2"], ["f3"], name="ff2"),
        helper.make_node("Add", ["f3", "b2"], ["f4"], name="ff2_bias"),
        helper.make_node("Add", ["ln1_out", "f4"], ["r2"], name="residual2"),
        *_layer_norm("r2", "ln2"),
        helper.make_node("Transpose", ["ln2_out"], ["y"], name="batch_first", perm=[1, 0, 2])]
    graph = helper.make_graph(nodes, "seq_first_layer", [x], [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, _T, _E])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    return onnx.shape_inference.infer_shapes(model)


def _feeds(model: onnx.ModelProto) -> dict:
    rng = np.random.default_rng(1)
    if model.graph.input[0].type.tensor_type.elem_type == TensorProto.INT64:
        return {"x": rng.integers(0, 20, (_T, 1)).astype(np.int64)}
    return {"x": rng.standard_normal((1, _T, _E)).astype(np.float32)}


def _rewritten(model: onnx.ModelProto):
    graph = gs.import_onnx(model)
    changed = run_sequence_first(graph, Rewrites())
    graph.cleanup(remove_unused_graph_inputs=False).toposort()
    proto = gs.export_onnx(graph)
    proto.ir_version = model.ir_version
    return changed, graph, proto


def _assert_same_outputs(model: onnx.ModelProto, proto: onnx.ModelProto) -> None:
    checked = onnx.shape_inference.infer_shapes(proto, strict_mode=True)  # shapes consistent
    feeds = _feeds(model)
    assert np.array_equal(run_ort(checked, feeds, optimize=False)["y"],
                          run_ort(model, feeds, optimize=False)["y"])


def test_the_layer_runs_on_one_sample_bit_for_bit():
    model = _encoder_layer()
    changed, graph, proto = _rewritten(model)
    assert changed
    tensors = graph.tensors()
    for name in ("s", "h", "p", "r1", "ln1_d", "f2", "r2", "ln2_out"):
        assert list(tensors[name].shape)[:2] == [1, _T], name
    assert list(tensors["ln1_mu"].shape) == [1, _T, 1]
    _assert_same_outputs(model, proto)


def test_an_embedding_gather_is_read_through_a_view():
    model = _encoder_layer(entry="Gather")
    changed, graph, proto = _rewritten(model)
    assert changed
    assert list(graph.tensors()["s"].shape) == [_T, 1, _E]  # the Gather writes what it did
    views = [n for n in graph.nodes if n.op == "Reshape" and n.inputs[0].name == "s"]
    assert len(views) == 1 and list(views[0].outputs[0].shape) == [1, _T, _E]
    _assert_same_outputs(model, proto)


def test_model_outputs_and_outside_readers_keep_the_old_layout():
    """The entry Transpose's output is also a model output (it keeps its shape: the region
    reads a view of it) and a Slice outside the region reads the projection (it reads a
    Reshape back to ``[T, 1, E]``)."""
    model = _encoder_layer()
    model.graph.initializer.extend([numpy_helper.from_array(np.array([v], np.int64), k)
                                    for k, v in (("s0", 0), ("e0", 4), ("ax", 2))])
    model.graph.node.append(helper.make_node("Slice", ["p", "s0", "e0", "ax"], ["ps"], name="pick"))
    model.graph.output.extend([helper.make_tensor_value_info("s", TensorProto.FLOAT, [_T, 1, _E]),
                               helper.make_tensor_value_info("ps", TensorProto.FLOAT, [_T, 1, 4])])
    changed, graph, proto = _rewritten(model)
    assert changed
    assert [list(t.shape) for t in graph.outputs] == [[1, _T, _E], [_T, 1, _E], [_T, 1, 4]]
    assert list(graph.tensors()["p"].shape) == [1, _T, _E]
    checked = onnx.shape_inference.infer_shapes(proto, strict_mode=True)
    feeds = _feeds(model)
    got, want = run_ort(checked, feeds, optimize=False), run_ort(model, feeds, optimize=False)
    assert all(np.array_equal(got[k], want[k]) for k in ("y", "s", "ps"))


def test_a_mean_over_positions_reduces_axis_1_of_the_view():
    """A mean over T (axis 0) mixes positions: it is no region op, but it reads the view and
    reduces its axis 1 (the same elements, the same [1, 1, E]) rather than a Reshape back."""
    model = _encoder_layer()
    mean = next(n for n in model.graph.node if n.name == "ln1_mean")
    mean.attribute[0].ints[:] = [0]
    del model.graph.value_info[:]
    model = onnx.shape_inference.infer_shapes(model)
    changed, graph, proto = _rewritten(model)
    assert changed
    node = next(n for n in graph.nodes if n.name == "ln1_mean")
    assert list(node.inputs[0].shape) == [1, _T, _E] and list(node.attrs["axes"]) == [1]
    assert list(node.outputs[0].shape) == [1, 1, _E]
    _assert_same_outputs(model, proto)


def test_a_channel_gate_of_a_4d_map_is_no_sequence():
    """``[C, 1, 1]`` through a Sigmoid, multiplying ``[1, C, H, W]``: a per-channel gate in its
    broadcast form, left as it is (a view would break the Mul's int8 pair)."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], name="pool", axes=[0, 2, 3]),
             helper.make_node("Reshape", ["m", "shape"], ["flat"], name="flat"),
             helper.make_node("Sigmoid", ["flat"], ["gate"], name="sigmoid"),
             helper.make_node("Mul", ["x", "gate"], ["y"], name="gate_mul")]
    graph = helper.make_graph(
        nodes, "gate", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])],
        [numpy_helper.from_array(np.array([4, 1, 1], np.int64), "shape")])
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    changed, graph, _ = _rewritten(model)
    assert not changed and list(graph.tensors()["gate"].shape) == [4, 1, 1]


def test_the_layer_converts_whole(tmp_path):
    assert_whole_and_verified(_encoder_layer(), tmp_path / "out")


def test_the_int8_layer_converts_whole_and_matches_its_reference(tmp_path):
    """Our int8 recipe on the layer: one Mrvl subgraph (integ12: 2, its LayerNorms on CPU at
    "batch 12"); the CPU stage only makes the ``[T, 1, E]`` and adds the int8 positional table,
    which varies along T. The artifact equals verify's reference (the QDQ model, with the
    layers that stay fp16 rounded where the artifact rounds them) to 0."""
    rng = np.random.default_rng(3)
    calibration = {"x": rng.standard_normal((16, _T, _E)).astype(np.float32)}
    result = mrvl_convert.convert(_encoder_layer(), tmp_path / "out",
                                  quantize=Quantization(calibration=calibration))
    assert result.report["summary"]["mrvl_subgraphs"] == 1, result.report["summary"]
    assert result.report["precision"]["shares"]["int8"] > 0.9, result.report["precision"]
    feeds = [{"x": rng.standard_normal((1, _T, _E)).astype(np.float32)} for _ in range(3)]
    art = tmp_path / "out"
    compared = compare(art / result.manifest["quantization"]["file"], art, feeds,
                       with_floor=False)
    outputs = [row for row in compared.rows if row.kind == "output"]
    assert outputs and all(row.max_abs == 0.0 for row in outputs), compared.summary_line()
