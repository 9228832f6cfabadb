"""An Einsum in an int8 model (frontend/einsum_forms.py inside QDQ pairs; verify's reference,
frontend/recurrent_reference.py): the conversion takes it as fp16 layers between quant layers,
and verify's reference rewrites the QDQ model's Einsum under the same node names, computing what
the QDQ model does within einsum_forms.py's bound, so the int8 artifact is bit-equal to it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from mrvl_convert.frontend.recurrent_reference import unrolled_cells
from mrvl_convert.runtime.session import HybridSession
from support.models import run_ort
from support.strategies.einsum import bound
from support.strategies.i8einsum import (EncNet, assert_whole_and_bit_equal, converted,
                                          feeds, verified)


def test_a_grouped_linear_between_qdq_pairs_is_one_mrvl_subgraph(tmp_path: Path):
    """Main: 1 Mrvl + 1 CPU subgraph ("no rule handles op type Einsum")."""
    net = EncNet(tap_output=False, frames=5, groups=3, inner=2, hidden=4, seed=3)
    result = converted(net, tmp_path / "out")
    _quantized_after(result, tail_add=False)
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0), [
        (n["name"], n.get("reason")) for n in result.report["nodes"] if n["placement"] != "mrvl"]
    assert "became" in next(n for n in result.report["nodes"]
                            if n["name"] == "grouped_linear")["canonical"]
    comparison = verified(result, net)
    assert comparison.passed, comparison.summary_line()
    # bit-equal: the reference rounds where the fp16 MatMul rounds (before: up to 2^-9 off)
    assert all(row.max_abs == 0 for row in comparison.judged_rows), comparison.summary_line()


def test_an_einsum_whose_relu_is_quantized_is_bit_equal(tmp_path: Path):
    """enc's df_fc_emb: DequantizeLinear -> Einsum -> Reshape -> Relu -> QuantizeLinear."""
    net = EncNet(tail_add=True, seed=5)
    result = converted(net, tmp_path / "out")
    _quantized_after(result, tail_add=True)
    assert_whole_and_bit_equal(result, net)


def _quantized_after(result, tail_add: bool) -> None:
    """Whether the Relu after the Einsum feeds a QuantizeLinear in the artifact's QDQ model."""
    qdq = onnx.load(str(result.out_dir / result.manifest["quantization"]["file"]))
    relu = next(n for n in qdq.graph.node if n.name == "relu2")
    readers = [n.op_type for n in qdq.graph.node if relu.output[0] in n.input]
    assert ("QuantizeLinear" in readers) == tail_add, readers


def test_the_reference_rewrites_the_einsum_under_the_conversions_names(tmp_path: Path):
    net = EncNet(tap_output=False, seed=4)
    result = converted(net, tmp_path / "out")
    qdq = onnx.load(str(result.out_dir / result.manifest["quantization"]["file"]))
    shapes = {"x": [1, 2, net.frames, net.bins]}
    rewritten = unrolled_cells(qdq, shapes)
    assert "Einsum" not in [n.op_type for n in rewritten.graph.node]
    sources = {n for stage in HybridSession(result.out_dir).stages if stage.kind == "mrvl"
               for step in stage.runner.steps for n in step.spec.source_nodes}
    derived = {n.name for n in rewritten.graph.node if n.name.startswith("grouped_linear")}
    assert {"grouped_linear", "grouped_linear_matmul"} <= derived and derived <= sources, \
        (derived, sorted(sources))
    _within_the_einsums_bound(qdq, rewritten, net)


def _within_the_einsums_bound(qdq: onnx.ModelProto, rewritten: onnx.ModelProto,
                              net: EncNet) -> None:
    """The Einsum's result of both models, on onnxruntime: within ``2 gamma_n sum|products|``
    of the operands the QDQ model hands it."""
    weight = next(onnx.numpy_helper.to_array(t) for t in qdq.graph.initializer
                  if t.name == "wg")
    reader = next(n for n in qdq.graph.node if n.op_type == "Einsum")
    tokens, out = reader.input[0], reader.output[0]
    for feed in feeds(net):
        want = run_ort(_exposing(qdq, [tokens, out]), feed, [tokens, out], optimize=False)
        got = run_ort(_exposing(rewritten, [out]), feed, [out], optimize=False)[out]
        limit = bound("btgi,gih->btgh", [want[tokens], weight],
                      (want[tokens].shape, weight.shape))
        assert (np.abs(got.astype(np.float64) - want[out]) <= limit).all()


def _exposing(model: onnx.ModelProto, names) -> onnx.ModelProto:
    """A copy of ``model`` with the tensors ``names`` among its outputs."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    copy.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names)
    return copy
