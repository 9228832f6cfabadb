"""verify's int8 reference and a Cast to float32 between a dequantized int8 tensor and an fp16
layer (``verify/kept_fp16.py``, ``_moves_only``). A float16-stored model's float32 twin
(``frontend/float16_model.py``) keeps the model's Casts up to float32, now of float32 tensors:
silero-vad 6's ``silero_vad_half`` casts its STFT halves to float32 before the magnitude
``Sqrt(Pow(re, 2) + Pow(im, 2))``, which runs as fp16 layers of the int8 region. The converter
drops such a Cast, so the fp16 Mul2D reads the dequantizing quant layer's float32 ``q * scale``
unrounded; the reference rounded the Cast's result to fp16 as if it were a layer's: one fp16
step off on the squares, one int8 step after the Sqrt's QuantizeLinear, six at the LSTM state
(stateN FAILed against its own QDQ model, max_rel 0.047; within one step now). Here the same
form on a model built in the test: the reference's output is the artifact's, bit for bit."""
from __future__ import annotations

from typing import Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.runtime.session import HybridSession
from mrvl_convert.verify.compare import compare
from mrvl_convert.verify.kept_fp16 import rounded_as_artifact
from support.int8 import converted_int8

C, H, W = 8, 8, 16


def _magnitude_model(spatial: Tuple[int, ...] = (H, W)) -> onnx.ModelProto:
    """Conv -> Slice halves -> Cast(float32) each -> Pow 2 -> Add -> Sqrt -> Conv, the STFT
    magnitude of silero-vad's front end with an int8 Conv on either side; 2-D, or 1-D as
    silero's (``spatial`` one size: the converter lifts it to 4-D)."""
    rng = np.random.default_rng(3)
    unit = (1,) * len(spatial)
    inits = {"w0": rng.standard_normal((2 * C, C, *unit)) * 0.7,
             "w1": rng.standard_normal((C, C, *unit)) * 0.5, "two": np.array(2.0),
             "s0": np.array([0]), "s1": np.array([C]), "s2": np.array([2 * C]),
             "ax": np.array([1])}
    inits = {k: v.astype(np.int64 if k[0] in "sa" else np.float32) for k, v in inits.items()}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c"], name="conv_in"),
             helper.make_node("Slice", ["c", "s0", "s1", "ax"], ["re"], name="re"),
             helper.make_node("Slice", ["c", "s1", "s2", "ax"], ["im"], name="im"),
             helper.make_node("Cast", ["re"], ["re32"], name="cast_re", to=TensorProto.FLOAT),
             helper.make_node("Cast", ["im"], ["im32"], name="cast_im", to=TensorProto.FLOAT),
             helper.make_node("Pow", ["re32", "two"], ["re2"], name="pow_re"),
             helper.make_node("Pow", ["im32", "two"], ["im2"], name="pow_im"),
             helper.make_node("Add", ["re2", "im2"], ["sq"], name="add"),
             helper.make_node("Sqrt", ["sq"], ["mag"], name="sqrt"),
             helper.make_node("Conv", ["mag", "w1"], ["y"], name="conv_out")]
    graph = helper.make_graph(
        nodes, "magnitude", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, *spatial])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, *spatial])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def test_the_reference_reads_a_cast_dequantized_value_unrounded(tmp_path) -> None:
    result, qdq = converted_int8(_magnitude_model(), tmp_path / "a", span=3.0)
    assert result.summary["mrvl_subgraphs"] == 1 and result.summary["cpu_subgraphs"] == 0
    fp16 = {"pow_re", "pow_im", "add", "sqrt"}  # the premise: the magnitude runs in fp16
    assert fp16 <= set(rounded_as_artifact(onnx.load(str(qdq)), HybridSession(result.out_dir)))
    comparison = compare(qdq, result.out_dir, samples=8)
    row, = [r for r in comparison.rows if r.kind == "output"]
    assert row.max_abs == 0.0, row  # rounding the Cast's result: one int8 step off



def test_every_layer_row_is_the_artifacts_bit_for_bit(tmp_path) -> None:
    """``--layers`` compares with the model as the converter rewrote it, where ``Pow(x, 2)`` is
    ``Mul(x, x')`` over two DequantizeLinear copies of x (``frontend/qdq.py``): the copy no
    layer names was rounded as a stage input, so the square's row was one fp16 step off and
    every int8 layer after it up to two int8 steps, the first FAIL rows pointing at an int8
    Conv that is exact. 1-D, as silero's: the layer rows are the lifted 4-D form's tensors."""
    result, qdq = converted_int8(_magnitude_model((H * W,)), tmp_path / "a", span=3.0)
    rows = [r for r in compare(qdq, result.out_dir, samples=4, layers=True).rows
            if r.kind == "layer"]
    # the premise: the squares are layer rows, read in the lifted form
    assert any("Mul2D" in r.note and r.tensor.endswith("_4d") for r in rows)
    off = [(r.tensor, r.max_abs) for r in rows if r.max_abs != 0.0]
    assert not off, off
