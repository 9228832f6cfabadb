"""A Concat the accelerator does not take moves past the per-position layers after it
(``frontend/concat_sinking.py``): the ultralytics head, as exported, stays in one Mrvl
subgraph, and the rewritten graph gives onnxruntime's outputs bit for bit."""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import onnxruntime as ort
import pytest
from hypothesis import given, settings, strategies as st

import mrvl_convert
from mrvl_convert.frontend.canonicalize import canonicalize
from mrvl_convert.frontend.load import load_model
from support.models import Builder

REG, CLASSES = 4, 3
SIZES = (8, 4)  # two scales: 8x8 and 4x4 anchors


def ultralytics_head(opset: int = 17, tail: Optional[str] = None) -> onnx.ModelProto:
    """Backbone convs, then the head as the ultralytics exporter writes it: per scale
    Concat(box, cls) on channels and Reshape to [1, C, HW]; the scales joined on the anchor
    axis; Split into box and class; the DFL (Reshape, Transpose, Softmax, 1x1 Conv, Reshape);
    Sigmoid; a decode (Mul by per-anchor strides, a constant over the anchors); Concat.
    ``tail``: what reads the anchor Concat instead of the Split (the negative cases)."""
    b = Builder(seed=3, opset=opset)
    x = b.op("Relu", [b.conv(b.input("images", [1, 3, 32, 32]), 3, 8, strides=[4, 4],
                             pads=[1, 1, 1, 1])])
    joined: List[str] = []
    for size in SIZES:
        x = b.op("Relu", [b.conv(x, 8, 8, strides=[1, 1] if size == 8 else [2, 2],
                                 pads=[1, 1, 1, 1])])
        box, cls = b.conv(x, 8, 4 * REG, k=1), b.conv(x, 8, CLASSES, k=1)
        both = b.op("Concat", [box, cls], axis=1)
        joined.append(b.op("Reshape", [both, b.const(np.array([1, 4 * REG + CLASSES,
                                                               size * size], np.int64))]))
    anchors = sum(s * s for s in SIZES)
    if tail == "conv3x3":  # [1, C, 1, HW]: the anchors are W, which a 3x3 Conv mixes
        joined = [b.op("Unsqueeze", [j, b.const(np.array([2], np.int64))]) for j in joined]
    y = b.op("Concat", joined, name="anchor_concat", axis=-1 if tail == "conv3x3" else 2)
    if tail is not None:
        return b.model([_tail(b, y, tail)])
    if opset >= 13:
        box = b.op("Split", [y, b.const(np.array([4 * REG, CLASSES], np.int64))],
                   name="head_split", outputs=2, axis=1)
    else:
        box = b.op("Split", [y], name="head_split", outputs=2, axis=1, split=[4 * REG, CLASSES])
    cls = "head_split_out1"
    box = b.op("Reshape", [box, b.const(np.array([1, 4, REG, anchors], np.int64))])
    box = b.op("Transpose", [box], perm=[0, 2, 1, 3])
    if opset >= 13:
        box = b.op("Softmax", [box], axis=1)
    else:  # softmax(dim=1) as torch exports it before opset 13: over the last axis, between
        box = b.op("Transpose", [box], perm=[0, 3, 2, 1])  # two Transposes
        box = b.op("Transpose", [b.op("Softmax", [box], axis=3)], perm=[0, 3, 2, 1])
    bins = np.arange(REG, dtype=np.float32).reshape(1, REG, 1, 1)
    box = b.op("Conv", [box, b.const(bins)], name="dfl_conv", kernel_shape=[1, 1])
    box = b.op("Reshape", [box, b.const(np.array([1, 4, anchors], np.int64))])
    strides = np.concatenate([np.full(s * s, 32 // s, np.float32) for s in SIZES])
    box = b.op("Mul", [box, b.const(strides.reshape(1, 1, anchors))])
    out = b.op("Concat", [box, b.op("Sigmoid", [cls])], axis=1)
    return b.model([out])


def _tail(b: Builder, y: str, tail: str) -> str:
    if tail == "softmax_on_anchors":
        return b.op("Softmax", [y], axis=2)
    if tail == "softmax_on_channels":
        return b.op("Softmax", [y], axis=1)
    if tail == "conv3x3":
        return b.conv(y, 4 * REG + CLASSES, 4, k=3, pads=[1, 1, 1, 1])
    raise ValueError(tail)


def run(model: onnx.ModelProto, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(None, feed)


def exported(graph: gs.Graph) -> onnx.ModelProto:
    model = gs.export_onnx(graph, do_type_check=False)
    model.ir_version = 8
    return model


FEED = {"images": np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)}


def _past_views(concat: gs.Node, graph: Optional[gs.Graph] = None) -> gs.Node:
    """The node that reads what ``concat`` joined, past the 4-D views concat_views.py puts
    around it and (given ``graph``) around the Concat that reads it (nodes named after a
    Concat), or the last view when it writes a graph output."""
    prefixes = tuple(f"{n.name}_" for n in (graph.nodes if graph else [concat])
                     if n.op == "Concat")
    node = concat
    while node.outputs[0].outputs:
        reader = node.outputs[0].outputs[0]
        if reader.op not in ("Transpose", "Reshape") or not reader.name.startswith(prefixes):
            return reader
        node = reader
    return node


def _writer(graph: gs.Graph) -> str:
    """The op that computes the model's output, before concat_views.py's views of it."""
    node = graph.outputs[0].inputs[0]
    while node.op in ("Transpose", "Reshape") and node.inputs[0].inputs:
        node = node.inputs[0].inputs[0]
    return node.op


@pytest.mark.parametrize("opset", [17, 12])
def test_the_head_keeps_onnxruntimes_outputs_bit_for_bit(opset):
    model = ultralytics_head(opset)
    canonical = canonicalize(load_model(model))
    ops = [n.op for n in canonical.graph.nodes]
    assert "Split" not in ops  # each scale's copy reads its box and class convs again
    assert ops.count("Softmax") == ops.count("Sigmoid") == len(SIZES)
    moved = [n for n in canonical.graph.nodes if n.op == "Concat"
             and "Concat on axis 2 of 3-D tensors" in canonical.rewritten.get(n.name, "")]
    assert {_past_views(n, canonical.graph).op for n in moved} == {"Mul", "Concat"}  # concat_views.py's views
    for got, want in zip(run(exported(canonical.graph), FEED), run(model, FEED)):
        assert np.array_equal(got, want)


@pytest.mark.parametrize("opset", [17, 12])
def test_the_head_is_one_mrvl_subgraph_and_the_report_says_where_each_node_went(tmp_path,
                                                                                 opset):
    model = ultralytics_head(opset)
    result = mrvl_convert.convert(model, tmp_path / "o")
    # the moved anchor Concat a channel Concat of 4-D views too (concat_views.py): on Mrvl
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
    entries = {e["name"]: e for e in result.report["nodes"]}
    assert entries["anchor_concat"]["placement"] == "mrvl"
    assert "moved past" in entries["anchor_concat"]["canonical"]
    assert entries["dfl_conv"]["placement"] == "mrvl"
    assert [d["stage"] for d in entries["dfl_conv"]["derived"]] == \
        [entries["dfl_conv"]["stage"]]
    assert "inputs of the Concat" in entries["head_split"]["canonical"]
    merged = [e for e in entries.values() if e.get("merged_into")]
    assert len(merged) == 2 * len(SIZES)  # each scale's Concat and Reshape
    assert all(e["placement"] == "mrvl" for e in merged)
    report = mrvl_convert.compare(model, result.out_dir, FEED)
    assert report.passed, report.summary_line()


@pytest.mark.parametrize("tail", ["softmax_on_anchors", "conv3x3"])
def test_a_reader_that_mixes_positions_keeps_the_concat_in_front(tail):
    model = ultralytics_head(tail=tail)
    canonical = canonicalize(load_model(model))
    [concat] = [n for n in canonical.graph.nodes if n.name == "anchor_concat"]
    assert concat.op == "Concat" and len(concat.inputs) == len(SIZES)
    for got, want in zip(run(exported(canonical.graph), FEED), run(model, FEED)):
        assert np.array_equal(got, want)


def test_softmax_before_opset_13_normalizes_over_the_concat_axis_too():
    """Softmax-11 on axis 1 flattens axes 1.. into one: it mixes the anchors, and stays."""
    for opset, moved in ((11, False), (13, True)):
        canonical = canonicalize(load_model(ultralytics_head(opset, "softmax_on_channels")))
        names = {n.name for n in canonical.graph.nodes if n.op == "Concat"}
        assert ("anchor_concat" in names and _writer(canonical.graph) == "Concat") is moved, opset


def test_a_concat_that_is_a_model_output_stays():
    b = Builder(opset=17)
    x = b.input("x", [1, 4, 6])
    y = b.op("Concat", [b.op("Relu", [x]), b.op("Tanh", [x])], name="joined", axis=2)
    model = b.model([y, b.op("Sigmoid", [y])])
    canonical = canonicalize(load_model(model))
    assert [n.op for n in canonical.graph.nodes].count("Sigmoid") == 1


def test_a_piece_nothing_reads_gets_no_concat_and_the_first_moved_one_keeps_the_name(tmp_path):
    b = Builder(opset=17)
    x = b.input("x", [1, 6, 4, 4])
    parts = [b.op("Reshape", [b.op("Relu", [b.conv(x, 6, 6, k=1)]),
                              b.const(np.array([1, 6, 16], np.int64))]) for _ in range(2)]
    y = b.op("Concat", parts, name="joined", axis=2)
    b.op("Split", [y, b.const(np.array([2, 4], np.int64))], name="pieces", outputs=2, axis=1)
    model = b.model([b.op("Sigmoid", ["pieces_out1"], name="gate")])
    canonical = canonicalize(load_model(model))
    concats = [n for n in canonical.graph.nodes if n.op == "Concat"]
    assert [n.name for n in concats] == ["joined"]
    assert _past_views(concats[0]).outputs[0].name == "gate_out"
    feed = {"x": np.random.default_rng(1).standard_normal((1, 6, 4, 4)).astype(np.float32)}
    assert np.array_equal(run(exported(canonical.graph), feed)[0], run(model, feed)[0])
    result = mrvl_convert.convert(model, tmp_path / "o")
    entries = {e["name"]: e for e in result.report["nodes"]}
    assert entries["joined"]["placement"] != "removed"


@st.composite
def joined_chains(draw) -> onnx.ModelProto:
    """Random Concats (any axis but 4-D channels) of activations, followed by a random chain
    of layers the rewrite may move it past, each kept only where it applies."""
    rank = draw(st.sampled_from([3, 4]))
    axis = draw(st.sampled_from([a for a in range(1, rank) if (rank, a) != (4, 1)]))
    base = [1] + [draw(st.integers(2, 3)) for _ in range(rank - 1)]
    b = Builder(seed=draw(st.integers(0, 99)), opset=17)
    lengths = draw(st.lists(st.integers(1, 4), min_size=2, max_size=3))
    parts = [b.op("Relu", [b.input(f"x{k}", base[:axis] + [n] + base[axis + 1:])])
             for k, n in enumerate(lengths)]
    y = b.op("Concat", parts, axis=axis)
    shape = base[:axis] + [sum(lengths)] + base[axis + 1:]
    outputs = []
    for op in draw(st.lists(st.sampled_from(["Sigmoid", "Transpose", "Softmax", "Reshape",
                                             "Conv", "Split"]), max_size=4)):
        others = [i for i in range(len(shape)) if i != axis]
        if op == "Sigmoid":
            y = b.op("Sigmoid", [y])
        elif op == "Transpose":
            perm = draw(st.permutations(range(len(shape))))
            y = b.op("Transpose", [y], perm=list(perm))
            shape, axis = [shape[p] for p in perm], list(perm).index(axis)
        elif op == "Softmax":
            y = b.op("Softmax", [y], axis=draw(st.sampled_from(others)))
        elif op == "Reshape":
            pairs = [i for i in others if i + 1 in others]
            if not pairs:
                continue
            i = draw(st.sampled_from(pairs))
            shape = shape[:i] + [shape[i] * shape[i + 1]] + shape[i + 2:]
            axis -= axis > i
            y = b.op("Reshape", [y, b.const(np.array(shape, np.int64))])
        elif op == "Conv" and len(shape) == 4 and axis in (2, 3):
            out = draw(st.integers(1, 3))
            y = b.op("Conv", [y, b.weight(out, shape[1], 1, 1), b.weight(out)],
                     kernel_shape=[1, 1])
            shape = [shape[0], out] + shape[2:]
        elif op == "Split" and any(shape[i] >= 2 for i in others):
            i = draw(st.sampled_from([i for i in others if shape[i] >= 2]))
            y = b.op("Split", [y, b.const(np.array([1, shape[i] - 1], np.int64))],
                     outputs=2, axis=i)
            outputs.append(y + "1")
            shape = shape[:i] + [1] + shape[i + 1:]
    return b.model([y] + outputs)


@given(joined_chains())
@settings(max_examples=150)
def test_moving_a_concat_keeps_onnxruntimes_outputs_bit_for_bit(model):
    canonical = canonicalize(load_model(model))
    rng = np.random.default_rng(0)
    feed = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
            .astype(np.float32) for i in model.graph.input}
    for got, want in zip(run(exported(canonical.graph), feed), run(model, feed)):
        assert np.array_equal(got, want)


def test_the_int8_head_moves_past_its_per_tensor_pairs_and_is_one_mrvl_subgraph(tmp_path):
    """quantize_static puts a QuantizeLinear / DequantizeLinear pair (one scale) after the
    anchor Concat and after each step of the head: the Concat moves past them too."""
    from mrvl_convert.quantize.recipe import Quantization, quantize_int8
    from mrvl_convert.runtime.options import qdq_as_written

    fp32 = tmp_path / "head.onnx"
    onnx.save(ultralytics_head(), str(fp32))
    samples = {"images": np.random.default_rng(5).random((4, 3, 32, 32)).astype(np.float32)}
    qdq = onnx.load(str(quantize_int8(fp32, tmp_path / "head.int8.onnx", samples)))
    canonical = canonicalize(load_model(qdq))
    ops = [n.op for n in canonical.graph.nodes]
    assert ops.count("Softmax") == ops.count("Sigmoid") == len(SIZES)  # one DFL per scale
    options = qdq_as_written(ort.SessionOptions())
    options.log_severity_level = 3
    rewritten = ort.InferenceSession(exported(canonical.graph).SerializeToString(), options,
                                     providers=["CPUExecutionProvider"])
    original = ort.InferenceSession(qdq.SerializeToString(), options,
                                    providers=["CPUExecutionProvider"])
    for got, want in zip(rewritten.run(None, FEED), original.run(None, FEED)):
        assert np.array_equal(got, want)
    result = mrvl_convert.convert(fp32, tmp_path / "o",
                                  quantize=Quantization(calibration=samples))
    assert result.summary["mrvl_subgraphs"] == 1


def test_a_pair_with_a_scale_per_position_of_the_axis_keeps_the_concat_in_front():
    b = Builder(opset=17)
    parts = [b.op("Relu", [b.input(f"x{k}", [1, 4, n])]) for k, n in enumerate((3, 5))]
    y = b.op("Concat", parts, name="joined", axis=2)
    scale = b.const(np.linspace(0.01, 0.02, 8).astype(np.float32))
    zero = b.const(np.zeros(8, np.int8))
    q = b.op("QuantizeLinear", [y, scale, zero], axis=2)
    model = b.model([b.op("DequantizeLinear", [q, scale, zero], axis=2)])
    canonical = canonicalize(load_model(model))
    [concat] = [n for n in canonical.graph.nodes if n.op == "Concat"]
    assert concat.name == "joined" and _past_views(concat).op == "QuantizeLinear"


def test_a_concat_read_through_a_qdq_pair_alone_stays_in_front_of_it():
    """Moving it past the pair gains nothing (it is a channel Concat of 4-D views,
    concat_views.py) and took the int8 FC after the pair its dequantized input."""
    b = Builder(opset=17)
    parts = [b.op("Relu", [b.input(f"x{k}", [1, n])]) for k, n in enumerate((3, 5))]
    y = b.op("Concat", parts, name="joined", axis=1)
    scale, zero = b.const(np.array(0.02, np.float32)), b.const(np.array(0, np.int8))
    q = b.op("QuantizeLinear", [y, scale, zero])
    d = b.op("DequantizeLinear", [q, scale, zero])
    model = b.model([b.op("MatMul", [d, b.weight(8, 2)], name="fc")])
    canonical = canonicalize(load_model(model))
    [concat] = [n for n in canonical.graph.nodes if n.op == "Concat"]
    assert concat.name == "joined" and _past_views(concat).op == "QuantizeLinear"
    assert "moved past" not in canonical.rewritten.get("joined", "")
    feed = {f"x{k}": np.random.default_rng(k).standard_normal((1, n)).astype(np.float32)
            for k, n in enumerate((3, 5))}
    assert np.array_equal(run(exported(canonical.graph), feed)[0], run(model, feed)[0])
