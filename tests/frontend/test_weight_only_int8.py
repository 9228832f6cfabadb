"""frontend/qdq.py: weight-only int8 (no activation quantized; each weight a DequantizeLinear
of an int8 initializer, or ``Cast -> Mul(scale)``) folds into the float weights onnxruntime
computes at run time, so an fp16 conversion sees float layers; a QDQ model that quantizes its
activations keeps its weights' DequantizeLinears for the int8 rules.

The canonical graph is run on onnxruntime against the original: bit for bit the same, with
onnxruntime's graph optimizations off: at its default level it fuses a weight's
DequantizeLinear with its MatMul into a kernel that also quantizes the activations, which
computes something else than the ONNX graph says (0.8 off on outputs of about 96 here).
"""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest

import mrvl_convert
from mrvl_convert.frontend.canonicalize import canonicalize
from mrvl_convert.frontend.load import load_model
from support.models import Builder


def run_ort(model: onnx.ModelProto, feed):
    """The ONNX graph's own semantics: onnxruntime with its graph optimizations off."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feed)))


def _int8(fin: int, fout: int, seed: int):
    w = np.random.default_rng(seed).standard_normal((fin, fout)).astype(np.float32)
    scale = (np.abs(w).max(axis=0) / 127).astype(np.float32)
    return np.clip(np.round(w / scale), -127, 127).astype(np.int8), scale


def mlp(form: str, quantize_activations: bool = False) -> onnx.ModelProto:
    """Two MatMul + Add + Relu layers on [1, 16, 32] tokens, weights int8 per output channel:
    ``form`` "dq" (DequantizeLinear, axis 1) or "cast_mul" (Cast -> Mul, as torch.ao exports)."""
    b = Builder(0, opset=13)
    x = b.input("x", [1, 16, 32])
    if quantize_activations:
        scale, zero = b.const(np.float32(0.05)), b.const(np.int8(0))
        x = b.op("DequantizeLinear", [b.op("QuantizeLinear", [x, scale, zero]), scale, zero])
    for k, (fin, fout) in enumerate(((32, 64), (64, 32))):
        q, scale = _int8(fin, fout, k)
        if form == "dq":
            w = b.op("DequantizeLinear", [b.const(q), b.const(scale),
                                          b.const(np.zeros(fout, np.int8))], axis=1)
        else:
            w = b.op("Mul", [b.op("Cast", [b.const(q)], to=onnx.TensorProto.FLOAT),
                             b.const(scale)])
        x = b.op("Add", [b.op("MatMul", [x, w]), b.const(np.full(fout, 0.1, np.float32))])
        x = b.op("Relu", [x], name=f"relu{k}")
    return b.model([x])


def _exported(graph: gs.Graph) -> onnx.ModelProto:
    model = gs.export_onnx(graph, do_type_check=False)
    model.ir_version = 8
    return model


def _feed():
    return {"x": np.random.default_rng(9).standard_normal((1, 16, 32)).astype(np.float32)}


@pytest.mark.parametrize("form", ["dq", "cast_mul"])
def test_weight_only_int8_folds_into_the_float_weights_bit_for_bit(form):
    model = mlp(form)
    canonical = canonicalize(load_model(model))
    assert [n.op for n in canonical.graph.nodes] == ["MatMul", "Add", "Relu"] * 2
    for node in (n for n in canonical.graph.nodes if n.op == "MatMul"):
        weight = node.inputs[1]
        assert isinstance(weight, gs.Constant) and weight.values.dtype == np.float32
    got = run_ort(_exported(canonical.graph), _feed())
    want = run_ort(model, _feed())
    assert all(np.array_equal(got[k], want[k]) for k in want)


def test_a_weight_only_int8_model_is_one_mrvl_subgraph_in_fp16(tmp_path):
    model = mlp("dq")
    result = mrvl_convert.convert(model, tmp_path / "art")
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    removed = [e for e in result.report["nodes"] if e["op_type"] == "DequantizeLinear"]
    assert removed and all(e["placement"] == "removed" for e in removed)
    assert mrvl_convert.compare(model, tmp_path / "art", _feed()).passed


def test_a_model_that_quantizes_its_activations_keeps_its_weights_dequantize():
    canonical = canonicalize(load_model(mlp("dq", quantize_activations=True)))
    weights = [n for n in canonical.graph.nodes if n.op == "DequantizeLinear"
               and isinstance(n.inputs[0], gs.Constant)]
    assert len(weights) == 2
