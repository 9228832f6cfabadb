"""Each built-in rule: what it takes, and what it refuses with which reason."""
from __future__ import annotations

import json

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.rules.checks import CHECKS
from mrvl_convert.rules.loader import builtin_path, load_rules
from support.models import Builder


def place(model, tmp_path, **kwargs):
    result = mrvl_convert.convert(model, tmp_path / "out", **kwargs)
    return {e["name"]: e for e in result.report["nodes"]}, result


def layers(result, tmp_path):
    found = []
    for stage in result.manifest["stages"]:
        if stage["kind"] == "mrvl":
            doc = json.loads((tmp_path / "out" / stage["nodes_json"]).read_text())
            found += [n for n in doc["nodes"] if n["op"] == "tvm_op"]
    return found


def test_conv_fuses_pad_bias_bn_relu_into_one_layer(tmp_path):
    b = Builder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.op("Pad", [x, b.const(np.array([0, 0, 1, 2, 0, 0, 1, 0], np.int64))], name="pad")
    y = b.conv(y, 4, 6, bias=False)
    y = b.op("Add", [y, b.const(np.full((1, 6, 1, 1), 0.1, np.float32))], name="bias")
    y = b.op("Relu", [b.bn(y, 6)], name="act")
    places, result = place(b.model([y]), tmp_path)
    (conv,) = [l for l in layers(result, tmp_path) if l["attrs"]["layer_name"] == ["Conv2D"]]
    assert len(conv["attrs"]["source_nodes"]) == 5
    assert conv["attrs"]["padding"] == ["1", "2", "1", "0"]
    assert conv["attrs"]["activation_type"] == ["relu"]
    assert all(e["placement"] == "mrvl" for e in places.values())


def test_depthwise_conv_is_taken(tmp_path):
    b = Builder()
    x = b.input("x", [1, 8, 8, 8])
    y = b.conv(x, 8, 8, group=8, pads=[1, 1, 1, 1])
    places, result = place(b.model([y]), tmp_path)
    (conv,) = layers(result, tmp_path)[1:2]
    assert conv["attrs"]["groups"] == ["8"]
    assert list(places.values())[0]["placement"] == "mrvl"


def test_grouped_conv_becomes_one_block_diagonal_conv2d(tmp_path):
    b = Builder()
    x = b.input("x", [1, 8, 8, 8])
    y = b.conv(x, 8, 8, group=2, name="grouped")
    places, result = place(b.model([y]), tmp_path)
    assert places["grouped"]["placement"] == "mrvl"
    (conv,) = [l for l in layers(result, tmp_path) if l["attrs"]["layer_name"] == ["Conv2D"]]
    assert conv["attrs"]["groups"] == ["1"]
    assert conv["attrs"]["kernel_const"]["shape"] == [8, 3, 3, 8]


def test_conv3d_refused_as_not_2d(tmp_path):
    # A Conv1d is lifted to its 4-D view first (frontend/rank_lift.py); a 3-D one is not.
    b = Builder()
    x = b.input("x", [1, 4, 4, 4, 4])
    w = b.weight(4, 4, 3, 3, 3)
    y = b.op("Conv", [x, w], name="conv3d", kernel_shape=[3, 3, 3])
    places, _ = place(b.model([y]), tmp_path)
    assert "only 2-D convolutions (4-D tensors) map to Conv2D; this one is 5-D" in \
        places["conv3d"]["reason"]


def test_batch_over_eight_runs_in_chunks(tmp_path):
    # A per-sample Conv of batch 16 runs as 2 runs of batch 8 (rules/batch_axis.py batch_runs);
    # tests/rules/test_batch_runs.py has the refusals, naming the op that mixes the samples.
    b = Builder()
    x = b.input("x", [16, 3, 8, 8])
    y = b.conv(x, 3, 4, name="big_batch")
    places, _ = place(b.model([y]), tmp_path)
    assert places["big_batch"]["placement"] == "mrvl"


def test_reflect_pad_stays_on_cpu_and_conv_still_goes(tmp_path):
    """A reflect Pad of the batch axis: no form of frontend/pad_forms.py takes it (a reflect
    Pad of H and W becomes selection MatMuls there)."""
    b = Builder()
    x = b.input("x", [2, 4, 8, 8])
    y = b.op("Pad", [x, b.const(np.array([1, 0, 1, 1, 0, 0, 1, 1], np.int64))], name="pad",
             mode="reflect")
    y = b.conv(y, 4, 4, name="conv")
    places, _ = place(b.model([y]), tmp_path)
    assert places["conv"]["placement"] == "mrvl"
    assert places["pad"]["placement"] == "cpu"
    assert "mode is 'reflect', only constant padding folds" in places["pad"]["reason"]
    assert "it pads the batch axis 0" in places["pad"]["canonical"]


