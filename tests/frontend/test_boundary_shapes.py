"""Every stage boundary and model output of an artifact has a static shape (frontend/shapes.py,
emit/documents.py), or the conversion fails naming the tensor."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.errors import ShapeError


def _model(nodes, inputs, outputs, inits, opsets=(("", 13),)):
    graph = helper.make_graph(nodes, "m", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 8
    return model


def _dynamic_output_classifier(batch) -> onnx.ModelProto:
    """``x.view(x.size(0), -1) @ w.T + b`` as torch exports it, output declared ``[-1, 2]``."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((2, 48)).astype(np.float32), "w"),
             numpy_helper.from_array(np.zeros(2, np.float32), "b"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"]),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["flat"]),
             helper.make_node("Gemm", ["flat", "w", "b"], ["y"], transB=1)]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 4, 4])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 2])], inits)


def _runs_like_onnxruntime(directory, model, feeds):
    session = mrvl_convert.HybridSession(directory)
    got = session.run(None, feeds)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("batch,shapes", [(1, None), ("N", {"x": [1, 3, 4, 4]})])
def test_a_declared_dynamic_output_gets_its_static_shape(tmp_path, batch, shapes):
    model = _dynamic_output_classifier(batch)
    result = mrvl_convert.convert(model, tmp_path / "out", shapes=shapes)
    assert result.manifest["model"]["outputs"][0]["shape"] == [1, 2]
    x = np.random.default_rng(1).standard_normal((1, 3, 4, 4)).astype(np.float32)
    _runs_like_onnxruntime(tmp_path / "out", model, {"x": x})


def _shapeless_boundary_model() -> onnx.ModelProto:
    """Conv -> com.microsoft Gelu (no ONNX shape inference: its output has no shape) -> Conv."""
    weight = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((4, 4, 3, 3)).astype(np.float32) / 6, "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Gelu", ["c0"], ["g"], domain="com.microsoft"),
             helper.make_node("Conv", ["g", "w"], ["y"], pads=[1, 1, 1, 1])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, "h", "w"])],
                  [weight], opsets=(("", 13), ("com.microsoft", 1)))


def test_a_boundary_shape_inference_cannot_tell_is_computed(tmp_path):
    model = _shapeless_boundary_model()
    result = mrvl_convert.convert(model, tmp_path / "out")
    boundaries = [b for s in result.manifest["stages"] for b in s["inputs"] + s["outputs"]]
    assert {b["tensor"] for b in boundaries} >= {"g"}
    assert all(b["shape"] == [1, 4, 8, 8] for b in boundaries)
    assert result.manifest["model"]["outputs"][0]["shape"] == [1, 4, 8, 8]
    x = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)
    _runs_like_onnxruntime(tmp_path / "out", model, {"x": x})


def test_a_boundary_left_unknown_is_a_named_shape_error(tmp_path, monkeypatch):
    """The emit-side guard: were a boundary still unknown, the error names it (no TypeError)."""
    import mrvl_convert.frontend.canonicalize as canonicalize
    monkeypatch.setattr(canonicalize, "resolve_shapes", lambda *args, **kwargs: {})
    with pytest.raises(ShapeError) as info:
        mrvl_convert.convert(_shapeless_boundary_model(), tmp_path / "out")
    assert info.value.tensor in ("g", "y") and "static shape" in str(info.value)
    assert not (tmp_path / "out").exists()


def test_an_output_whose_shape_depends_on_the_values_is_a_named_shape_error(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("NonZero", ["r"], ["nz"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                   [helper.make_tensor_value_info("nz", TensorProto.INT64, [2, "k"])], [])
    with pytest.raises(ShapeError) as info:
        mrvl_convert.convert(model, tmp_path / "out")
    assert info.value.tensor == "nz"
    assert "depends on the input values" in str(info.value)
    assert not (tmp_path / "out").exists()
