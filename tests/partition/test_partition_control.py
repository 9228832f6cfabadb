"""Partition control: max_subgraphs keeps the Mrvl regions with the most MACs, deny keeps named
op types or nodes on CPU; both stay sound (the hybrid still computes the model)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import mrvl_convert
from support.models import Builder, small_cnn
from support.partition import check_sound, stages


def _feeds(shape=(1, 3, 16, 16)):
    return {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}


def _two_regions():
    """Conv(3->8, 16x16) | Sin on CPU | Conv(8->4, 8x8) + FC: the first region has more MACs."""
    return small_cnn(sigmoid=True)


def test_without_limit_there_are_two_mrvl_regions(tmp_path):
    result = mrvl_convert.convert(_two_regions(), tmp_path / "o")
    assert stages(result) == ["mrvl", "cpu", "mrvl"]


def test_max_subgraphs_keeps_the_region_with_most_macs(tmp_path):
    model = _two_regions()
    result = mrvl_convert.convert(model, tmp_path / "o", max_subgraphs=1)
    assert stages(result) == ["mrvl", "cpu"]
    assert result.placement("relu1")["placement"] == "mrvl"
    late = result.placement("relu2")
    assert late["placement"] == "cpu" and "beyond max_subgraphs" in late["reason"]
    assert result.manifest["options"]["max_subgraphs"] == 1
    check_sound(model, result, tmp_path / "o", _feeds())


def test_max_subgraphs_zero_is_all_cpu(tmp_path):
    model = _two_regions()
    result = mrvl_convert.convert(model, tmp_path / "o", max_subgraphs=0)
    assert stages(result) == ["cpu"]
    check_sound(model, result, tmp_path / "o", _feeds())


def test_max_subgraphs_regions_merge_once_the_cut_goes(tmp_path):
    """Three regions, cut by two Sin nodes (no layer set maps Sin); the limit of 2 drops the smallest one."""
    b = Builder()
    x = b.input("x", [1, 3, 8, 8])
    y = b.op("Relu", [b.conv(x, 3, 16, pads=[1, 1, 1, 1])], name="big")
    y = b.op("Sin", [y], name="cut1")
    y = b.op("Relu", [b.conv(y, 16, 2, k=1)], name="small")
    y = b.op("Sin", [y], name="cut2")
    y = b.op("Relu", [b.conv(y, 2, 16, pads=[1, 1, 1, 1])], name="mid")
    model = b.model([y])
    result = mrvl_convert.convert(model, tmp_path / "o", max_subgraphs=2)
    assert stages(result) == ["mrvl", "cpu", "mrvl"]
    assert result.placement("small")["placement"] == "cpu"
    assert {result.placement(n)["placement"] for n in ("big", "mid")} == {"mrvl"}
    check_sound(model, result, tmp_path / "o", {"x": _feeds((1, 3, 8, 8))["x"]})


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True])
def test_bad_max_subgraphs_is_refused(tmp_path, bad):
    with pytest.raises(mrvl_convert.MrvlConvertError, match="max_subgraphs"):
        mrvl_convert.convert(_two_regions(), tmp_path / "o", max_subgraphs=bad)
    assert not (tmp_path / "o").exists()


def test_deny_an_op_type_keeps_the_rest_of_its_chain(tmp_path):
    """Denying Relu: the Convs stay on Mrvl (without a fused Relu), every Relu runs on CPU."""
    model = small_cnn()
    result = mrvl_convert.convert(model, tmp_path / "o", deny=["Relu"])
    for name in ("relu1", "relu2", "relu3"):
        entry = result.placement(name)
        assert entry["placement"] == "cpu" and entry["reason"] == "denied by the user ('Relu')"
    convs = [e for e in result.placements if e["op_type"] == "Conv"]
    assert convs and all(e["placement"] == "mrvl" for e in convs)
    assert result.manifest["options"]["deny"] == ["Relu"]
    check_sound(model, result, tmp_path / "o", _feeds())


def test_deny_a_node_by_name(tmp_path):
    model = small_cnn()
    result = mrvl_convert.convert(model, tmp_path / "o", deny=["pool1"])
    assert result.placement("pool1")["placement"] == "cpu"
    assert "denied by the user" in result.placement("pool1")["reason"]
    assert result.placement("pool2")["placement"] == "mrvl"
    check_sound(model, result, tmp_path / "o", _feeds())


def test_deny_by_the_op_type_the_model_wrote(tmp_path):
    """A Sum is an Add after canonicalize; denying 'Sum' still finds it."""
    b = Builder()
    x = b.input("x", [1, 3, 8, 8])
    convs = [b.conv(x, 3, 4, pads=[1, 1, 1, 1]) for _ in range(3)]
    y = b.op("Sum", convs, name="sum")
    model = b.model([b.conv(y, 4, 4, k=1)])
    assert mrvl_convert.convert(model, tmp_path / "a").placement("sum")["placement"] == "mrvl"
    for deny in (["Sum"], ["sum"]):
        result = mrvl_convert.convert(model, tmp_path / "b", deny=deny)
        assert result.placement("sum")["placement"] == "cpu"
        # the partial sum canonicalize added for the third input stays on CPU with it
        cpu = [s for s in result.manifest["stages"] if s["kind"] == "cpu"]
        assert [s["nodes"] for s in cpu] == [2]


@pytest.mark.parametrize("bad", ["Relu", [""], [3]])
def test_bad_deny_is_refused(tmp_path, bad):
    with pytest.raises(mrvl_convert.MrvlConvertError, match="deny"):
        mrvl_convert.convert(small_cnn(), tmp_path / "o", deny=bad)


def test_fragmentation_summary_counts_transitions_and_macs(tmp_path):
    """small_cnn: conv 3->8 at 16x16 (55296 MACs), conv 8->4 at 8x8 (18432), FC 64->16 (1024)
    and FC 16->10 (160)."""
    total = 55296 + 18432 + 1024 + 160
    whole = mrvl_convert.convert(_two_regions(), tmp_path / "a").summary
    assert (whole["transitions"], whole["macs"], whole["mrvl_macs"]) == (2, total, total)
    assert whole["mrvl_mac_share"] == 1.0
    cut = mrvl_convert.convert(_two_regions(), tmp_path / "b", max_subgraphs=1)
    assert (cut.summary["transitions"], cut.summary["mrvl_macs"]) == (1, 55296)
    assert cut.summary["mrvl_mac_share"] == round(55296 / total, 4)
    assert [(c["op_type"], c["nodes"]) for c in cut.report["cut_by"]] == [
        ("Gemm", 2), ("Relu", 2), ("Conv", 1), ("Flatten", 1), ("MaxPool", 1), ("Sin", 1)]


def test_concat_reason_does_not_contradict_itself(tmp_path):
    """A Concat the accelerator cannot take names its own axis: the reason must not say
    that only axis 1 is supported. Axis 2 of a batch-2 model's 5-D tensor (2-D to 4-D ones on a
    non-leading axis are 4-D channel Concats now, concat_views.py)."""
    b = Builder()
    x = b.input("x", [2, 3, 8, 8])
    y = b.conv(x, 3, 4, pads=[1, 1, 1, 1])
    r = b.op("Reshape", [y, b.const(np.array([2, 4, 8, 4, 2], np.int64))], name="to5d")
    c = b.op("Concat", [r, r], name="cat", axis=2)
    reason = mrvl_convert.convert(b.model([c]), tmp_path / "o").placement("cat")["reason"]
    assert "this one is on axis 2 of a 5-D tensor" in reason
    assert "only the channel axis (1) is supported" not in reason


def test_max_subgraphs_with_policy_single(tmp_path):
    model = small_cnn()
    one = mrvl_convert.convert(model, tmp_path / "a", policy="single", max_subgraphs=1)
    assert stages(one) == ["mrvl"]
    none = mrvl_convert.convert(model, tmp_path / "b", policy="single", max_subgraphs=0)
    assert stages(none) == ["cpu"]
    assert "beyond max_subgraphs" in none.placement("relu1")["reason"]
    check_sound(model, none, tmp_path / "b", _feeds())


def _compute_vs_memory_regions():
    """A Conv with many MACs and few weights, and (after a CPU Sin that reads the Conv's
    result, so the two are separate regions) an FC with fewer MACs but a weight large enough
    that streaming it from DDR dominates: MACs and time rank them apart."""
    b = Builder()
    x = b.input("x", [1, 16, 32, 32])
    v = b.input("v", [1, 1024])
    y = b.op("Relu", [b.conv(x, 16, 16, pads=[1, 1, 1, 1])], name="conv_relu")
    peak = b.op("ReduceMax", [y], name="peak", keepdims=0)
    cut = b.op("Sin", [b.op("Add", [v, peak], name="shift")], name="cut")
    z = b.op("Relu", [b.gemm(cut, 1024, 1024)], name="fc_relu")
    return b.model([y, z])


def test_max_subgraphs_with_estimate_ranks_by_estimated_time(tmp_path):
    from mrvl_convert.core.macs import node_macs
    from mrvl_convert.estimate import load_profile
    from mrvl_convert.estimate.region import node_cycles
    import onnx_graphsurgeon as gs
    model = _compute_vs_memory_regions()
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(model))
    conv = next(n for n in graph.nodes if n.op == "Conv")
    gemm = next(n for n in graph.nodes if n.op == "Gemm")
    profile = load_profile(None)
    # The premise: the Conv has more MACs, the FC more estimated cycles.
    assert node_macs(conv) > node_macs(gemm)
    assert node_cycles(gemm, profile) > node_cycles(conv, profile)
    by_macs = mrvl_convert.convert(model, tmp_path / "m", max_subgraphs=1)
    assert by_macs.placement("conv_relu")["placement"] == "mrvl"
    assert "the 1 with the most MACs" in by_macs.placement("fc_relu")["reason"]
    by_time = mrvl_convert.convert(model, tmp_path / "t", max_subgraphs=1, estimate=True)
    assert by_time.placement("fc_relu")["placement"] == "mrvl"
    assert "the 1 with the most estimated accelerator time" in \
        by_time.placement("conv_relu")["reason"]
    feeds = {"x": _feeds((1, 16, 32, 32))["x"],
             "v": np.random.default_rng(1).standard_normal((1, 1024)).astype(np.float32)}
    check_sound(model, by_time, tmp_path / "t", feeds)