def test_float64_refused(tmp_path):
    from onnx import TensorProto
    b = Builder()
    x = b.input("x", [1, 3, 8, 8], TensorProto.DOUBLE)
    y = b.op("Conv", [x, b.const(np.ones((2, 3, 3, 3)))], name="dconv", kernel_shape=[3, 3])
    places, _ = place(b.model([y]), tmp_path)
    assert "fp16 mode takes float32 tensors; this Conv works on float64" in places["dconv"]["reason"]


def test_gemm_and_matmul_add_are_one_fc_form(tmp_path):
    b = Builder()
    x = b.input("x", [2, 32])
    y = b.op("Relu", [b.gemm(x, 32, 16, transB=1)], name="r1")
    y = b.matmul_add(y, 16, 8)
    places, result = place(b.model([y]), tmp_path)
    fcs = [l for l in layers(result, tmp_path) if l["attrs"]["layer_name"] == ["FC"]]
    assert [f["attrs"]["composite_name"] for f in fcs] == [["mrvl.fc_ni2no"]] * 2
    assert fcs[0]["attrs"]["activation_type"] == ["relu"]
    assert len(fcs[1]["attrs"]["source_nodes"]) == 2


def test_gemm_transa_refused(tmp_path):
    b = Builder()
    x = b.input("x", [8, 2])
    y = b.op("Gemm", [x, b.weight(8, 16)], name="gemm_ta", transA=1)
    places, _ = place(b.model([y]), tmp_path)
    assert "Gemm with transA=1 is not supported" in places["gemm_ta"]["reason"]


def test_matmul_with_runtime_weights_refused(tmp_path):
    b = Builder()
    x = b.input("x", [2, 8])
    w = b.input("w", [8, 4])
    y = b.op("MatMul", [x, w], name="mm")
    places, _ = place(b.model([y]), tmp_path)
    assert "the weights are not constant" in places["mm"]["reason"]


def _pool_model(op, **attrs):
    b = Builder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.op("Relu", [b.conv(x, 4, 4, pads=[1, 1, 1, 1])], name="act")
    y = b.op(op, [y], name="pool", **attrs)
    return b.model([y])


@pytest.mark.parametrize("op,attrs,layer", [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, "Maxpool2D"),
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}, "Avgpool2D"),
    ("GlobalAveragePool", {}, "GlobalAvgpool2D"),
    ("GlobalMaxPool", {}, "GlobalMaxpool2D"),
])
def test_pools_are_taken(tmp_path, op, attrs, layer):
    places, result = place(_pool_model(op, **attrs), tmp_path)
    assert places["pool"]["placement"] == "mrvl"
    assert layer in [l["attrs"]["layer_name"][0] for l in layers(result, tmp_path)]


def _pool_node(op, in_hw, out_hw, **attrs):
    """A lone pool node whose tensors carry the shapes given (as a model could state them)."""
    import onnx_graphsurgeon as gs
    x = gs.Variable("x", np.float32, [1, 4, *in_hw])
    y = gs.Variable("y", np.float32, [1, 4, *out_hw])
    return gs.Node(op, "pool", attrs, inputs=[x], outputs=[y])


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_shape_check_names_both_sizes(op):
    """8 wide, 1-wide window, stride 3, ceil mode: windows start at 0, 3, 6, and at 9, which is
    past the input and is dropped, so 3 columns; a model stating 4 is refused."""
    attrs = {"kernel_shape": [1, 1], "strides": [1, 3], "ceil_mode": 1}
    check = CHECKS["pool_shape"]
    assert check(_pool_node(op, (8, 8), (8, 3), **attrs), {}, None) is None
    details = check(_pool_node(op, (8, 8), (8, 4), **attrs), {}, None)
    assert details["declared"] == [8, 4] and details["computed"] == [8, 3]
    assert "ceil mode" in details["why"]
    floor = {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 1, 1]}
    assert check(_pool_node(op, (8, 8), (4, 4), **floor), {}, None) is None
    details = check(_pool_node(op, (8, 8), (5, 4), **floor), {}, None)
    assert details["computed"] == [4, 4] and details["why"] == ""


