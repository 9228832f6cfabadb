"""Golden test: our Nodes-JSON / Constants-JSON for the RFC's CNN against what upstream TVM wrote.

tests/data/reference/ holds the RFC's CNN as ONNX and the files upstream TVM 0.19's Marvell codegen
wrote for exactly that file. Our symbol names differ (and we add fields); everything else must not.
"""
from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

import mrvl_convert

pytestmark = pytest.mark.system

REF = Path(__file__).parents[1] / "data" / "reference"
# Fields that carry our own symbol names, not layer content.
NAME_FIELDS = {"func_node_name", "kernel_const_name", "bias_const_name"}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = tmp_path_factory.mktemp("golden") / "rfc"
    result = mrvl_convert.convert(REF / "rfc_fashion_cnn.onnx", out, policy="single")
    stage = result.manifest["stages"][0]
    nodes = json.loads((out / stage["nodes_json"]).read_text())
    consts = json.loads((out / stage["consts_json"]).read_text())
    return result, nodes, consts


@pytest.fixture(scope="module")
def upstream():
    nodes = json.loads((REF / "rfc_fashion_cnn.upstream-nodes.json").read_text())
    consts = json.loads((REF / "rfc_fashion_cnn.upstream-consts.json").read_text())
    return nodes, consts


def _strip_name(value):
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k != "name"}
    return value


def test_one_mrvl_subgraph_and_no_cpu(converted):
    result, _, _ = converted
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]


def test_same_layers_in_same_order(converted, upstream):
    ours = [n["attrs"]["layer_name"] for n in converted[1]["nodes"]]
    theirs = [n["attrs"]["layer_name"] for n in upstream[0]["nodes"]]
    assert ours == theirs
    assert [n["inputs"] for n in converted[1]["nodes"]] == [n["inputs"] for n in upstream[0]["nodes"]]


@pytest.mark.parametrize("index", range(9))
def test_every_upstream_attribute_matches(converted, upstream, index):
    ours, theirs = converted[1]["nodes"][index], upstream[0]["nodes"][index]
    assert ours["op"] == theirs["op"]
    for key, value in theirs["attrs"].items():
        if key in NAME_FIELDS:
            continue
        assert key in ours["attrs"], f"layer {index} lacks {key}"
        assert _strip_name(ours["attrs"][key]) == _strip_name(value), f"layer {index} attr {key}"


def test_graph_level_fields_match(converted, upstream):
    for key in ("arg_nodes", "heads", "attrs", "batch_size", "num_subgraph_inputs",
                "num_subgraph_outputs"):
        assert converted[1][key] == upstream[0][key], key


def _decode(entry):
    return np.frombuffer(base64.b64decode(entry["data_base64"]), "<f4").reshape(entry["shape"])


def test_constants_match_bit_for_bit(converted, upstream):
    ours_nodes, ours_consts = converted[1]["nodes"], converted[2]
    up_nodes, up_consts = upstream[0]["nodes"], upstream[1]
    compared = 0
    for mine, theirs in zip(ours_nodes, up_nodes):
        for slot in ("kernel_const_name", "bias_const_name"):
            if slot not in theirs["attrs"]:
                continue
            a = up_consts[theirs["attrs"][slot][0]]
            b = ours_consts[mine["attrs"][slot][0]]
            assert (a["shape"], a["dtype"], a["min"], a["max"]) == \
                   (b["shape"], b["dtype"], b["min"], b["max"])
            assert np.array_equal(_decode(a), _decode(b))
            compared += 1
    assert compared == len(up_consts) == len(ours_consts) == 8


def test_layers_name_their_onnx_sources(converted):
    layers = [n for n in converted[1]["nodes"] if n["op"] == "tvm_op"]
    conv = layers[1]["attrs"]
    assert conv["rule"] == ["mrvl.conv2d_nhwc2nhwc"]
    assert [s.split("_")[0] for s in conv["source_nodes"]] == ["Conv", "Relu"]
    fused = [s for layer in layers for s in layer["attrs"]["source_nodes"]]
    # Every ONNX node is in exactly one layer, except the Transpose the NHWC layout absorbs.
    assert len(fused) == len(set(fused)) == 12
