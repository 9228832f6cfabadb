"""The packed Q/K/V head split (frontend/packed_qkv.py), as PaddlePaddle exports attention
(PP-OCRv4's SVTR recognizer): the rewrite computes bit for bit what the original computes on
onnxruntime, the splits it does not describe stay as they were, and the attention block converts
as one Mrvl subgraph where the 5-D split used to be cut to CPU."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper
import pytest

import mrvl_convert
from support.models import Builder, canonicalized, run_ort

TOKENS, HEADS, DEPTH = 6, 2, 4
WIDTH = HEADS * DEPTH


def _attention(opset: int = 13, step: int = 1, extra_reader: bool = False,
               perm=(2, 0, 3, 1, 4)):
    """qkv FC, Reshape [B, N, 3, H, d], Transpose, Slice + Squeeze per piece, q k^T, Softmax,
    times v, merged back to [B, N, C]."""
    b = Builder(opset=opset)
    x = b.input("x", [1, TOKENS, WIDTH])
    qkv = b.matmul_add(x, WIDTH, 3 * WIDTH)
    five = b.op("Reshape", [qkv, b.const(np.array([0, TOKENS, 3, HEADS, DEPTH], np.int64))])
    packed = b.op("Transpose", [five], name="split", perm=list(perm))
    pieces = []
    for i in range(3):
        bounds = [b.const(np.array([v], np.int64)) for v in (i, i + 1, 0, step)]
        piece = b.op("Slice", [packed, *bounds], name=f"slice{i}")
        squeeze = ([b.const(np.array([0], np.int64))], {}) if opset >= 13 else ([], {"axes": [0]})
        pieces.append(b.op("Squeeze", [piece, *squeeze[0]], name=f"squeeze{i}", **squeeze[1]))
    q, k, v = pieces
    scores = b.op("MatMul", [b.op("Mul", [q, b.const(np.array([0.5], np.float32))]),
                             b.op("Transpose", [k], perm=[0, 1, 3, 2])])
    out = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])
    out = b.op("Reshape", [b.op("Transpose", [out], perm=[0, 2, 1, 3]),
                           b.const(np.array([1, TOKENS, WIDTH], np.int64))])
    outputs = [out] + ([b.op("Relu", [packed])] if extra_reader else [])
    return b.model(outputs)


def _feed():
    return {"x": np.random.default_rng(1).standard_normal((1, TOKENS, WIDTH)).astype(np.float32)}


@pytest.mark.parametrize("opset", [11, 13])
def test_packed_split_becomes_slices_of_the_last_axis_bit_for_bit(opset):
    model = _attention(opset)
    canonical, rewritten = canonicalized(model)
    want, got = run_ort(model, _feed()), run_ort(rewritten, _feed())
    for name, value in want.items():
        assert np.array_equal(got[name], value), name
    assert not [n for n in canonical.graph.nodes if len(n.outputs[0].shape or []) == 5]
    assert canonical.merged["split"] == "slice0"
    assert "Slice 8:16 of its last axis" in canonical.rewritten["slice1"]
    assert "Transpose [0, 2, 1, 3]" in canonical.rewritten["squeeze2"]


@pytest.mark.parametrize("kwargs", [{"step": 2}, {"extra_reader": True},
                                    {"perm": (2, 0, 1, 3, 4)}])
def test_other_splits_are_left_as_they_are(kwargs):
    canonical, _ = canonicalized(_attention(**kwargs))
    assert "split" not in canonical.merged
    assert not [k for k in canonical.rewritten if k.startswith(("slice", "squeeze"))]


def test_packed_attention_is_one_mrvl_subgraph(tmp_path):
    model = _attention()
    result = mrvl_convert.convert(model, tmp_path / "art")
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    comparison = mrvl_convert.compare(model, result.out_dir, _feed(), layers=True)
    assert comparison.passed


def _qdq_split(tmp_path):
    """The packed attention quantized by our recipe (QDQ pairs on the Reshape's, the
    Transpose's and each Slice's result, on qkv's grid), its artifact and its QDQ file."""
    from support.int8 import converted_int8

    return converted_int8(_attention(), tmp_path / "art")


def test_int8_packed_split_sees_through_its_identity_pairs(tmp_path):
    """Cut on main (the 5-D Slices and Transpose of the QDQ split to CPU, 3 Mrvl / 2 CPU in
    PP-OCRv4's recognizer): one Mrvl stage now, the bypassed pairs listed, and the artifact
    equal to its QDQ model under verify."""
    result, qdq = _qdq_split(tmp_path)
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    graph = onnx.load(qdq).graph
    split = next(n for n in graph.node if n.name == "split")
    reshape_out = next(n for n in graph.node if n.op_type == "DequantizeLinear"
                       and n.output[0] == split.input[0]).input[0]
    # the pairs after the Reshape, the Transpose and (onnxruntime >= 1.19 quantizes them) the
    # Slices: each one is bypassed and reported with the split
    moved = {next(n for n in graph.node if n.output[0] == reshape_out).input[0], "split_out",
             "slice0_out", "slice1_out", "slice2_out"}
    pairs = {n.name for n in graph.node if n.op_type == "QuantizeLinear" and n.input[0] in moved}
    merged = {e["name"] for e in result.report["nodes"]
              if e.get("op_type") == "QuantizeLinear" and e.get("merged_into") == "slice0"}
    assert len(pairs) >= 2 and merged == pairs, (merged, pairs)
    comparison = mrvl_convert.compare(qdq, result.out_dir, [_feed()], with_floor=False)
    assert comparison.passed, [(r.tensor, r.max_abs) for r in comparison.judged_rows]


def test_int8_identity_pairs_bypassed_are_exact_on_onnxruntime(tmp_path):
    """The QDQ model and its canonical graph (pairs bypassed, split rewritten) on onnxruntime:
    bit for bit."""
    _, qdq = _qdq_split(tmp_path)
    model = onnx.load(qdq)
    canonical, rewritten = canonicalized(model)
    assert not [n for n in canonical.graph.nodes if len(n.outputs[0].shape or []) == 5]
    want, got = run_ort(model, _feed()), run_ort(rewritten, _feed())
    assert all(want[k].tobytes() == got[k].tobytes() for k in want)


def test_int8_pairs_on_another_grid_are_kept(tmp_path):
    """A pair after the Transpose on another scale rounds: it is no identity, so the split
    (which needs it gone) is left, pairs and all."""
    _, qdq = _qdq_split(tmp_path)
    model = onnx.load(qdq)
    transpose = next(n for n in model.graph.node if n.name == "split")
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear"
             and n.input[0] == transpose.output[0])
    scale = onnx.numpy_helper.from_array(np.array(0.5, np.float32), "other_scale")
    model.graph.initializer.append(scale)
    q.input[1] = "other_scale"
    canonical, _ = canonicalized(model)
    assert "split" not in canonical.merged
    assert any(n.op == "QuantizeLinear" and n.inputs[1].name == "other_scale"
               for n in canonical.graph.nodes)


