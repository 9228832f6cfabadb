"""A DequantizeLinear that writes a model output and is read by a layer too (frontend/qdq.py,
``dedicate_dequantize``): the reader gets its own copy, the original keeps writing the output,
and the canonical model computes on onnxruntime bit for bit what the QDQ model does; in a
converted int8 model the reader is then an int8 layer (deepfilternet's enc: its depthwise Convs
read ``e0``..``e2`` and ``c0``, model outputs, and stayed on the CPU: "it dequantizes the
constant erb_conv1.0.weight_quantized")."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from support.models import Builder, canonicalized, run_ort
from support.strategies.i8einsum import EncNet, assert_whole_and_bit_equal, converted


def _tapped_qdq():
    """x -> Q -> DQ -> Relu -> Q -> DQ (``tap``, a model output) -> Conv (int8 weight) -> Q ->
    DQ -> ``y``."""
    b = Builder(seed=0, opset=13)
    x = b.input("x", [1, 3, 5, 6])
    s, z = b.const(np.array(0.02, np.float32)), b.const(np.array(0, np.int8))

    def pair(t: str, name: str = None) -> str:
        return b.op("DequantizeLinear", [b.op("QuantizeLinear", [t, s, z]), s, z], name=name)

    tap = pair(b.op("Relu", [pair(x)]), name="tap")
    weight = b.op("DequantizeLinear", [b.const(np.random.default_rng(1).integers(
        -127, 128, (4, 3, 3, 3)).astype(np.int8)), b.const(np.array(0.001, np.float32)), z])
    y = pair(b.op("Conv", [tap, weight], name="conv", pads=[1, 1, 1, 1]))
    return b.model([y, tap])


def test_a_layer_reading_an_output_dequantize_gets_its_own_copy():
    model = _tapped_qdq()
    _, proto = canonicalized(model)
    writer = {o: n for n in proto.graph.node for o in n.output}
    conv = next(n for n in proto.graph.node if n.name == "conv")
    copy = writer[conv.input[0]]
    assert copy.op_type == "DequantizeLinear" and copy.name == "tap_for_conv", copy.name
    assert writer["tap_out"].name == "tap" and conv.input[0] != "tap_out"
    feed = {"x": np.random.default_rng(2).standard_normal((1, 3, 5, 6)).astype(np.float32)}
    want = run_ort(model, feed, optimize=False)
    got = run_ort(proto, feed, optimize=False)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_an_int8_depthwise_conv_reading_a_model_output_is_on_mrvl(tmp_path: Path):
    """Main: 2 Mrvl + 2 CPU subgraphs (the depthwise Conv and its weight's DequantizeLinear,
    the Einsum); now one Mrvl subgraph, bit-equal to its QDQ model."""
    net = EncNet(tap_output=True)
    assert_whole_and_bit_equal(converted(net, tmp_path / "out"), net)
