"""Issue 45 (tiny-pron): our int8 recipe quantized a causal mask constant of 0 and -inf, added to
the attention scores before a Softmax, with the scale ``inf / 127``: the QDQ model computed NaN,
and the artifact FAILed against it. The recipe now hands quantize_static the mask clamped as the
conversion clamps it (``quantize/finite.py``); a non-mask constant holding inf is left in float."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

import mrvl_convert

from mrvl_convert.quantize.finite import masks_clamped, nonfinite_readers
from mrvl_convert.quantize.recipe import quantize_int8
from support.int8 import converted_int8
from support.strategies.tpint8 import causal_attention

SEQ, DIM = 4, 8


def _attention(mask_reader: str = "Add") -> onnx.ModelProto:
    return causal_attention(SEQ, DIM, mask_reader=mask_reader)


def _run(model, feed):
    session = ort.InferenceSession(model.SerializeToString() if isinstance(model, onnx.ModelProto)
                                   else str(model), providers=["CPUExecutionProvider"])
    return session.run(None, feed)[0]


def test_the_clamped_mask_gives_the_float_model_bit_equal_outputs():
    model = _attention()
    clamped = masks_clamped(model)
    values = {t.name: numpy_helper.to_array(t) for t in clamped.graph.initializer}
    [mask] = [n for n in clamped.graph.node if n.name == "mask"]
    assert values[mask.input[1]].min() == -32752.0 and np.isfinite(values[mask.input[1]]).all()
    x = {"x": np.random.default_rng(2).uniform(-1, 1, (1, SEQ, DIM)).astype(np.float32)}
    np.testing.assert_array_equal(_run(clamped, x), _run(model, x))
    assert masks_clamped(clamped) is clamped  # nothing left to clamp


def test_a_causal_mask_quantizes_to_no_nan_and_the_artifact_passes(tmp_path):
    result, qdq = converted_int8(_attention(), tmp_path / "out")
    x = {"x": np.random.default_rng(3).uniform(-1, 1, (1, SEQ, DIM)).astype(np.float32)}
    # integ11 wrote the mask as a constant of NaN: onnxruntime's int8 output saturated to one
    # value (finite), and the artifact's fp16 Softmax gave NaN
    assert all(np.isfinite(numpy_helper.to_array(t)).all() for t in onnx.load(str(qdq)).graph.initializer)
    assert np.isfinite(_run(qdq, x)).all()
    rng = np.random.default_rng(5)
    feeds = [{"x": rng.uniform(-1, 1, (1, SEQ, DIM)).astype(np.float32)} for _ in range(3)]
    comparison = mrvl_convert.compare(qdq, result.out_dir, feeds, with_floor=False)
    assert comparison.passed, comparison.summary_line()


def test_a_constant_holding_inf_that_is_no_mask_is_left_in_float(tmp_path):
    model = _attention(mask_reader="Max")  # max(scores, 0 / -inf): no additive mask
    assert nonfinite_readers(model) == ["mask"]
    rng = np.random.default_rng(4)
    report = {}
    onnx.save(model, str(tmp_path / "float.onnx"))
    out = quantize_int8(tmp_path / "float.onnx", tmp_path / "int8.onnx",
                        {"x": rng.uniform(-1, 1, (8, SEQ, DIM)).astype(np.float32)},
                        report=report)
    assert report["nonfinite"] == ["mask"]
    qdq = onnx.load(str(out))
    [floor] = [n for n in qdq.graph.node if n.op_type == "Max"]
    assert "causal" in floor.input  # read as it is, not through a QDQ pair
    assert np.isfinite(_run(out, {"x": rng.uniform(-1, 1, (1, SEQ, DIM)).astype(np.float32)})).all()


def test_the_manifest_says_which_nodes_an_inf_constant_kept_in_float(tmp_path):
    result, _ = converted_int8(_attention(mask_reader="Max"), tmp_path / "out")
    kept = result.manifest["quantization"]["kept_fp16_nonfinite"]
    assert kept["nodes"] == ["mask"] and "inf or NaN" in kept["reason"]


def test_a_mask_two_layers_add_is_one_clamped_initializer():
    model = _attention()
    second = [onnx.helper.make_node("Add", ["scores", "causal"], ["masked2"], name="mask2"),
              onnx.helper.make_node("Softmax", ["masked2"], ["weights2"], axis=-1,
                                    name="softmax2"),
              onnx.helper.make_node("MatMul", ["weights2", "wv_out"], ["y2"], name="attend2")]
    model.graph.node.extend(second)
    model.graph.output.extend([onnx.helper.make_tensor_value_info("y2", 1, [1, SEQ, DIM])])
    clamped = masks_clamped(model)
    names = [t.name for t in clamped.graph.initializer]
    assert len(names) == len(set(names)) == len(model.graph.initializer) + 1
    onnx.checker.check_model(clamped)
    x = {"x": np.random.default_rng(6).uniform(-1, 1, (1, SEQ, DIM)).astype(np.float32)}
    session = ort.InferenceSession(clamped.SerializeToString(), providers=["CPUExecutionProvider"])
    original = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, want in zip(session.run(None, x), original.run(None, x)):
        np.testing.assert_array_equal(got, want)
