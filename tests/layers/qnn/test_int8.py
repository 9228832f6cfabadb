"""int8: QDQ models (Marvell's quantize_static recipe) in, int8 Mrvl layers out, simulated to the
integer and compared with onnxruntime running the same QDQ model (op by op as the model writes
it: ``support.int8.reference_session``).

The attribute names are the newer Marvell codegen's (princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc
``CreateCompositeMrvlQnnConv2DLayer``, ``CreateCompositeMrvlQnnFcLayer``,
``CreateCompositeMrvlQnnSumLayer``, ``CreateMrvlQuantLayer``, ``SetScaleAttr``,
``GetConstJSONString``).
"""
from __future__ import annotations

import base64
import json

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import mrvl_convert
from mrvl_convert.quantize.recipe import load_calibration, quantize_int8
from support.int8 import (EXAMPLE, float_model, output_scale, placements, quantized, run_both,
                          steps)


def _quantizer_folds_relu() -> bool:
    """Whether this onnxruntime's quantize_static gives a Relu after a Conv the Conv's output
    scale (newer versions: the Relu fuses into the int8 Conv2D) or a scale of its own (1.18:
    the Relu still fuses, and a requant layer follows to the Relu's scale)."""
    import tempfile
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    model = helper.make_model(helper.make_graph(
        nodes, "probe", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 2, 4, 4])],
        [numpy_helper.from_array(rng.standard_normal((2, 2, 1, 1)).astype(np.float32), "w")]),
        opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    with tempfile.TemporaryDirectory() as tmp:
        onnx.save(model, f"{tmp}/f.onnx")
        quantize_int8(f"{tmp}/f.onnx", f"{tmp}/q.onnx",
                      {"x": rng.standard_normal((4, 1, 2, 4, 4)).astype(np.float32)[:, 0]})
        quantized = onnx.load(f"{tmp}/q.onnx").graph
    scales = {t.name: numpy_helper.to_array(t) for t in quantized.initializer}
    relu = next(n for n in quantized.node if n.op_type == "Relu")
    before = next(n for n in quantized.node if relu.input[0] in n.output)
    after = next(n for n in quantized.node if relu.output[0] in n.input)
    return scales[before.input[1]] == scales[after.input[1]]


# ------------------------------------------------------------------------------ the example
@pytest.fixture(scope="module")
def mnist_int8(tmp_path_factory):
    """The example MNIST CNN quantized with Marvell's recipe, calibrated on 64 held-out images,
    converted; 500 held-out images to compare on."""
    tmp = tmp_path_factory.mktemp("mnist_int8")
    images = load_calibration(EXAMPLE / "heldout.npz", EXAMPLE / "mnist_cnn.onnx")["input"]
    qdq = quantize_int8(EXAMPLE / "mnist_cnn.onnx", tmp / "mnist_cnn.onnx",
                        {"input": images[:64]})
    result = mrvl_convert.convert(qdq, tmp / "out")
    return qdq, result, images


def test_mnist_int8_runs_whole_on_the_accelerator(mnist_int8):
    _, result, _ = mnist_int8
    places = placements(result)
    assert {p["placement"] for p in places.values()} == {"mrvl"}, \
        {k: p.get("reason") for k, p in places.items() if p["placement"] != "mrvl"}
    assert len([s for s in result.manifest["stages"] if s["kind"] == "mrvl"]) == 1


def test_mnist_int8_hybrid_matches_onnxruntime_within_one_step(mnist_int8):
    """Bit-exactness target: within 1 int8 step of onnxruntime's own run of the QDQ model on
    >= 99.9% of the elements and within 2 on all (500 held-out images)."""
    qdq, result, images = mnist_int8
    feeds = [{"input": images[i:i + 1]} for i in range(images.shape[0])]
    got, want = run_both(qdq, result.out_dir, feeds)
    diff = steps(got, want, output_scale(onnx.load(qdq)))
    assert np.mean(diff <= 1) >= 0.999, np.bincount(diff.astype(int).ravel())
    assert diff.max() <= 2
    # The integer number model is onnxruntime's: on this model it is exact.
    assert diff.max() == 0, np.bincount(diff.astype(int).ravel())