def test_ceil_mode_pool_keeps_the_shape_onnx_infers_or_stays_on_cpu(tmp_path):
    """onnx's shape inference (1.17 to 1.23 at least) keeps a last ceil-mode window that starts
    past the input; the Mrvl layer would drop it. Such a pool stays on CPU with the reason, and
    the hybrid gives what onnxruntime gives on the original model."""
    import onnx
    import onnxruntime as ort
    from mrvl_convert import HybridSession
    from mrvl_convert.verify.tolerances import DEFAULT_TOLERANCE
    model = _pool_model("MaxPool", kernel_shape=[1, 1], strides=[1, 3], ceil_mode=1)
    inferred = onnx.shape_inference.infer_shapes(model).graph.output[0].type.tensor_type.shape
    declared_w = inferred.dim[3].dim_value
    places, result = place(model, tmp_path)
    if declared_w == 3:  # this onnx counts as the layer does
        assert places["pool"]["placement"] == "mrvl"
    else:
        assert places["pool"]["placement"] == "cpu"
        assert "output of [8, 4] (H, W) but its window, strides and pads give [8, 3] (ceil " \
            "mode" in places["pool"]["reason"]
        assert places["act"]["placement"] == "mrvl"
    if tuple(int(v) for v in ort.__version__.split(".")[:2]) < (1, 21):
        return  # older onnxruntime keeps that window too
    x = np.random.default_rng(0).standard_normal((1, 4, 8, 8)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = HybridSession(result.out_dir).run(None, {"x": x})[0]
    assert got.shape == want.shape == (1, 4, 8, 3)
    assert np.abs(got - want).max() <= DEFAULT_TOLERANCE.max_rel * np.abs(want).max()


def test_maxpool_with_used_indices_refused(tmp_path):
    b = Builder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 4, 4, pads=[1, 1, 1, 1])
    b.nodes.append(__import__("onnx").helper.make_node(
        "MaxPool", [y], ["pooled", "indices"], name="pool", kernel_shape=[2, 2]))
    places, _ = place(b.model(["pooled", "indices"]), tmp_path)
    assert "Indices output is used" in places["pool"]["reason"]


def test_residual_add_is_sum2d_with_relu(tmp_path):
    b = Builder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 4, 4, pads=[1, 1, 1, 1])
    y = b.op("Relu", [b.op("Add", [x, y], name="residual")], name="act")
    places, result = place(b.model([y]), tmp_path)
    (s,) = [l for l in layers(result, tmp_path) if l["attrs"]["layer_name"] == ["Sum2D"]]
    assert s["attrs"]["rule"] == ["mrvl.sum2d"]
    assert s["attrs"]["activation_type"] == ["relu"]
    assert places["residual"]["placement"] == "mrvl"


def test_add_with_constant_operand_is_sum2d_const(tmp_path):
    b = Builder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.op("Relu", [b.conv(x, 4, 4)], name="act")
    y = b.op("Add", [y, b.const(np.full((1, 1, 6, 6), 0.5, np.float32))], name="shift")
    places, result = place(b.model([y]), tmp_path)
    (s,) = [l for l in layers(result, tmp_path) if l["attrs"]["layer_name"] == ["Sum2D"]]
    assert s["attrs"]["rule"] == ["mrvl.sum2d_const"]
    assert "input_const_name" in s["attrs"]


def test_broadcasting_add_of_activations_refused(tmp_path):
    b = Builder()
    x = b.input("x", [1, 4, 8, 8])
    g = b.op("GlobalAveragePool", [x], name="gap")
    y = b.op("Add", [b.conv(x, 4, 4, pads=[1, 1, 1, 1]), g], name="bcast")
    # upstream v0.19's Sum2D; the newer set's broadcasts (tests/layers/test_token_layers.py)
    places, _ = place(b.model([y]), tmp_path, layer_set="upstream-0.19")
    assert "differ in shape (broadcasting add)" in places["bcast"]["reason"]


def test_concat_on_channels_taken_other_axis_as_channel_views(tmp_path):
    """A 4-D Concat on H is the channel Concat of views (concat_views.py); the rule's refusal
    of another axis is for the forms no view takes (a 5-D one: test_partition_control)."""
    b = Builder()
    x = b.input("x", [1, 4, 8, 8])
    a = b.conv(x, 4, 4, pads=[1, 1, 1, 1])
    c = b.conv(x, 4, 2, pads=[1, 1, 1, 1])
    y = b.op("Concat", [a, c], name="cat_c", axis=1)
    z = b.op("Concat", [a, a], name="cat_h", axis=2)
    places, _ = place(b.model([y, z]), tmp_path)
    assert places["cat_c"]["placement"] == "mrvl"
    assert places["cat_h"]["placement"] == "mrvl"


def test_reshape_and_squeeze_taken_batch_change_refused(tmp_path):
    b = Builder()
    x = b.input("x", [2, 4, 8, 8])
    y = b.op("GlobalAveragePool", [b.conv(x, 4, 4, pads=[1, 1, 1, 1])], name="gap")
    s = b.op("Squeeze", [y, b.const(np.array([2, 3], np.int64))], name="sq")
    r = b.op("Reshape", [s, b.const(np.array([2, 2, 2], np.int64))], name="rs")
    bad = b.op("Reshape", [s, b.const(np.array([8], np.int64))], name="rs_batch")
    places, _ = place(b.model([r, bad]), tmp_path)
    assert places["sq"]["placement"] == "mrvl"
    assert places["rs"]["placement"] == "mrvl"
    assert "the batch dimension is not kept ([2, 4] -> [8])" in places["rs_batch"]["reason"]


