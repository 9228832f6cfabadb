"""float16_model.py: a float16-stored model converts as its float32 twin, its float16 I/O kept."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.convert import convert
from mrvl_convert.errors import InputFeedError
from mrvl_convert.frontend.load import load_model
from mrvl_convert.runtime import HybridSession
from mrvl_convert.verify.compare import compare
from support.float16 import as_float16, castup_weights, float16_region, float32_twin


def small_cnn(mid_op: str = "") -> onnx.ModelProto:
    """Conv-BN-Relu, a residual Conv, MaxPool, GAP and an FC head; ``mid_op`` (e.g. "Sin")
    puts that op, which stays on the CPU, between the two Convs."""
    rng = np.random.default_rng(7)

    def init(name, *shape, scale=0.2):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32),
                                       name)
    inits = [init("w0", 8, 3, 3, 3), init("b0", 8), init("w1", 8, 8, 3, 3), init("b1", 8),
             init("fw", 10, 8), init("fb", 10),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "bn_s"),
             init("bn_b", 8), init("bn_m", 8),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "bn_v")]
    r0 = "r0"
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1], name="conv0"),
             helper.make_node("BatchNormalization", ["c0", "bn_s", "bn_b", "bn_m", "bn_v"],
                              ["n0"], name="bn0"),
             helper.make_node("Relu", ["n0"], ["r0"], name="relu0")]
    if mid_op:
        nodes.append(helper.make_node(mid_op, ["r0"], ["m0"], name="mid"))
        r0 = "m0"
    nodes += [helper.make_node("Conv", [r0, "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
              helper.make_node("Add", ["c1", r0], ["a1"], name="add1"),
              helper.make_node("Relu", ["a1"], ["r1"], name="relu1"),
              helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2],
                               name="pool1"),
              helper.make_node("GlobalAveragePool", ["p1"], ["g"], name="gap"),
              helper.make_node("Flatten", ["g"], ["f"], name="flat"),
              helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1, name="fc")]
    graph = helper.make_graph(
        nodes, "small_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _run(model: onnx.ModelProto, feed):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feed)[0]


def _feed(dtype=np.float16):
    return {"x": np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(dtype)}


def test_the_pass_makes_the_float32_twin_bit_for_bit_and_keeps_the_boundary():
    model = small_cnn()
    loaded = load_model(as_float16(model))
    assert loaded.boundary_dtypes == {"x": "float16", "y": "float16"}
    text = str(loaded.proto.graph)
    assert "elem_type: 10" not in text and "data_type: 10" not in text  # no float16 left
    feed32 = {"x": _feed()["x"].astype(np.float32)}  # the float16 feed, widened (exact)
    np.testing.assert_array_equal(_run(loaded.proto, feed32), _run(float32_twin(model), feed32))


def test_the_twin_differs_from_onnxruntimes_float16_run_by_float16_rounding_only():
    """The module's bound: half a float16 ulp per op, carried through; this net has 9 ops
    between input and output, |y| about 1, so 9 roundings of 2^-11 relative bound it."""
    model = small_cnn()
    loaded = load_model(as_float16(model))
    given = _run(as_float16(model), _feed()).astype(np.float32)
    twin = _run(loaded.proto, {"x": _feed()["x"].astype(np.float32)})
    bound = 9 * 2.0 ** -11 * float(np.abs(twin).max() + 1)
    assert float(np.abs(given - twin).max()) <= bound


def _placements(result):
    return {e["name"]: e["placement"] for e in result.report["nodes"]}


@pytest.mark.parametrize("form", ["float16", "castup", "region"])
def test_a_float16_model_has_the_partition_and_verdict_of_its_float32_twin(tmp_path, form):
    model = small_cnn()
    stored = {"float16": as_float16, "castup": castup_weights,
              "region": lambda m: float16_region(m, "conv0", "relu0")}[form](model)
    twin = convert(float32_twin(model), tmp_path / "twin")
    ours = convert(stored, tmp_path / "ours")
    for key in ("mrvl_subgraphs", "cpu_subgraphs", "mrvl_nodes", "mrvl_mac_share"):
        assert ours.summary[key] == twin.summary[key], key
    assert ours.summary["mrvl_subgraphs"] == 1 and ours.summary["cpu_subgraphs"] == 0
    placed = _placements(ours)
    assert all(placed[name] == where for name, where in _placements(twin).items()
               if name in placed)
    assert compare(stored, ours.out_dir).passed
    assert compare(float32_twin(model), twin.out_dir).passed


def test_the_artifact_takes_and_gives_float16_as_the_model_does(tmp_path):
    model = as_float16(small_cnn())
    result = convert(model, tmp_path / "a")
    manifest = json.loads((result.out_dir / "manifest.json").read_text())
    assert manifest["model"]["inputs"][0]["dtype"] == "float16"
    assert manifest["model"]["inputs"][0]["computed_as"] == "float32"
    assert manifest["model"]["outputs"][0]["dtype"] == "float16"
    assert all(b["dtype"] == "float32" for s in manifest["stages"] for b in s["inputs"])
    session = HybridSession(result.out_dir)
    assert session.get_inputs()[0].type == "tensor(float16)"
    assert session.get_outputs()[0].type == "tensor(float16)"
    (y,) = session.run(None, _feed())
    assert y.dtype == np.float16 and y.shape == (1, 10)
    outputs, tensors = session.run(["y"], _feed(), capture=True)
    assert outputs[0].dtype == np.float16 and tensors["y"].dtype == np.float16
    np.testing.assert_array_equal(outputs[0], y)  # stage by stage as the fused session
    with pytest.raises(InputFeedError, match="float16"):
        session.run(None, _feed(np.float32))


def test_verify_judges_a_cpu_cut_float16_model_against_the_model_as_given(tmp_path):
    """Boundary rows: the original's tensors there are float16, the artifact's float32."""
    model = as_float16(small_cnn("Sin"))
    result = convert(model, tmp_path / "a")
    assert result.summary["mrvl_subgraphs"] == 2
    comparison = compare(model, result.out_dir)
    assert comparison.passed
    assert {r.kind for r in comparison.rows} >= {"output", "boundary"}


def test_a_float16_model_quantizes_as_its_float32_twin_and_verifies(tmp_path):
    """On main onnxruntime's calibration fed float32 to the float16 model: an internal error."""
    from mrvl_convert.quantize.recipe import Quantization
    model = as_float16(small_cnn())
    samples = np.random.default_rng(5).random((4, 3, 16, 16)).astype(np.float16)
    result = convert(model, tmp_path / "q", quantize=Quantization(calibration={"x": samples}))
    assert result.summary["mrvl_subgraphs"] == 1
    assert result.manifest["model"]["inputs"][0]["dtype"] == "float32"  # the QDQ twin's
    qdq = result.out_dir / result.manifest["quantization"]["file"]
    assert compare(str(qdq), result.out_dir).passed  # the int8 layers against their QDQ model
    # The float16 original takes the artifact's float32 feeds (as float16) without an error.
    assert compare(model, result.out_dir).rows
