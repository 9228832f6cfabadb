"""Issue 45 finding 7: a C2f block's int8 Split (``DequantizeLinear -> Split``, each piece read
by a QuantizeLinear of the same scale) is exact, and the per-layer comparison says so: the
layer's first output holds the int8 values the QuantizeLinear after it gives back, so it is
compared with that QuantizeLinear's output, not with the Split's float one (which made the
per-layer map blame the Split: 104 off where nothing was)."""
from __future__ import annotations

import json

import numpy as np
import onnx

import mrvl_convert
from mrvl_convert.quantize import Quantization
from support.models import Builder


def _c2f() -> onnx.ModelProto:
    """Conv -> Split in halves -> Conv on the second -> Concat(first, second, conv) -> Conv:
    YOLOv8's C2f (tests/support/corpus_detect.py) without its SiLUs."""
    b = Builder(seed=4, opset=13)
    x = b.input("x", [1, 3, 16, 16])
    y = b.op("Relu", [b.conv(x, 3, 8, pads=[1, 1, 1, 1])], name="relu0")
    first = b.op("Split", [y, b.const(np.array([4, 4], np.int64))], name="c2f_split",
                 outputs=2, axis=1)
    second = "c2f_split_out1"
    m = b.op("Relu", [b.conv(second, 4, 4, pads=[1, 1, 1, 1])], name="relu1")
    y = b.op("Concat", [first, second, m], name="c2f_concat", axis=1)
    return b.model([b.conv(y, 12, 6, k=1)])


def test_the_int8_split_is_compared_as_int8_and_every_layer_is_exact(tmp_path) -> None:
    rng = np.random.default_rng(0)
    calibration = {"x": rng.standard_normal((8, 3, 16, 16)).astype(np.float32)}
    result = mrvl_convert.convert(_c2f(), tmp_path / "a", quantize=Quantization(calibration))
    qdq = tmp_path / "a" / result.manifest["quantization"]["file"]
    layers = [n["attrs"] for s in result.manifest["stages"] if s["kind"] == "mrvl"
              for n in json.loads((tmp_path / "a" / s["nodes_json"]).read_text())
              ["nodes"] if n["op"] == "tvm_op"]
    split = next(a for a in layers if a["layer_name"] == ["Split"])
    assert split["dtype"] == ["int8"] and split["source_nodes"][-2:][0] == "c2f_split"
    feeds = [{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(3)]
    comparison = mrvl_convert.compare(qdq, tmp_path / "a", feeds, layers=True).to_dict()
    rows = {r["tensor"]: r for r in comparison["rows"]}
    assert comparison["first_layer_over"] is None, comparison["first_layer_over"]
    split_rows = [r for t, r in rows.items() if r["kind"] == "layer" and "c2f_split" in t]
    assert split_rows and all(r["max_abs"] == 0 for r in split_rows), split_rows
    assert all(r["max_abs"] == 0 for r in comparison["rows"] if r["kind"] == "output")
    assert comparison["passed"]
