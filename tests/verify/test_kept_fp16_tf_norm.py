"""verify's int8 reference computes a tf-spelled LayerNorm as the artifact does
(``verify/norms_written.py``): tf2onnx writes a Keras LayerNormalization as ``x * s + (beta -
m * s)``, ``s = r * gamma``, its moments GlobalAveragePools; the converter computes ``(x - m) *
r * gamma + beta`` (``frontend/norm_forms.py``) as three fp16 layers. A reference that kept
tf's spelling landed on the neighbouring fp16 value for about half the LayerNorm's outputs, an
int8 step after its QuantizeLinear now and then, and an FFN after it (FC, bias, Relu, FC)
carried that to the output: g2p-id's bert_pron FAILed against its own QDQ model (max_rel 0.14)
on the integration branch before this, and so did this model; bit-equal now."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

import mrvl_convert
from mrvl_convert.frontend.load import name_nodes
from mrvl_convert.quantize import Quantization
from mrvl_convert.runtime.session import HybridSession
from mrvl_convert.verify.norms_written import norms_as_written
from support.models import Builder, run_ort
from support.tf_bert import keras_layer_norm

T, C = 32, 64


def _ffn_after_norm(seed: int = 0) -> onnx.ModelProto:
    """x [N, T, C] (N dynamic, as tf2onnx writes it) -> Dense + x -> Keras LayerNorm -> Dense,
    Relu, Dense -> + the norm, each Dense a MatMul and a bias Add on [T, C] (tf2onnx's
    Tensordot): a BERT block's attention output and its FFN."""
    b = Builder(seed=seed, opset=13)
    x = b.input("x", ["N", T, C])
    dense = b.matmul_add(b.op("Reshape", [x, b.const(np.array([T, C], np.int64))]), C, C)
    dense = b.op("Reshape", [dense, b.const(np.array([1, T, C], np.int64))])
    norm = keras_layer_norm(b, b.op("Add", [x, dense]), C)
    flat = b.op("Reshape", [norm, b.const(np.array([T, C], np.int64))])
    hidden = b.op("Relu", [b.matmul_add(flat, C, C)])
    out = b.op("Reshape", [b.matmul_add(hidden, C, C), b.const(np.array([1, T, C], np.int64))])
    return b.model([b.op("Add", [norm, out])])


def _feeds(rng, count: int):
    return [{"x": (rng.standard_normal((1, T, C)) * 3 + 1).astype(np.float32)}
            for _ in range(count)]


def test_an_int8_models_tf_layer_norm_is_judged_as_the_artifact_computes_it(tmp_path):
    rng = np.random.default_rng(0)
    calibration = {"x": np.concatenate([f["x"] for f in _feeds(rng, 8)])}
    result = mrvl_convert.convert(_ffn_after_norm(), tmp_path / "a", shapes={"x": [1, T, C]},
                                  quantize=Quantization(calibration, "minmax"))
    assert result.summary["mrvl_subgraphs"] == 1 and result.summary["cpu_subgraphs"] == 0
    rules = {e["rule"] for e in result.placements}
    assert "mrvl.reduce_mean" in rules  # the premise: the norm runs as fp16 layers
    qdq = tmp_path / "a" / result.manifest["quantization"]["file"]
    comparison = mrvl_convert.compare(qdq, tmp_path / "a", _feeds(rng, 4))
    assert comparison.passed, [(r.tensor, r.max_rel) for r in comparison.judged_rows]
    assert all(r.max_abs == 0 for r in comparison.judged_rows), \
        [(r.tensor, r.max_abs) for r in comparison.judged_rows]


def _with_outputs(proto: onnx.ModelProto, names) -> onnx.ModelProto:
    copy = onnx.ModelProto.FromString(proto.SerializeToString())
    copy.graph.output.extend(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                             for n in names)
    return copy


def test_the_reference_norm_is_rewritten_within_the_stated_bound(tmp_path):
    """``norms_as_written`` alone, on onnxruntime: the norm's output (its name kept) before and
    after within the bounds of ``norm_pools.py`` and ``norm_forms.py`` (module docstring):
    ``8 u (|x s| + |m s| + |beta|)`` for the formula, and the moments' ``2 C u mean|.|`` each,
    the mean's through s, the variance's through ``r``'s relative change ``dv / 2 (v + eps)``."""
    rng = np.random.default_rng(2)
    calibration = {"x": np.concatenate([f["x"] for f in _feeds(rng, 8)])}
    result = mrvl_convert.convert(_ffn_after_norm(), tmp_path / "a", shapes={"x": [1, T, C]},
                                  quantize=Quantization(calibration, "minmax"))
    proto = onnx.load(str(tmp_path / "a" / result.manifest["quantization"]["file"]))
    name_nodes(proto)
    before = onnx.ModelProto.FromString(proto.SerializeToString())
    assert norms_as_written(proto, HybridSession(tmp_path / "a"), 13)
    ops = {n.output[0]: n for n in proto.graph.node}
    norm = ops["Add_24_out"]  # x s + (beta - m s) became ((x - m) r) gamma + beta
    scaled = ops[norm.input[0]]
    assert scaled.op_type == "Mul" and ops[scaled.input[0]].op_type == "Mul"
    assert "GlobalAveragePool" not in {n.op_type for n in proto.graph.node}
    inits = {t.name: numpy_helper.to_array(t) for t in _ffn_after_norm().graph.initializer}
    gamma, beta, eps = inits["c18"], inits["c20"], inits["c14"]
    u = 2.0 ** -24
    stats = ["Add_9_out", "GlobalAveragePool_10_out", "GlobalAveragePool_13_out"]
    for feed in _feeds(rng, 3):
        ran = run_ort(_with_outputs(before, stats + ["Add_24_out"]), feed)
        x, m, v, want = (ran[k] for k in stats + ["Add_24_out"])
        got = run_ort(_with_outputs(proto, ["Add_24_out"]), feed)["Add_24_out"]
        s = gamma / np.sqrt(v + eps)
        bound = (8 * u * (np.abs(x * s) + np.abs(m * s) + np.abs(beta))
                 + 2 * C * u * np.abs(x).mean(-1, keepdims=True) * np.abs(s)
                 + np.abs((x - m) * s) * C * u * ((x - m) ** 2).mean(-1, keepdims=True)
                 / (v + eps))
        assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) - bound))
