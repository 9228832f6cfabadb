"""Rank lifting (frontend/rank_lift.py, rank_ops.py): 1-D signal networks and 2-D feature
vectors run as their 4-D forms. Each model is run on onnxruntime before and after
canonicalize (bit for bit: the pass is exact), converted (one Mrvl subgraph, the MACs on the
accelerator, every node of the model placed in report.json) and verified. On main each of
these models left its 1-D ops on the CPU ("only 2-D convolutions (4-D tensors) map to
Conv2D", "the input is 2-D, not 4-D")."""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from support.models import Builder, canonicalized, run_ort


def _conv1d(b: Builder, x: str, cin: int, cout: int, k: int = 3, **attrs) -> str:
    ins = [x, b.weight(cout, cin // attrs.get("group", 1), k),
           b.const((b.rng.standard_normal(cout) * 0.1).astype(np.float32))]
    return b.op("Conv", ins, kernel_shape=[k], **attrs)


def signal_net(opset: int = 13):
    """Conv1d, BN, Relu, MaxPool1d, a 1x1 Conv1d branch, Concat, Slice, Pad, Conv1d, Mul by a
    per-channel constant, ReduceMean over time: an EEG/keyword-style 1-D CNN."""
    b = Builder(seed=3, opset=opset)
    x = b.input("x", [1, 4, 64])
    y = b.op("Relu", [b.bn(_conv1d(b, x, 4, 8, pads=[1, 1]), 8)], name="relu1")
    y = b.op("MaxPool", [y], name="pool", kernel_shape=[2], strides=[2])
    branch = b.op("Relu", [_conv1d(b, y, 8, 8, k=1)], name="relu_branch")
    y = b.op("Concat", [y, branch], name="cat", axis=1)
    y = b.op("Slice", [y, b.const(np.array([2], np.int64)), b.const(np.array([30], np.int64)),
                       b.const(np.array([-1], np.int64))], name="crop")
    y = b.op("Pad", [y, b.const(np.array([0, 0, 2, 0, 0, 2], np.int64))], name="pad")
    y = _conv1d(b, y, 16, 16, k=5, dilations=[2], strides=[2])
    y = b.op("Mul", [y, b.const(np.linspace(0.5, 1.5, 16, dtype=np.float32).reshape(16, 1))],
             name="scale")
    if opset >= 18:  # the axes an input from opset 18
        y = b.op("ReduceMean", [y, b.const(np.array([2], np.int64))], name="mean", keepdims=1)
    else:
        y = b.op("ReduceMean", [y], name="mean", axes=[2], keepdims=1)
    return b.model([y])


def transposed_net():
    b = Builder(seed=4, opset=13)
    x = b.input("x", [1, 6, 20])
    y = b.op("Relu", [_conv1d(b, x, 6, 8, pads=[1, 1])], name="relu")
    w = b.weight(8, 4, 4)
    y = b.op("ConvTranspose", [y, w, b.const(np.full(4, 0.1, np.float32))], name="up",
             kernel_shape=[4], strides=[2], pads=[1, 1], output_padding=[1])
    return b.model([b.op("Sigmoid", [y], name="gate")])


def average_net():
    b = Builder(seed=5, opset=13)
    x = b.input("x", [1, 3, 40])
    y = b.op("Relu", [_conv1d(b, x, 3, 12, strides=[2])], name="relu")
    y = b.op("AveragePool", [y], name="avg", kernel_shape=[3], pads=[1, 1],
             count_include_pad=0)
    y = b.op("GlobalAveragePool", [y], name="gap")
    y = b.op("Flatten", [y], name="flat", axis=1)
    return b.model([b.gemm(y, 12, 5, transB=1)])


def keyword_head():
    """openWakeWord's head: Flatten, then (Gemm, LayerNorm as torch decomposes it on [N, C],
    Relu) twice, Gemm, Sigmoid."""
    b = Builder(seed=6, opset=13)
    y = b.op("Flatten", [b.input("x", [1, 16, 24])], name="flat", axis=1)
    for k, fin in enumerate((384, 32)):
        y = b.gemm(y, fin, 32, transB=1)
        mean = b.op("ReduceMean", [y], name=f"mean{k}", axes=[-1], keepdims=1)
        d = b.op("Sub", [y, mean], name=f"centre{k}")
        var = b.op("ReduceMean", [b.op("Pow", [d, b.const(np.float32(2.0))], name=f"sq{k}")],
                   name=f"var{k}", axes=[-1], keepdims=1)
        std = b.op("Sqrt", [b.op("Add", [var, b.const(np.float32(1e-5))], name=f"eps{k}")],
                   name=f"std{k}")
        y = b.op("Div", [d, std], name=f"norm{k}")
        y = b.op("Mul", [y, b.const(np.linspace(0.8, 1.2, 32, dtype=np.float32))],
                 name=f"gamma{k}")
        y = b.op("Add", [y, b.const(np.linspace(-0.1, 0.1, 32, dtype=np.float32))],
                 name=f"beta{k}")
        y = b.op("Relu", [y], name=f"relu{k}")
    return b.model([b.op("Sigmoid", [b.gemm(y, 32, 1, transB=1)], name="score")])


def keyword_head_op():
    """The same head exported at opset 17: the LayerNormalization op on [N, C]."""
    b = Builder(seed=6, opset=17)
    y = b.op("Flatten", [b.input("x", [1, 16, 24])], name="flat", axis=1)
    for k, fin in enumerate((384, 32)):
        y = b.op("LayerNormalization", [b.gemm(y, fin, 32, transB=1),
                                        b.const(np.linspace(0.8, 1.2, 32, dtype=np.float32)),
                                        b.const(np.linspace(-0.1, 0.1, 32, dtype=np.float32))],
                 name=f"ln{k}", axis=-1, epsilon=1e-5)
        y = b.op("Relu", [y], name=f"relu{k}")
    return b.model([b.op("Sigmoid", [b.gemm(y, 32, 1, transB=1)], name="score")])


def hand_written_1d():
    """A Conv1d, then a pool written as Unsqueeze(2), 2-D MaxPool, Squeeze(2), then a
    Conv1d: the pairs cancel and the whole is one 4-D region."""
    b = Builder(seed=7, opset=13)
    y = b.op("Relu", [_conv1d(b, b.input("x", [1, 4, 32]), 4, 8)], name="relu")
    y = b.op("Unsqueeze", [y, b.const(np.array([2], np.int64))], name="to_image")
    y = b.op("MaxPool", [y], name="pool2d", kernel_shape=[1, 2], strides=[1, 2])
    y = b.op("Squeeze", [y, b.const(np.array([2], np.int64))], name="to_signal")
    return b.model([b.op("Relu", [_conv1d(b, y, 8, 8)], name="relu_out")])


def constant_piece():
    """A Concat of a Conv1d's output with a constant [1, 2, L] (a learned extra channel)."""
    b = Builder(seed=10, opset=13)
    y = b.op("Relu", [_conv1d(b, b.input("x", [1, 3, 24]), 3, 4)], name="relu")
    piece = b.const(np.linspace(-1, 1, 2 * 22, dtype=np.float32).reshape(1, 2, 22))
    y = b.op("Concat", [y, piece], name="cat", axis=1)
    return b.model([b.op("Relu", [_conv1d(b, y, 6, 4)], name="relu_out")])


def _feed(model, seed: int = 0):
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


MODELS = {"signal": signal_net, "signal_opset18": lambda: signal_net(18),
          "transposed": transposed_net, "average": average_net, "keyword": keyword_head,
          "keyword_op": keyword_head_op, "constant_piece": constant_piece,
          "hand_written": hand_written_1d}


@pytest.mark.parametrize("form", sorted(set(MODELS) - {"keyword"}))
def test_the_lifted_graph_computes_what_the_model_does_bit_for_bit(form):
    model = MODELS[form]()
    canonical, proto = canonicalized(model)
    assert any(" view " in why for why in canonical.rewritten.values())
    ranks = {len(t.shape) for n in canonical.graph.nodes
             if n.op in ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "ReduceMean",
                         "LayerNormalization")
             for t in n.inputs[:1]}
    assert ranks == ({3} if form == "keyword_op" else {4})  # [N, 1, C]; [N, C, 1, L]
    for seed in range(3):
        feeds = _feed(model, seed)
        want, got = run_ort(model, feeds, optimize=False), run_ort(proto, feeds, optimize=False)
        for name, value in want.items():
            assert got[name].shape == value.shape and np.array_equal(got[name], value), name


