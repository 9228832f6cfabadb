"""An embedding's L2 normalisation in our recipe's int8 model (sscd_distilled's tail:
``Gemm -> Q -> DQ``, then ReduceL2, Clip, Expand and the Div of x). canonicalize gives the norm
and the Div each its own DequantizeLinear copy of x (frontend/qdq.py): on main the check saw
two tensors ("the divisor is not the norm of the dividend") and the tail ran on CPU. After,
the copies are one value (core.graph.same_value): one Mrvl subgraph, every layer's output
read (the squares read the norm's copy, the last product the Div's), verify against the QDQ
model PASS."""
from __future__ import annotations

import json

import numpy as np
import onnx

import mrvl_convert
from support.int8 import converted_int8
from support.layer_chains import layer_kinds
from support.models import Builder

C = 24


def _model() -> onnx.ModelProto:
    b = Builder(seed=5)
    x = b.gemm(b.input("x", [1, 16]), 16, C, transB=1)
    norm = b.op("ReduceL2", [x], name="norm", axes=[1], keepdims=1)
    norm = b.op("Clip", [norm, b.const(np.float32(1e-12))])
    norm = b.op("Expand", [norm, b.const(np.array([1, C], np.int64))])
    return b.model([b.op("Div", [x, norm], name="normalized")])


def _copies(qdq: onnx.ModelProto) -> bool:
    """The recipe's form: the norm and the Div read x through one QuantizeLinear's pair."""
    producers = {o: n for n in qdq.graph.node for o in n.output}
    norm = next(n for n in qdq.graph.node if n.name == "norm")
    div = next(n for n in qdq.graph.node if n.name == "normalized")
    a, b = producers[norm.input[0]], producers[div.input[0]]
    return a.op_type == b.op_type == "DequantizeLinear" and a.input[0] == b.input[0]


def test_an_int8_l2_normalize_is_whole_and_verifies(tmp_path):
    result, qdq = converted_int8(_model(), tmp_path / "art")
    assert _copies(onnx.load(qdq))
    summary = result.report["summary"]
    cpu = [(e["name"], e.get("reason")) for e in result.report["nodes"]
           if e["placement"] == "cpu"]
    assert (summary["mrvl_subgraphs"], summary["cpu_subgraphs"], cpu) == (1, 0, []), cpu
    rules = {e["name"]: e.get("rule") for e in result.report["nodes"]}
    assert rules["norm"] == rules["normalized"] == "mrvl.l2_normalize"
    assert layer_kinds(result)[-5:] == ["Mul2D", "FC", "Rsqrt", "Mul2D", "Mul2D"]
    [stage] = result.manifest["stages"]
    nodes = json.loads((result.out_dir / stage["nodes_json"]).read_text())
    read = {i[0] for n in nodes["nodes"] for i in n["inputs"]} | {h[0] for h in nodes["heads"]}
    layers = [k for k, n in enumerate(nodes["nodes"]) if n["op"] != "null"]
    assert set(layers) <= read, "a layer whose output nothing reads"
    rng = np.random.default_rng(4)
    feeds = [{"x": rng.uniform(-1, 1, (1, 16)).astype(np.float32)} for _ in range(4)]
    comparison = mrvl_convert.compare(qdq, result.out_dir, feeds)
    assert comparison.passed, comparison