def test_mnist_int8_layers_carry_the_codegen_attributes(mnist_int8):
    """Golden names: per-tensor scales as the newer codegen writes its qnn composites, int8
    kernels and int32 biases with min/max "0", every scale the model's own float32."""
    qdq, result, _ = mnist_int8
    out = result.out_dir
    stage = next(s for s in result.manifest["stages"] if s["kind"] == "mrvl")
    nodes = json.loads((out / stage["nodes_json"]).read_text())["nodes"]
    consts = json.loads((out / stage["consts_json"]).read_text())
    layers = [n["attrs"] for n in nodes if n["op"] == "tvm_op"]
    names = [a["layer_name"][0] for a in layers]
    relu_scale = [] if _quantizer_folds_relu() else ["requant"]
    assert names == ["quant", "layout_transform", "Conv2D", *relu_scale, "Maxpool2D", "Conv2D",
                     *relu_scale, "Maxpool2D", "nn.batch_flatten", "FC", "Sum2D", *relu_scale,
                     "FC", "Sum2D", "quant"], names
    model_scales = {float(np.float32(numpy_helper.to_array(i).reshape(-1)[0]))
                    for i in onnx.load(qdq).graph.initializer if i.name.endswith("scale")}
    expected = {"Conv2D": {"input_scale", "weight_scale", "output_scale"},
                "FC": {"input_scale", "weight_scale", "output_scale"},
                "Sum2D": {"lhs_input_scale", "rhs_input_scale", "output_scale"},
                "requant": {"input_scale", "output_scale"}}
    for attrs in layers:
        scales = {k for k in attrs if k.endswith("_scale")}
        name = attrs["layer_name"][0]
        if name in expected:
            assert scales == expected[name], name
            assert attrs["dtype"] == ["int8"]
        elif name == "quant":
            assert scales in ({"output_scale"}, {"input_scale"})
            assert attrs["src_layout"] == attrs["dst_layout"]
        else:
            assert not scales, name
            assert attrs["dtype"] == ["int8"], name  # int8 values moved or selected
        for key in scales:
            assert len(attrs[key]) == 1 and float(np.float32(float(attrs[key][0]))) in \
                model_scales, (name, key, attrs[key])
    first, last = layers[0], layers[-1]
    assert "output_scale" in first and first["dtype"] == ["int8"]
    assert "input_scale" in last and last["dtype"] == ["float32"]
    for attrs in layers:
        if attrs["layer_name"][0] in ("Conv2D", "FC"):
            kernel = consts[attrs["kernel_const_name"][0]]
            bias = consts[attrs["bias_const_name"][0]]
            assert (kernel["dtype"], bias["dtype"]) == ("int8", "int32")
            assert kernel["min"] == kernel["max"] == bias["min"] == bias["max"] == "0"
            raw = base64.b64decode(kernel["data_base64"])
            assert len(raw) == int(np.prod(kernel["shape"]))  # one byte per int8 weight
            assert attrs["kernel_const"]["dtype"] == "int8"
    assert any(a.get("activation_type") == ["relu"] for a in layers
               if a["layer_name"][0] == "Conv2D")
    assert result.manifest["stages"][0]["inputs"][0]["tensor"] == "input"


