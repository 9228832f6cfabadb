"""Verify's reference never rounds a shape, index or integer tensor (issue 43, finding 3): a
Reshape whose target is Concat-ed from Shape (a static-QDQ DistilBERT's head split, a dynamo
ResNet's flatten) had its target Cast to fp16 and back (``..._Concat_output_0__as_fp16``), a
model onnxruntime cannot run; and the error blamed "the original model", which runs as given."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from mrvl_convert.cli.convert import main as convert_main
from mrvl_convert.errors import ModelLoadError
from mrvl_convert.verify.kept_fp16 import round_groups
from mrvl_convert.verify.reference import reference_session, rewrite_label
from mrvl_convert.verify.value_tensors import never_rounded
from support.models import Builder


def sized_model() -> onnx.ModelProto:
    """x -> Reshape(x, Concat(Shape(x)[0:1], [-1])) -> Gather(index computed from a size) ->
    Expand to a shape computed from Shape, in float: every shape input computed at run time."""
    b = Builder(0, opset=17)
    x = b.input("x", [1, 4, 3, 3])
    n = b.op("Slice", [b.op("Shape", [x]), b.const(np.array([0], np.int64)),
                       b.const(np.array([1], np.int64))])
    flat = b.op("Reshape", [x, b.op("Concat", [n, b.const(np.array([-1], np.int64))],
                                    axis=0)], name="view")
    width = b.op("Shape", [flat], start=1, end=2)
    half = b.op("Cast", [b.op("Div", [b.op("Cast", [width], to=1),
                                      b.const(np.array([4.0], np.float32))])], to=7)
    picked = b.op("Gather", [flat, b.op("Squeeze", [half])], axis=1, name="pick")
    wide = b.op("Expand", [b.op("Mul", [picked, b.const(np.array(3.0, np.float32))],
                                name="scale"), b.op("Shape", [flat])], name="wide")
    return b.model([wide], name="sized")


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_shape_and_index_tensors_are_left_alone():
    model = sized_model()
    kept = never_rounded(model)
    concat = next(n.output[0] for n in model.graph.node if n.op_type == "Concat")
    index = next(n.input[1] for n in model.graph.node if n.op_type == "Gather")
    divided = next(n.output[0] for n in model.graph.node if n.op_type == "Div")
    assert {concat, index, divided} <= kept  # float arithmetic on a size is a size too
    assert "x" not in kept and "view_out" not in kept and "scale_out" not in kept


def test_rounding_every_node_keeps_a_model_onnxruntime_runs():
    model = sized_model()
    x = np.random.default_rng(0).standard_normal((1, 4, 3, 3)).astype(np.float32)
    rounded = onnx.ModelProto()
    rounded.CopyFrom(model)
    round_groups(rounded, [[n.name] for n in rounded.graph.node])
    got = _run(rounded, x)
    x16 = x.astype(np.float16).astype(np.float32)
    picked = x16.reshape(1, -1)[:, 9]
    want = (picked * 3).astype(np.float16).astype(np.float32)[:, None] * np.ones((1, 36))
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_an_error_in_verifys_rewrite_names_the_rewrite_not_the_model():
    model = sized_model()
    model.graph.node[0].op_type = "NoSuchOp"
    what = rewrite_label("m.onnx", "2 node(s) rounded to fp16")
    with pytest.raises(ModelLoadError) as caught:
        reference_session(model, [], 3, what)
    text = str(caught.value)
    assert "mrvl_convert's rewrite of m.onnx" in text and "original model" not in text


def dynamo_flatten_cnn() -> onnx.ModelProto:
    """Conv -> Relu x2 -> GlobalAveragePool -> Reshape to Concat(Shape(.)[0:1], [-1]) -> Gemm:
    a dynamo ResNet's flatten, its target computed at run time."""
    b = Builder(0, opset=17)
    x = b.input("x", [1, 3, 16, 16])
    y = b.op("Relu", [b.conv(x, 3, 8)])
    y = b.op("Relu", [b.conv(y, 8, 8)])
    y = b.op("GlobalAveragePool", [y], name="gap")
    n = b.op("Slice", [b.op("Shape", [y]), b.const(np.array([0], np.int64)),
                       b.const(np.array([1], np.int64))])
    y = b.op("Reshape", [y, b.op("Concat", [n, b.const(np.array([-1], np.int64))], axis=0)],
             name="view")
    return b.model([b.gemm(y, 8, 10, transB=1)], name="dyn")


def test_int8_with_the_pool_kept_in_fp16_verifies(tmp_path, capsys):
    """The kept pool leaves the flatten's Reshape an fp16 layer: verify's reference rounded
    its target (``Concat_..._out__as_fp16``) and said "onnxruntime cannot run the original
    model"; it now verifies, exact."""
    onnx.save(dynamo_flatten_cnn(), str(tmp_path / "dyn.onnx"))
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "cal.npz", x=rng.uniform(-1, 1, (16, 3, 16, 16)).astype(np.float32))
    code = convert_main([str(tmp_path / "dyn.onnx"), "-o", str(tmp_path / "out"), "-q",
                         "--quantize", "int8", "--calibration", str(tmp_path / "cal.npz"),
                         "--keep-fp16", "gap", "--verify"])
    row = json.loads((tmp_path / "out" / "summary.json").read_text())["models"][0]
    assert code == 0, row["error"]
    assert row["verify"]["outputs"][0]["max_abs"] == 0.0
