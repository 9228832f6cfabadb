"""The simulator's get_capability and compile agree on what a layer needs."""
from __future__ import annotations

import json

import pytest

import mrvl_convert
from support.models import small_cnn


def test_capability_and_compile_agree_on_a_missing_bias(tmp_path):
    """get_capability must not call supported a layer that compile refuses."""
    from mrvl_convert.runtime.simulator import MrvlSimulator
    result = mrvl_convert.convert(small_cnn(), tmp_path / "o")
    nodes_path = next(p for p in result.files if p.name.endswith("-nodes.json"))
    consts_path = next(p for p in result.files if p.name.endswith("-consts.json"))
    doc = json.loads(nodes_path.read_text())
    conv = next(n for n in doc["nodes"] if n["attrs"].get("layer_name") == ["Conv2D"])
    del conv["attrs"]["bias_const_name"]
    nodes_path.write_text(json.dumps(doc))
    rows = {r["name"]: r for r in MrvlSimulator().get_capability(doc)}
    assert rows[conv["name"]]["supported"] is False
    assert rows[conv["name"]]["reason"] == "no bias_const_name"
    with pytest.raises(mrvl_convert.ArtifactError, match="bias_const_name"):
        MrvlSimulator().compile(nodes_path, consts_path)