# ------------------------------------------------------------------- geometries and kinds
def _conv(w_shape, x_shape, out_shape, bias: bool = True, **attrs):
    rng = np.random.default_rng(1)
    inits = {"w": rng.standard_normal(w_shape) * 0.3, "b": rng.standard_normal(w_shape[0]) * 0.1}
    if not bias:
        del inits["b"]
    nodes = [helper.make_node("Conv", ["x", "w", "b"][:len(inits) + 1], ["c"], name="conv",
                              **attrs),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    return float_model(nodes, inits, x_shape, out_shape), x_shape


CASES = {
    "conv3x3_pad1": lambda: _conv([8, 3, 3, 3], [1, 3, 12, 12], [1, 8, 12, 12], pads=[1, 1, 1, 1]),
    "conv_stride2_asym_pads": lambda: _conv([6, 4, 3, 3], [1, 4, 11, 11], [1, 6, 5, 5],
                                            strides=[2, 2], pads=[1, 0, 0, 0]),
    "depthwise": lambda: _conv([6, 1, 3, 3], [1, 6, 10, 10], [1, 6, 8, 8], group=6),
    "grouped": lambda: _conv([8, 2, 3, 3], [1, 4, 9, 9], [1, 8, 7, 7], group=2),
    "dilated_1x1_mix": lambda: _conv([5, 3, 3, 3], [1, 3, 13, 13], [1, 5, 9, 9],
                                     dilations=[2, 2]),
    "no_bias_batch2": lambda: _conv([6, 3, 1, 1], [2, 3, 7, 7], [2, 6, 7, 7], bias=False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_int8_conv_geometries_equal_onnxruntime(tmp_path, case):
    """Integer convolution (int32 accumulation, requantization, saturation, fused Relu) equals
    onnxruntime's QLinearConv on the same QDQ model, element for element."""
    model, x_shape = CASES[case]()
    qdq, feeds = quantized(tmp_path, model, x_shape)
    result = mrvl_convert.convert(qdq, tmp_path / "out")
    assert placements(result)["conv"]["placement"] == "mrvl"
    assert placements(result)["conv"]["rule"] == "mrvl.qnn_conv2d"
    got, want = run_both(qdq, result.out_dir, feeds)
    assert steps(got, want, output_scale(onnx.load(qdq))).max() == 0


@pytest.mark.parametrize("trans_b", [0, 1])
def test_int8_gemm_with_bias_and_flatten(tmp_path, trans_b):
    rng = np.random.default_rng(2)
    weight = rng.standard_normal((10, 48)) * 0.2
    inits = {"w": weight if trans_b else weight.T, "b": rng.standard_normal(10) * 0.1}
    nodes = [helper.make_node("Flatten", ["x"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "w", "b"], ["g"], name="gemm", transB=trans_b),
             helper.make_node("Relu", ["g"], ["y"], name="relu")]
    model = float_model(nodes, inits, [1, 3, 4, 4], [1, 10])
    qdq, feeds = quantized(tmp_path, model, [1, 3, 4, 4])
    result = mrvl_convert.convert(qdq, tmp_path / "out")
    assert placements(result)["gemm"]["rule"] == "mrvl.qnn_fc_ni2no"
    got, want = run_both(qdq, result.out_dir, feeds)
    assert steps(got, want, output_scale(onnx.load(qdq))).max() == 0


def test_int8_pools_and_residual_add_within_one_step(tmp_path):
    """A residual Add, an average pool and a global one: within one step of onnxruntime on
    every element (on x86 onnxruntime's QLinearAveragePool rounds some near-ties the other way:
    see qnn_kernels.Avgpool2DInt8Kernel)."""
    rng = np.random.default_rng(3)
    inits = {"w": rng.standard_normal((4, 4, 3, 3)) * 0.3, "b": np.zeros(4),
             "w2": rng.standard_normal((4, 4, 3, 3)) * 0.3, "b2": rng.standard_normal(4) * 0.1}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "r"], ["s"], name="add"),
             helper.make_node("AveragePool", ["s"], ["p"], name="avg", kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["p"], ["y"], name="gap")]
    model = float_model(nodes, inits, [1, 4, 8, 8], [1, 4, 1, 1])
    qdq, feeds = quantized(tmp_path, model, [1, 4, 8, 8], samples=200)
    result = mrvl_convert.convert(qdq, tmp_path / "out")
    places = placements(result)
    for name, rule in (("add", "mrvl.qnn_add"), ("avg", "mrvl.qnn_avg_pool2d"),
                       ("gap", "mrvl.qnn_globalavgpool2d_nhwc2nhwc")):
        assert places[name]["rule"] == rule, places[name]
    got, want = run_both(qdq, result.out_dir, feeds)
    assert steps(got, want, output_scale(onnx.load(qdq))).max() <= 1
    # The residual's DequantizeLinear is copied per consumer; layers still name the model's.
    stage = result.manifest["stages"][0]
    nodes = json.loads((result.out_dir / stage["nodes_json"]).read_text())["nodes"]
    sources = {s for n in nodes[1:] for s in n["attrs"]["source_nodes"]}
    assert "r_DequantizeLinear" in sources and not any("_for_" in s for s in sources), sources
    report = mrvl_convert.compare(qdq, result.out_dir, inputs=feeds[:2], layers=True)
    rows = [r for r in report.rows if r.kind == "layer"]
    assert len(rows) == 6 and all(r.max_abs is not None for r in rows), report.format_table()


