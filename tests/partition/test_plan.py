"""Partitioning: both policies, and soundness of every plan (placement, order, exact CPU parts)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import mrvl_convert
from support.models import Builder, small_cnn
from support.partition import check_sound, stages


def feeds_for(model, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def test_single_policy_whole_cnn_is_one_mrvl_subgraph(tmp_path):
    model = small_cnn()
    result = mrvl_convert.convert(model, tmp_path / "o", policy="single")
    assert stages(result) == ["mrvl"]
    check_sound(model, result, tmp_path / "o", feeds_for(model))


def test_unsupported_op_in_the_middle_single_vs_multi(tmp_path):
    model = small_cnn(sigmoid=True)
    single = mrvl_convert.convert(model, tmp_path / "s", policy="single")
    multi = mrvl_convert.convert(model, tmp_path / "m", policy="multi")
    assert stages(single) == ["mrvl", "cpu"]
    assert stages(multi) == ["mrvl", "cpu", "mrvl"]
    check_sound(model, single, tmp_path / "s", feeds_for(model))
    check_sound(model, multi, tmp_path / "m", feeds_for(model))
    cpu_nodes = [e["name"] for e in multi.report["nodes"] if e["placement"] == "cpu"]
    assert cpu_nodes == ["sig"]


def test_region_without_conv_or_fc_stays_on_cpu(tmp_path):
    b = Builder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.op("Relu", [b.conv(x, 4, 4, pads=[1, 1, 1, 1])], name="act")
    y = b.op("Sin", [y], name="sig")
    y = b.op("MaxPool", [y], name="pool", kernel_shape=[2, 2], strides=[2, 2])
    model = b.model([y])
    result = mrvl_convert.convert(model, tmp_path / "o")
    assert stages(result) == ["mrvl", "cpu"]
    pool = result.placement("pool")
    assert pool["placement"] == "cpu"
    assert "no compute-heavy layer (Conv2D or FC)" in pool["reason"]
    check_sound(model, result, tmp_path / "o", feeds_for(model))


def test_model_that_starts_on_cpu_and_branches(tmp_path):
    """Two branches from a CPU op join in a residual add: the plan must stay acyclic."""
    b = Builder()
    x = b.input("x", [1, 4, 8, 8])
    s = b.op("Sin", [x], name="sig")
    a = b.op("Relu", [b.conv(s, 4, 4, pads=[1, 1, 1, 1])], name="a")
    t = b.op("Tanh", [a], name="tanh")
    c = b.conv(s, 4, 4, pads=[1, 1, 1, 1], name="c")
    y = b.op("Add", [t, c], name="join")
    z = b.op("Flatten", [y], name="flat")
    out = b.gemm(z, 256, 10, transB=1)
    model = b.model([out, a])
    for policy in ("single", "multi"):
        result = mrvl_convert.convert(model, tmp_path / policy, policy=policy)
        check_sound(model, result, tmp_path / policy, feeds_for(model))
    assert stages(mrvl_convert.convert(model, tmp_path / "s2", policy="single")) == ["cpu"]


def test_removed_nodes_are_reported(tmp_path):
    b = Builder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.op("Identity", [x], name="ident")
    y = b.op("Dropout", [b.conv(y, 4, 4)], name="drop")
    y = b.op("Relu", [y], name="act")
    model = b.model([y])
    result = mrvl_convert.convert(model, tmp_path / "o")
    assert result.placement("ident")["placement"] == "removed"
    assert "Identity is a no-op" in result.placement("ident")["reason"]
    assert result.placement("drop")["placement"] == "removed"
    assert result.placement("act")["placement"] == "mrvl"
    check_sound(model, result, tmp_path / "o", feeds_for(model))


def test_identity_producing_a_graph_output_keeps_its_name(tmp_path):
    b = Builder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.op("Relu", [b.conv(x, 4, 4)], name="act")
    b.nodes.append(onnx.helper.make_node("Identity", [y], ["final"], name="ident"))
    model = b.model(["final"])
    result = mrvl_convert.convert(model, tmp_path / "o")
    assert [o["tensor"] for o in result.manifest["stages"][-1]["outputs"]] == ["final"]
    check_sound(model, result, tmp_path / "o", feeds_for(model))


def test_unknown_policy_is_an_error(tmp_path):
    with pytest.raises(mrvl_convert.MrvlConvertError, match="unknown policy 'fastest'"):
        mrvl_convert.convert(small_cnn(), tmp_path / "o", policy="fastest")
    assert not (tmp_path / "o").exists()
