"""``verify --layers`` takes a tensor only the converter's rewrite of the model has (a
DequantizeLinear's copy ``<x>_DequantizeLinear_Output_for_<reader>`` at a stage boundary) from
that rewrite (``verify/float_form.py``), rounded where the artifact's fp16 layers round
(``verify/kept_fp16.py``). The copy is ``frontend/qdq.py``'s ``dedicate_dequantize``; the layers
name the original, and ``verify/kept_moves.py`` reads a DequantizeLinear copy of one quantized
tensor as holding the exact layer's unrounded value. Before it an fp16 layer reading the copy (a post-norm residual Add reading
the dequantized LayerNorm output its FFN also reads) had that input rounded in the rewrite and
not in the model, so the rewrite's values drifted by int8 steps from the LayerNorm after it on:
g2p-id tiny-pron's int8 artifact FAILed ``--layers`` on eight
``query*_DequantizeLinear_Output_for_Add_N`` boundaries (rel 0.009-0.039) that matched the
model's own ``query*_DequantizeLinear_Output`` bit for bit. Here that block, built small: every
tensor the rewrite shares with the model has the model's value, bit for bit."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

import numpy as np
import onnx
import onnxruntime as ort

from mrvl_convert.runtime.session import HybridSession
from mrvl_convert.verify.compare import compare
from mrvl_convert.verify.float_form import mapped_form
from mrvl_convert.verify.kept_fp16 import rounded_as_artifact
from mrvl_convert.verify.layer_compare import named_copy
from support.int8 import converted_int8
from support.models import Builder
from support.transformer_ops import scalar, token_front

T, C = 16, 32


def _layer_norm(b: Builder, x: str, prefix: str) -> str:
    mean = b.op("ReduceMean", [x], name=f"{prefix}mean", axes=[-1], keepdims=1)
    d = b.op("Sub", [x, mean], name=f"{prefix}centre")
    square = b.op("Pow", [d, scalar(b, 2.0)], name=f"{prefix}square")
    var = b.op("ReduceMean", [square], name=f"{prefix}var", axes=[-1], keepdims=1)
    std = b.op("Sqrt", [b.op("Add", [var, scalar(b, 1e-5)], name=f"{prefix}eps")],
               name=f"{prefix}std")
    normed = b.op("Div", [d, std], name=f"{prefix}normed")
    gamma = b.const(np.linspace(0.5, 1.5, C).astype(np.float32))
    beta = b.const(np.linspace(-0.25, 0.25, C).astype(np.float32))
    return b.op("Add", [b.op("Mul", [normed, gamma], name=f"{prefix}gamma"), beta],
                name=f"{prefix}beta")


def post_norm_block() -> onnx.ModelProto:
    """LayerNorm, FFN (MatMul, Relu, MatMul), the residual Add of the LayerNorm's output and
    the FFN's, LayerNorm, MatMul: a transformer encoder layer as torch writes it (post-norm)."""
    b = Builder(3)
    n1 = _layer_norm(b, token_front(b, [1, T, C]), "ln1_")
    ffn = b.matmul_add(b.op("Relu", [b.matmul_add(n1, C, 2 * C)]), 2 * C, C)
    n2 = _layer_norm(b, b.op("Add", [n1, ffn], name="residual"), "ln2_")
    return b.model([b.matmul_add(n2, C, C)])


def _feeds(count: int, seed: int) -> List[Dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.uniform(-1, 1, [1, T, C]).astype(np.float32)} for _ in range(count)]


def _values(model: onnx.ModelProto, names: List[str], feed) -> Dict[str, np.ndarray]:
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names)
    session = ort.InferenceSession(probe.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return dict(zip(names, session.run(None, feed)))


def _float_results(model: onnx.ModelProto) -> List[str]:
    types = {v.name: v.type.tensor_type.elem_type
             for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    return [o for n in model.graph.node for o in n.output
            if o and types.get(o) == onnx.TensorProto.FLOAT]


def test_the_rewrite_reads_a_dequantize_copy_as_the_model_reads_it(tmp_path: Path) -> None:
    result, qdq = converted_int8(post_norm_block(), tmp_path / "a")
    model = onnx.load(str(qdq))
    residual = next(n for n in model.graph.node if n.name == "residual")
    producers = {o: n for n in model.graph.node for o in n.output}
    readers = [n.name for n in model.graph.node if residual.input[0] in n.input]
    # the premise: the residual reads the dequantized LayerNorm output the FFN reads too, so
    # the converter gives it a copy of that DequantizeLinear
    assert producers[residual.input[0]].op_type == "DequantizeLinear" and len(readers) == 2
    session = HybridSession(result.out_dir)
    manifest = json.loads((result.out_dir / "manifest.json").read_text())
    reference = onnx.load(str(result.out_dir / manifest["quantization"]["file"]))
    form = mapped_form(named_copy(reference), session)
    assert rounded_as_artifact(reference, session) and rounded_as_artifact(form, session)
    assert any("_for_residual" in o for n in form.graph.node for o in n.output)
    shared = sorted(set(_float_results(reference)) & set(_float_results(form)))
    assert "ln2_beta_out" in shared
    for feed in _feeds(3, seed=5):
        want, got = _values(reference, shared, feed), _values(form, shared, feed)
        differ = [t for t in shared if not np.array_equal(want[t], got[t])]
        assert not differ, differ
    verdict = compare(qdq, result.out_dir, _feeds(2, seed=5), layers=True, with_floor=False)
    assert verdict.passed, verdict.summary_line()