def test_int8_pair_writing_a_graph_output_is_kept(tmp_path):
    """The Transpose's dequantized result is also a graph output: its pair stays (the output
    needs it), so does the split, and the graph computes what the QDQ model does."""
    _, qdq = _qdq_split(tmp_path)
    model = onnx.load(qdq)
    dq = next(n for n in model.graph.node if n.op_type == "DequantizeLinear"
              and n.input[0].startswith("split_out"))
    model.graph.output.append(onnx.helper.make_tensor_value_info(
        dq.output[0], onnx.TensorProto.FLOAT, [3, 1, HEADS, TOKENS, DEPTH]))
    canonical, rewritten = canonicalized(model)
    assert "split" not in canonical.merged
    want, got = run_ort(model, _feed()), run_ort(rewritten, _feed())
    assert all(want[k].tobytes() == got[k].tobytes() for k in want)


def test_int8_pairs_on_uint8_after_an_int8_dequantize_are_kept(tmp_path):
    """qkv dequantized from int8 with no zero point, every pair after it with none (so on uint8,
    ONNX's default: negative values clamp to 0): not qkv's grid, so kept with the split, and the
    canonical graph computes what the model does. Main read both grids as uint8, bypassed the
    pairs and let the negative values through."""
    _, qdq = _qdq_split(tmp_path)
    model = onnx.load(qdq)
    nodes = {n.output[0]: n for n in model.graph.node}
    reshape = next(n for n in model.graph.node if n.op_type == "Reshape"
                   and nodes[n.input[0]].op_type == "DequantizeLinear")
    after = list(model.graph.node)[list(model.graph.node).index(reshape):]
    for node in [nodes[reshape.input[0]], *after]:   # qkv's DequantizeLinear and every pair after
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            del node.input[2:]
    del model.graph.value_info[:]
    canonical, rewritten = canonicalized(model)
    assert "split" not in canonical.merged
    # unoptimized: onnxruntime's own QDQ clean-up drops such a pair around a Reshape as well
    want = run_ort(model, _feed(), optimize=False)
    got = run_ort(rewritten, _feed(), optimize=False)
    assert all(want[k].tobytes() == got[k].tobytes() for k in want)
