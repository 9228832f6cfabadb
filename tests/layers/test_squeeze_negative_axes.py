"""A Squeeze with negative axes (``axes=[-1, -2]`` after a global pool) was written into the
Nodes-JSON as "-1", which its schema refuses (found by tests/system/test_fuzz_fqdq.py): the
axes are written counted from the front."""
from __future__ import annotations

import json

import numpy as np

import mrvl_convert
from support.models import Builder


def test_negative_squeeze_axes_are_written_from_the_front(tmp_path) -> None:
    b = Builder(0)
    x = b.input("x", [1, 4, 4, 4])
    y = b.op("Relu", [b.conv(x, 4, 4)])
    y = b.op("Squeeze", [b.op("GlobalAveragePool", [y]), b.const(np.array([-1, -2], np.int64))])
    result = mrvl_convert.convert(b.model([b.gemm(y, 4, 3)]), tmp_path / "out")
    layers = [n for f in result.files if f.name.endswith("-nodes.json")
              for n in json.loads(f.read_text())["nodes"] if n["name"] != "input"]
    axes = [n["attrs"]["axes"] for n in layers if n.get("attrs", {}).get("layer_name") == ["squeeze"]]
    assert axes == [["3", "2"]] or axes == [["2", "3"]], axes