# ------------------------------------------------------------- forms outside the format
@pytest.mark.parametrize("recipe, kind", [
    ({"per_channel": True}, "per-channel weights"),
    ({"extra_options": {"ActivationSymmetric": False, "WeightSymmetric": True}},
     "zero-point activations"),
])
def test_int8_outside_the_format_is_requantized_with_its_cost(tmp_path, recipe, kind):
    """Per-channel weight scales and non-zero zero points have no place in the format: the
    foreign-int8 pass (frontend/foreign_int8.py) requantizes them to per-tensor symmetric int8,
    the Conv runs int8 on the accelerator, and report.json names what was converted and what it
    cost against the given QDQ model (before it, the Conv stayed on CPU)."""
    model, x_shape = CASES["conv3x3_pad1"]()
    qdq, feeds = quantized(tmp_path, model, x_shape, **recipe)
    result = mrvl_convert.convert(qdq, tmp_path / "out")
    conv = placements(result)["conv"]
    assert (conv["placement"], conv["rule"]) == ("mrvl", "mrvl.qnn_conv2d"), conv
    foreign = json.loads((result.out_dir / "report.json").read_text())["foreign_int8"]
    assert foreign["mode"] == "requantize" and kind in foreign["kinds"], foreign
    assert set(foreign["cost"]["outputs"]) == {"y"} and kind in foreign["line"]


def test_int8_tensors_may_cross_stage_boundaries(mnist_int8, tmp_path):
    """With the region's edges kept on CPU, the Mrvl stage takes and gives int8 tensors (its
    input node says int8); the hybrid still computes what onnxruntime does."""
    qdq, _, images = mnist_int8
    result = mrvl_convert.convert(qdq, tmp_path / "out",
                                  deny=["input_QuantizeLinear", "logits_DequantizeLinear"])
    kinds = [s["kind"] for s in result.manifest["stages"]]
    assert kinds == ["cpu", "mrvl", "cpu"], kinds
    mrvl = result.manifest["stages"][1]
    assert [t["dtype"] for t in mrvl["inputs"] + mrvl["outputs"]] == ["int8", "int8"]
    nodes = json.loads((result.out_dir / mrvl["nodes_json"]).read_text())["nodes"]
    assert nodes[0]["attrs"]["dtype"] == ["int8"]
    feeds = [{"input": images[i:i + 1]} for i in range(50)]
    got, want = run_both(qdq, result.out_dir, feeds)
    assert steps(got, want, output_scale(onnx.load(qdq))).max() == 0


def test_cli_quantize_int8_with_calibration(tmp_path, capsys):
    from mrvl_convert.cli.convert import main

    out = tmp_path / "out"
    code = main([str(EXAMPLE / "mnist_cnn.onnx"), "-o", str(out), "--quantize", "int8",
                 "--calibration", str(EXAMPLE / "heldout.npz"), "--quiet"])
    assert code == 0, capsys.readouterr().err
    manifest = json.loads((out / "mnist_cnn" / "manifest.json").read_text())
    stage = manifest["stages"][0]
    nodes = json.loads((out / "mnist_cnn" / stage["nodes_json"]).read_text())["nodes"]
    assert {n["attrs"]["layer_name"][0] for n in nodes[1:]} >= {"quant", "Conv2D", "FC"}
    assert any("weight_scale" in n["attrs"] for n in nodes)