# A constant Concat piece is exact on the view but no layer takes it (mrvl.concat: "the
# accelerator concatenates activations only", on 2-D models too).
@pytest.mark.parametrize("form", sorted(set(MODELS) - {"constant_piece"}))
def test_a_1d_network_is_one_mrvl_subgraph_with_its_macs_on_mrvl(form, tmp_path):
    model = MODELS[form]()
    result = mrvl_convert.convert(model, tmp_path / "art")
    summary, entries = result.report["summary"], result.report["nodes"]
    assert summary["mrvl_subgraphs"] == 1 and summary["mrvl_mac_share"] >= 0.9, summary
    assert {e["name"] for e in entries} == {n.name for n in model.graph.node}
    lifted = [e for e in entries if " view " in e.get("canonical", "")]
    assert lifted and all(e["placement"] == "mrvl" for e in lifted)
    assert mrvl_convert.compare(model, tmp_path / "art", samples=2).passed


def test_the_boundary_nodes_are_derived_from_the_nodes_they_serve():
    canonical, _ = canonicalized(signal_net())
    added = {n.name: n.op for n in canonical.graph.nodes if n.op in ("Squeeze", "Unsqueeze")}
    assert sorted(added.values()) == ["Squeeze", "Unsqueeze"]  # one in, one out
    assert all(canonical.derived[name] in canonical.op_types for name in added)


