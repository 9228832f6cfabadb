"""``--keep-fp32 auto`` keeps only the layers that help: a round that does not lower the worst
output's error by more than ``MARGIN`` of it is undone (``tune/keep_fp32_result.py``).
slanet-plus kept 3 Conv+BN layers, 8.6% of its MACs on the CPU, for max_rel 0.0433 -> 0.0424.

The models here round a large activation to fp16 on the accelerator and then cancel it:
``conv_pre`` adds 1000 (fp16's step there is 0.5), ``conv_diff`` takes the difference of its
two channels (a few units). The error is made where ``conv_pre``'s result is rounded, so
keeping ``conv_tail`` (whose fp16 weights the analysis names first) or ``conv_diff`` alone in
fp32 changes nothing: the value reaching them is rounded already."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import List, Optional

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from mrvl_convert import convert
from mrvl_convert.tune.keep_fp32 import convert_keep_fp32
from mrvl_convert.tune.keep_fp32_result import MARGIN, PATIENCE, helps
from mrvl_convert.verify.compare import compare


def cancelling_activation(pre: Optional[str] = "conv", tails: int = 1) -> onnx.ModelProto:
    """x[1,2,8,8] -> PRE (+1000) -> conv_diff (channel 0 - channel 1, exact weights) ->
    conv_tail (3x3, random weights; ``tails`` of them) -> y. ``pre`` "conv": a 1x1 Conv with
    exact weights and bias 1000 (the culprit is a layer of its own); "add": Add 1000 then
    Relu (the partition moves that small island to the CPU with ``conv_diff``)."""
    rng = np.random.default_rng(0)
    diff = np.array([[1.0, -1.0], [-1.0, 1.0]]).reshape(2, 2, 1, 1)
    inits = {"w_pre": np.round(rng.standard_normal((2, 2, 1, 1)) * 4) / 4,
             "b_pre": np.full(2, 1000.0), "shift": np.full((1, 2, 1, 1), 1000.0),
             "w_diff": diff}
    nodes = ([helper.make_node("Conv", ["x", "w_pre", "b_pre"], ["r"], name="conv_pre")]
             if pre == "conv" else
             [helper.make_node("Add", ["x", "shift"], ["s"], name="add"),
              helper.make_node("Relu", ["s"], ["r"], name="relu")])
    nodes.append(helper.make_node("Conv", ["r", "w_diff"], ["t0"], name="conv_diff"))
    channels = 2
    for k in range(tails):
        inits[f"w_tail{k}"] = rng.standard_normal((3, channels, 3, 3)) * 0.5
        inits[f"b_tail{k}"] = rng.standard_normal(3)
        out = "y" if k == tails - 1 else f"t{k + 1}"
        nodes.append(helper.make_node("Conv", [f"t{k}", f"w_tail{k}", f"b_tail{k}"], [out],
                                      name="conv_tail" + (str(k) if k else ""),
                                      pads=[1, 1, 1, 1]))
        channels = 3
    used = {i for n in nodes for i in n.input}
    graph = helper.make_graph(
        nodes, "cancelling_activation",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()
         if k in used])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
    onnx.checker.check_model(model)
    return model


def saved(tmp_path: Path, proto: onnx.ModelProto) -> Path:
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    return path


def files(root: Path) -> List[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_a_round_that_does_not_help_is_undone_and_the_artifact_is_the_plain_one(tmp_path):
    """main kept conv_tail and conv_diff (93.5% of the MACs to the CPU) for max_rel 0.433 ->
    0.433; both rounds are undone now, and the artifact is the one without kept nodes."""
    model = saved(tmp_path, cancelling_activation())
    result = convert_keep_fp32(model, tmp_path / "art", "auto")
    assert result.kept == []
    assert [r["nodes"] for r in result.rounds] == [["conv_tail"], ["conv_diff"]]
    assert all("undone" in r and r["cost"]["mac_share_moved"] > 0 for r in result.rounds)
    assert result.after == result.before and result.after["passed"] is False
    convert(model, tmp_path / "plain")
    art, plain = tmp_path / "art", tmp_path / "plain"
    assert files(art) == files(plain)
    for name in files(plain):
        if name != "report.json":
            assert (art / name).read_bytes() == (plain / name).read_bytes(), name
    report = json.loads((art / "report.json").read_text())
    section = report.pop("keep_fp32")
    assert report == json.loads((plain / "report.json").read_text())
    # report.json still says what was tried, undone, and what it would have cost
    assert section["nodes"] == [] and section["mac_share_moved"] == 0.0
    assert [r["undone"] for r in section["measured"]["rounds"]] == \
        ["error 43.3 -> 43.3 x tolerance"] * 2
    line = result.line()
    assert line.startswith("keep-fp32 m.onnx: nothing kept in fp32;")
    assert "tried and undone" in line and "conv_tail (error 43.3 -> 43.3 x tolerance, " \
        "would move 87.1% of the MACs)" in line


def test_the_search_goes_on_after_an_undone_round(tmp_path):
    """conv_tail does not help and is undone; conv_diff (with the Add+Relu island the
    partition moves with it) passes: main kept both, 100% of the MACs on the CPU."""
    model = saved(tmp_path, cancelling_activation("add"))
    result = convert_keep_fp32(model, tmp_path / "art", "auto")
    assert result.kept == ["conv_diff"]
    assert "undone" in result.rounds[0] and "undone" not in result.rounds[1]
    assert result.after["passed"] and result.held_out["after"]["passed"]
    assert compare(model, tmp_path / "art").passed
    section = json.loads((tmp_path / "art" / "report.json").read_text())["keep_fp32"]
    assert section["nodes"] == ["conv_diff"] and section["mac_share_moved"] < 0.1
    assert section["measured"]["rounds"][0]["nodes"] == ["conv_tail"]


def test_rounds_undone_in_a_row_stop_the_search(tmp_path):
    """Two tails whose weights the analysis names before conv_diff: both undone, the search
    stops before conv_diff (main tried all three of its rounds)."""
    model = saved(tmp_path, cancelling_activation(tails=2))
    result = convert_keep_fp32(model, None, "auto", max_rounds=5)
    assert len(result.rounds) == PATIENCE and all("undone" in r for r in result.rounds)
    assert result.kept == [] and result.stopped == "stopped after 2 rounds in a row undone"
    assert "stopped after 2 rounds in a row undone" in result.line()
    assert result.measured["stopped"] == result.stopped


@pytest.mark.parametrize("before, after, kept", [
    (4.33, 4.24, False),                    # slanet-plus's 2%
    (1.0, 1.0 - MARGIN, False), (1.0, 0.94, True),
    (math.inf, 50.0, True), (math.inf, math.inf, False), (2.0, math.inf, False)])
def test_the_criterion(before, after, kept):
    assert helps(before, after) is kept


def overflowing_pool() -> onnx.ModelProto:
    """x[1,8,16] -> mm_big (weights 500..1000: values past fp16's 65504) -> relu -> pool
    (ReduceMax over the 8 rows) -> mm_head (weights 1e-3: back in range) -> y. Keeping the
    overflowing nodes leaves the head reading inf (the pool's value crosses to the accelerator
    as fp16), so the outputs stay inf until the next round keeps the head: magika's dense_2,
    GELU and global max pool, then its target_label."""
    rng = np.random.default_rng(0)
    inits = {"w_big": rng.uniform(500, 1000, (16, 16)),
             "w_head": rng.uniform(-1, 1, (16, 4)) * 1e-3}
    nodes = [helper.make_node("MatMul", ["x", "w_big"], ["h"], name="mm_big"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("ReduceMax", ["r"], ["m"], name="pool", axes=[1], keepdims=0),
             helper.make_node("MatMul", ["m", "w_head"], ["y"], name="mm_head")]
    graph = helper.make_graph(
        nodes, "overflowing_pool",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8, 16])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                             ir_version=10)


def test_the_overflow_round_is_kept_though_the_outputs_stay_inf(tmp_path):
    """fp16 cannot hold the overflowing values, so their round is never undone (its error
    inf -> inf says nothing); the head's round then passes, as on main."""
    from mrvl_convert.tune.keep_fp32 import VerifySettings

    model = saved(tmp_path, overflowing_pool())
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.uniform(0, 10, (1, 8, 16)).astype(np.float32)} for _ in range(8)]
    result = convert_keep_fp32(model, tmp_path / "art", "auto",
                               verify=VerifySettings(inputs=feeds))
    first, second = result.rounds
    assert first["layer"] == "(overflow)" and first["verify"]["max_rel"] is None
    assert "undone" not in first and "undone" not in second
    assert result.kept == ["mm_big", "relu", "pool", "mm_head"]
    assert result.after["passed"] and result.held_out["after"]["passed"]
