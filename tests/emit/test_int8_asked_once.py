"""emit asks whether a Nodes-JSON layer is int8 once per layer where it asked up to once per
source node and twice per float layer (issue 45: 4 walks of every layer's attributes)."""
from __future__ import annotations

from mrvl_convert.emit import codegen, mac_shares


def _documents():
    float_conv = {"layer_name": ["Conv2D"], "composite_name": ["mrvl.conv2d"],
                  "activation_type": ["relu"], "rule": ["mrvl.conv2d"],
                  "source_nodes": ["conv", "relu"]}
    int8_conv = {"layer_name": ["Conv2D"], "composite_name": ["mrvl.qnn_conv2d"],
                 "input_scale": [0.5], "rule": ["mrvl.qnn_conv2d"],
                 "source_nodes": ["q", "conv8", "dq"]}
    sigmoid = {"layer_name": ["Sigmoid"], "composite_name": ["mrvl.sigmoid"],
               "rule": ["mrvl.sigmoid"], "source_nodes": ["sig"]}
    nodes = [{"op": "null", "name": "x", "attrs": {}}] + [
        {"op": "tvm_op", "name": f"l{i}", "attrs": attrs}
        for i, attrs in enumerate([float_conv, int8_conv, sigmoid])]
    return {"stage": {"nodes": nodes}}


def _counting(monkeypatch, module):
    asked = []
    plain = codegen.is_int8

    def counted(attrs):
        asked.append(attrs["layer_name"][0])
        return plain(attrs)

    monkeypatch.setattr(module, "is_int8", counted)
    return asked


def test_codegen_needs_asks_once_a_layer(monkeypatch) -> None:
    upstream = {"conv": None, "relu": None, "q": None, "conv8": None, "dq": None,
                "sig": "v0.19 has no Sigmoid rule"}
    expected = codegen.needs(_documents().values(), upstream)
    asked = _counting(monkeypatch, codegen)
    assert codegen.needs(_documents().values(), upstream) == expected
    assert len(asked) == 3
    kinds = {entry["kind"]: entry["layers"] for entry in expected["beyond_upstream"]}
    assert kinds == {codegen.INT8_LAYERS: 1, "Sigmoid": 1}


def test_mac_shares_asks_once_a_layer(monkeypatch) -> None:
    expected = mac_shares._int8_sources(_documents())
    asked = _counting(monkeypatch, mac_shares)
    assert mac_shares._int8_sources(_documents()) == expected
    assert list(expected.items()) == [("conv", False), ("relu", False), ("q", True),
                                      ("conv8", True), ("dq", True), ("sig", False)]
    assert len(asked) == 3