def test_a_squeeze_then_unsqueeze_of_the_unit_axis_cancels():
    canonical, _ = canonicalized(hand_written_1d())
    assert canonical.merged.get("to_image") and canonical.merged.get("to_signal")
    ops = [n.op for n in canonical.graph.nodes]
    assert ops.count("Unsqueeze") == 1 and ops.count("Squeeze") == 1


def test_a_token_tensor_between_matmuls_is_not_lifted():
    """[B, T, C] tokens: a MatMul, a LayerNorm written out, a MatMul; no seed fixes them as
    channel-first, so they stay 3-D (their layers take them as they lie)."""
    b = Builder(seed=8, opset=13)
    y = b.op("MatMul", [b.input("x", [1, 6, 8]), b.weight(8, 8)], name="fc1")
    mean = b.op("ReduceMean", [y], name="mean", axes=[-1], keepdims=1)
    y = b.op("Relu", [b.op("Sub", [y, mean], name="centre")], name="relu")
    model = b.model([b.op("MatMul", [y, b.weight(8, 4)], name="fc2")])
    canonical, _ = canonicalized(model)
    assert not any("4-D view" in why for why in canonical.rewritten.values())
    assert all(len(t.shape) == 3 for n in canonical.graph.nodes for t in n.outputs)


def test_a_mean_over_a_vector_s_features_is_within_its_stated_bound():
    """[N, C] -> [N, C, 1, 1]: onnxruntime may add the C terms in another order once the axis
    is no longer the last, so the two means are at most 2 (C - 1) 2**-24 mean|x| apart (the
    bound of rank_lift.py); the bound fails for an error of one ulp of the mean's scale."""
    b = Builder(seed=9, opset=13)
    y = b.gemm(b.input("x", [4, 48]), 48, 96, transB=1)
    model = b.model([b.op("ReduceMean", [b.bn(y, 96)], name="mean", axes=[1], keepdims=1)])
    canonical, proto = canonicalized(model)
    assert "4-D view" in canonical.rewritten["mean"]
    for seed in range(5):
        feeds = _feed(model, seed)
        hidden = run_ort(model, feeds, optimize=False)
        want, got = hidden["mean_out"], run_ort(proto, feeds, optimize=False)["mean_out"]
        normed = run_ort(_bn_output(model), feeds, optimize=False)["bn"]
        bound = 2 * (96 - 1) * 2.0 ** -24 * np.abs(normed).mean(axis=1, keepdims=True)
        assert got.shape == want.shape and np.all(np.abs(got - want) <= bound)
        assert not np.all(np.abs(got - want + 4 * bound) <= bound)


def _bn_output(model):
    import onnx
    from onnx import helper
    out = onnx.ModelProto.FromString(model.SerializeToString())
    bn = next(n for n in out.graph.node if n.op_type == "BatchNormalization")
    out.graph.node.append(helper.make_node("Identity", [bn.output[0]], ["bn"], name="bn_id"))
    out.graph.output.append(helper.make_tensor_value_info("bn", onnx.TensorProto.FLOAT, None))
    return out


@pytest.mark.parametrize("form", ["transposed", "average", "hand_written"])
def test_an_int8_1d_network_is_lifted_with_its_dequantized_weights(form, tmp_path):
    """The QDQ model of a 1-D network: the weights' DequantizeLinear constants take the 4-D
    view too, and the per-tensor Q/DQ pairs are part of the region; every MAC runs in int8 on
    Mrvl (on main: 0%, "only 2-D convolutions (4-D tensors) map to Conv2D")."""
    from mrvl_convert.quantize.recipe import Quantization

    model = MODELS[form]()
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    samples = np.random.default_rng(0).standard_normal([8] + shape[1:]).astype(np.float32)
    result = mrvl_convert.convert(model, tmp_path / "art",
                                  quantize=Quantization(calibration={"x": samples}))
    summary = result.report["summary"]
    assert summary["mrvl_subgraphs"] == 1 and summary["cpu_subgraphs"] == 0, summary
    assert result.report["precision"]["shares"]["int8"] >= 0.9
