"""The report's layer-set hint for a node left on CPU by a rule's constraint that the other
built-in set does not have, in both directions (rules/other_sets.py)."""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.layers import MARVELL, UPSTREAM
from mrvl_convert.runtime import HybridSession
from support.models import Builder, run_ort
from support.partition import check_sound


def _mul_and_flat_concat(batch: int = 1):
    """Mul of two activations (upstream's channel_affine refuses it, the newer Mul2D takes it)
    and a Concat of two 2-D tensors (upstream's takes it; the newer Concat takes its 4-D views)."""
    b = Builder()
    x = b.input("x", [batch, 3, 8, 8])
    y = b.conv(x, 3, 4, pads=[1, 1, 1, 1])
    z = b.conv(x, 3, 4, pads=[1, 1, 1, 1])
    m = b.op("Mul", [y, z], name="mul")
    f = b.op("Flatten", [b.conv(m, 4, 4, k=1)], name="flat", axis=1)
    return b.model([b.gemm(b.op("Concat", [f, f], name="cat", axis=1), 512, 10, transB=1)])


def _feeds(batch: int = 1):
    return {"x": np.random.default_rng(0).standard_normal([batch, 3, 8, 8]).astype(np.float32)}


def test_upstream_names_marvell_for_a_node_its_rule_refused(tmp_path):
    model = _mul_and_flat_concat()
    result = mrvl_convert.convert(model, tmp_path / "u", layer_set=UPSTREAM)
    entry = result.placement("mul")
    assert entry["placement"] == "cpu"
    assert entry["near_miss"]["rule"] == "mrvl.channel_affine"   # refused on a constraint
    assert entry["reason"] == (
        "mrvl.channel_affine: not a per-channel affine: neither operand or both operands are "
        "constant; layer set marvell would take it (mrvl.mul)")
    assert result.placement("cat")["placement"] == "mrvl"
    check_sound(model, result, tmp_path / "u", _feeds())


def test_marvell_takes_the_flat_concat_on_its_4d_views(tmp_path):
    """The newer Concat takes 4-D tensors only: the 2-D one is a channel Concat of its
    ``[N, C, 1, 1]`` views (frontend/concat_views.py), so it needs upstream's no more (the
    naming of upstream for a refused node: the batch-two Concat below)."""
    model = _mul_and_flat_concat()
    result = mrvl_convert.convert(model, tmp_path / "m", layer_set=MARVELL)
    entry = result.placement("cat")
    assert entry["placement"] == "mrvl"
    assert "2-D tensors as the channel Concat of their 4-D views" in entry["canonical"]
    assert result.placement("mul")["placement"] == "mrvl"
    assert "would take it" not in result.placement("mul").get("reason", "")
    check_sound(model, result, tmp_path / "m", _feeds())


def test_marvell_names_upstream_for_a_batch_two_concat(tmp_path):
    # Batch 2 made inside a batch-1 model (a Concat on axis 0): not the model's batch, so the
    # region cannot run in chunks of 1 (rules/batch_axis.py) and the newer set refuses it.
    b = Builder()
    x = b.input("x", [1, 3, 8, 8])
    y = b.conv(x, 3, 4, pads=[1, 1, 1, 1])
    y = b.op("Concat", [y, y], name="pair", axis=0)
    cat = b.op("Concat", [y, y], name="cat", axis=1)
    model = b.model([b.conv(cat, 8, 4, k=1)])
    reason = mrvl_convert.convert(model, tmp_path / "m").placement("cat")["reason"]
    assert reason.startswith("mrvl.concat: the newer layer set concatenates batch 1 only")
    assert reason.endswith("; layer set upstream-0.19 would take it (mrvl.concat)")


@pytest.mark.parametrize("layer_set", [UPSTREAM, MARVELL])
def test_no_hint_where_no_set_takes_the_node_or_the_user_denied_it(tmp_path, layer_set):
    b = Builder()
    x = b.input("x", [1, 3, 8, 8])
    y = b.op("Sin", [b.conv(x, 3, 4, pads=[1, 1, 1, 1])], name="sin")
    y = b.op("Relu", [b.conv(y, 4, 4, pads=[1, 1, 1, 1])], name="relu")
    model = b.model([b.conv(b.op("Sigmoid", [y], name="sig"), 4, 4, k=1)])
    result = mrvl_convert.convert(model, tmp_path / "o", layer_set=layer_set, deny=["sig"])
    assert result.placement("sin")["reason"] == "no rule handles op type Sin"
    assert result.placement("sig")["reason"] == "denied by the user ('sig')"


@pytest.mark.parametrize("layer_set", [UPSTREAM, MARVELL])
@pytest.mark.parametrize("op", ["ArgMax", "TopK"])
def test_argmax_and_topk_stay_on_cpu_saying_why(tmp_path, layer_set, op):
    """The codegen's form (2-D, axis 1, k <= 16) still runs on CPU: its int64 indices have no
    carrier here; the hybrid computes them exactly (onnxruntime)."""
    b = Builder()
    x = b.input("x", [1, 3, 4, 4])
    y = b.gemm(b.op("Flatten", [b.conv(x, 3, 4, pads=[1, 1, 1, 1])], axis=1), 64, 10, transB=1)
    if op == "ArgMax":
        outputs = [b.op("ArgMax", [y], name="pick", axis=1, keepdims=1)]
    else:
        values = b.op("TopK", [y, b.const(np.array([5], np.int64))], name="pick", outputs=2,
                      axis=1)
        outputs = [values, "pick_out1"]
    model = b.model(outputs)
    result = mrvl_convert.convert(model, tmp_path / "o", layer_set=layer_set)
    entry = result.placement("pick")
    assert entry["placement"] == "cpu"
    rule = "mrvl.argmax (Argmax)" if op == "ArgMax" else "mrvl.topk (TopK)"
    assert entry["reason"] == (
        f"no rule handles op type {op}; the newer codegen's {rule} is not mapped: ONNX's int64 "
        "indices have no carrier in the artifact (the simulator and Nodes-JSON hold float32 and "
        "int8 tensors; the codegen takes Relay's int32 indices and writes no axis for a 4-D "
        "input)")
    feed = {"x": np.random.default_rng(2).standard_normal([1, 3, 4, 4]).astype(np.float32)}
    got = HybridSession(result.out_dir, threads=1).run(None, feed)
    want = list(run_ort(model, feed).values())
    indices = got[0] if op == "ArgMax" else got[1]
    assert indices.dtype == np.int64
    np.testing.assert_array_equal(indices, want[0] if op == "ArgMax" else want[1])