def test_transpose_other_than_layout_change_refused(tmp_path):
    b = Builder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.op("Transpose", [b.conv(x, 4, 4)], name="swap_hw", perm=[0, 1, 3, 2])
    # upstream v0.19's set: the newer one has a bare transpose kind
    # (tests/layers/test_data_movement.py)
    places, _ = place(b.model([y]), tmp_path, layer_set="upstream-0.19")
    assert "perm [0, 1, 3, 2] is not an NCHW<->NHWC layout change" in places["swap_hw"]["reason"]


def test_unknown_op_and_lonely_relu_explain_themselves(tmp_path):
    b = Builder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.op("Sin", [b.conv(x, 4, 4)], name="sig")
    y = b.op("Relu", [y], name="lonely")
    # Upstream v0.19 has no standalone Relu layer (the newer set has).
    places, _ = place(b.model([y]), tmp_path, layer_set="upstream-0.19")
    assert places["sig"]["reason"] == "no rule handles op type Sin"
    assert "only fused into a composite" in places["lonely"]["reason"]
    assert "follows Sin node 'sig'" in places["lonely"]["reason"]


def test_user_rule_file_adds_a_composite(tmp_path):
    rule = tmp_path / "unsqueeze.yaml"
    rule.write_text(
        "format_version: 1\n"
        "composites:\n"
        "  - name: user.unsqueeze\n"
        "    layer: reshape\n"
        "    summary: Unsqueeze is a reshape on the accelerator\n"
        "    pattern:\n"
        "      - {role: main, op: [Unsqueeze]}\n"
        "    constraints:\n"
        "      - {role: main, check: keeps_batch, reason: 'batch changes: {detail}'}\n")
    b = Builder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.op("GlobalAveragePool", [b.conv(x, 4, 4)], name="gap")
    y = b.op("Flatten", [y], name="flat")
    y = b.op("Unsqueeze", [y, b.const(np.array([2], np.int64))], name="unsq")
    # upstream v0.19's set: the newer one has its own expand_dims
    # (tests/layers/test_data_movement.py)
    without, _ = place(b.model([y]), tmp_path, layer_set="upstream-0.19")
    assert without["unsq"]["reason"].startswith("no rule handles op type Unsqueeze")
    places, result = place(b.model([y]), tmp_path, rules=[rule], layer_set="upstream-0.19")
    assert places["unsq"]["placement"] == "mrvl"
    assert places["unsq"]["rule"] == "user.unsqueeze"
    assert result.manifest["options"]["rules"][-1]["name"] == "unsqueeze.yaml"


@pytest.mark.parametrize("text,field", [
    ("format_version: 1\ncomposites: []\n", "composites"),
    ("format_version: 1\ncomposites:\n  - {name: x, layer: Conv9D, pattern: [{role: conv, op: [Conv]}]}\n",
     "composites[0].layer"),
    ("format_version: 1\ncomposites:\n  - {name: x, layer: FC, pattern: [{role: conv, op: [Conv]}]}\n",
     "composites[0].pattern"),
    ("format_version: 1\ncomposites:\n  - name: x\n    layer: FC\n    pattern: [{role: fc, op: [Gemm]}]\n"
     "    constraints: [{role: fc, check: nonsense, reason: r}]\n", "composites[0].constraints[0].check"),
    ("format_version: 1\ncomposites:\n  - name: x\n    layer: FC\n    pattern: [{role: fc, op: [Gemm]}]\n"
     "    constraints: [{role: other, check: float32, reason: r}]\n", "composites[0].constraints[0].role"),
    ("format_version: 1\ncomposites:\n  - name: x\n    layer: FC\n    anchor: act\n"
     "    pattern: [{role: fc, op: [Gemm]}, {role: act, op: [Relu], optional: true}]\n",
     "composites[0].anchor"),
    ("format_version: [1\n", "YAML"),
])
def test_bad_rule_files_name_the_field(tmp_path, text, field):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(mrvl_convert.RuleFileError) as info:
        load_rules([path])
    assert field in str(info.value)
    assert str(path) in str(info.value)


def test_every_check_named_by_the_schema_exists():
    schema = json.loads((builtin_path().parents[2] / "schemas" / "rules.schema.json").read_text())
    names = schema["$defs"]["constraint_body"]["properties"]["check"]["enum"]
    assert sorted(names) == sorted(CHECKS)


def test_supported_ops_doc_is_in_sync():
    from mrvl_convert.rules.docs import supported_ops_markdown
    doc = builtin_path().parents[2] / "docs" / "SUPPORTED_OPS.md"
    assert doc.read_text() == supported_ops_markdown(load_rules()), \
        "regenerate: python -m mrvl_convert.rules.docs > docs/SUPPORTED_OPS.md"