@pytest.mark.parametrize("extra, words", [
    ([], "needs --calibration"),
    (["--calibration", "missing.npz"], "no such file"),
    (["--calibration", "x.npz", "--layer-set", "upstream-0.19"], "layer set"),
])
def test_cli_quantize_usage_errors_are_one_line(tmp_path, capsys, extra, words):
    from mrvl_convert.cli.convert import main

    (tmp_path / "x.npz").write_bytes(b"")
    code = main([str(EXAMPLE / "mnist_cnn.onnx"), "-o", str(tmp_path / "out"), "--quantize",
                 "int8", *[str(tmp_path / e) if e.endswith(".npz") else e for e in extra]])
    err = capsys.readouterr().err.strip()
    assert code == 2 and words in err and "\n" not in err, err


def test_calibration_file_must_name_the_inputs(tmp_path):
    np.savez(tmp_path / "two.npz", a=np.zeros((2, 1, 28, 28), np.float32),
             b=np.zeros((2, 1, 28, 28), np.float32))
    with pytest.raises(mrvl_convert.MrvlConvertError, match="needs an array per model input"):
        load_calibration(tmp_path / "two.npz", EXAMPLE / "mnist_cnn.onnx")


def test_compare_layers_on_an_int8_model(mnist_int8):
    """Every int8 layer's output equals the int8 tensor onnxruntime computes for it (the
    layer rows read int8 tensors of the QDQ model, in the model's element order)."""
    qdq, result, images = mnist_int8
    report = mrvl_convert.compare(qdq, result.out_dir, inputs={"input": images[:1]},
                                  layers=True)
    rows = [r for r in report.rows if r.kind == "layer"]
    assert len(rows) >= 9
    assert all(r.max_abs == 0 for r in rows), [(r.tensor, r.max_abs) for r in rows]
    assert report.first_layer_over is None


def test_catalogue_declares_the_codegen_int8_attribute_names():
    """Golden: the int8 attribute names of each kind, as the codegen's SetScaleAttr calls
    spell them (CreateCompositeMrvlQnn*Layer, CreateMrvlQuantLayer)."""
    from mrvl_convert.layers import CATALOGUE

    def scales(kind):
        return {a.name for a in CATALOGUE[kind].attrs if a.name.endswith("_scale")}

    assert scales("Conv2D") == scales("FC") == {"input_scale", "weight_scale", "output_scale"}
    assert scales("Sum2D") == {"lhs_input_scale", "rhs_input_scale", "output_scale"}
    assert scales("Avgpool2D") == scales("GlobalAvgpool2D") == {"input_scale", "output_scale"}
    assert scales("quant") == {"input_scale", "output_scale"}
    assert not scales("Maxpool2D")  # the codegen writes no scale for max pooling
    assert CATALOGUE["quant"].layer_sets == frozenset({"marvell"})


def test_int8_squeezenet_runs_on_the_accelerator_and_matches_onnxruntime(tmp_path):
    """A real topology (the onnx wheel's light SqueezeNet, seeded weights: Fire modules,
    Concat, MaxPool, GlobalAveragePool) through Marvell's recipe: every compute layer int8 on
    the accelerator, and the hybrid's output equals onnxruntime's."""
    from support import corpus

    if "squeezenet" not in corpus.zoo_names():
        pytest.skip("this onnx wheel has no light SqueezeNet")
    model = corpus.zoo("squeezenet")
    src = tmp_path / "squeezenet.onnx"
    onnx.save(model, src)
    name = model.graph.input[0].name
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(0)
    qdq = quantize_int8(src, tmp_path / "q.onnx",
                        {name: rng.standard_normal([4] + shape[1:]).astype(np.float32)})
    result = mrvl_convert.convert(qdq, tmp_path / "out")
    places = placements(result)
    on_cpu = {p["op_type"] for p in places.values() if p["placement"] == "cpu"}
    assert "Conv" not in on_cpu and result.summary["mrvl_mac_share"] == 1.0, on_cpu
    assert sum(p.get("rule") == "mrvl.qnn_conv2d" for p in places.values()) > 20
    feeds = [{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(2)]
    got, want = run_both(qdq, result.out_dir, feeds)
    # The reference's float convolutions round the dequantized products: a rare step apart.
    assert steps(got, want, output_scale(onnx.load(qdq))).max() <= 1
