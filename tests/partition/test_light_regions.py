"""The multi policy's light regions (partition/light_regions.py): CPU work with no Mrvl work
before it runs first instead of cutting the accelerator's part, a lone light group beside the
first stage goes to the CPU as upstream decides, and upstream's plan stays where it gives fewer
Mrvl subgraphs. Each artifact computes what the model does (verify)."""
from __future__ import annotations

import numpy as np

import mrvl_convert
from mrvl_convert.verify.compare import compare
from support.models import Builder


def _kinds(result):
    return [s["kind"] for s in result.manifest["stages"]]


def test_cpu_work_fed_only_by_inputs_runs_first_and_does_not_cut(tmp_path):
    """FC -> Add(., Sin(v)) -> FC: the Sin waited for the first Mrvl stage and cut the FCs
    apart (2 Mrvl subgraphs); it now runs before them."""
    b = Builder()
    x, v = b.input("x", [1, 16]), b.input("v", [1, 16])
    y = b.op("Relu", [b.gemm(x, 16, 16)], name="fc1")
    y = b.op("Add", [y, b.op("Sin", [v], name="side")], name="join")
    model = b.model([b.op("Relu", [b.gemm(y, 16, 8)], name="fc2")])
    result = mrvl_convert.convert(model, tmp_path / "art")
    assert _kinds(result) == ["cpu", "mrvl"]
    assert result.placement("join")["placement"] == "mrvl"
    assert compare(model, tmp_path / "art").passed


def test_a_lone_light_group_beside_the_first_stage_goes_to_cpu(tmp_path):
    """A mask's Reshape (a layer) read only by a CPU Cast: alone on Mrvl it would keep the mask's
    CPU ops after the first Mrvl stage, and the Add reading them in a second one."""
    b = Builder()
    x, mask = b.input("x", [1, 4, 16]), b.input("mask", [1, 16])
    y = b.op("MatMul", [x, b.weight(16, 16)], name="fc1")
    view = b.op("Reshape", [mask, b.const(np.array([1, 1, 16], np.int64))], name="view")
    bias = b.op("Cast", [b.op("Cast", [view], name="to_bool", to=9)], name="to_float", to=1)
    y = b.op("Add", [y, bias], name="masked")
    model = b.model([b.op("MatMul", [y, b.weight(16, 8)], name="fc2")])
    result = mrvl_convert.convert(model, tmp_path / "art")
    assert _kinds(result) == ["cpu", "mrvl"]
    view_entry = result.placement("view")
    assert view_entry["placement"] == "cpu"
    assert "stands alone" in view_entry["reason"] and "as upstream decides" in \
        view_entry["reason"]
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 4, 16)).astype(np.float32),
             "mask": (np.arange(16) % 3 == 0).astype(np.float32)[None]}
    assert compare(model, tmp_path / "art", [feeds]).passed


def test_upstream_plan_stays_where_it_gives_fewer_mrvl_subgraphs(tmp_path):
    """FC -> Sin -> Transpose, Relu, Transpose (light) -> Cos -> FC: keeping the light region on
    Mrvl would make three Mrvl subgraphs; sent to CPU as upstream decides, two. (The Relu keeps
    the Transposes from being a round trip canonicalize drops, frontend/round_trips.py.)"""
    b = Builder()
    x = b.input("x", [1, 4, 16])
    y = b.op("Sin", [b.op("MatMul", [x, b.weight(16, 16)], name="fc1")], name="cut1")
    y = b.op("Relu", [b.op("Transpose", [y], name="t1", perm=[0, 2, 1])], name="mid")
    y = b.op("Transpose", [y], name="t2", perm=[0, 2, 1])
    y = b.op("Cos", [y], name="cut2")
    model = b.model([b.op("MatMul", [y, b.weight(16, 8)], name="fc2")])
    result = mrvl_convert.convert(model, tmp_path / "art")
    assert _kinds(result).count("mrvl") == 2
    assert "as upstream decides" in result.placement("t1")["reason"]
