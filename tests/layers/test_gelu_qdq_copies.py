"""A GELU reading a DequantizeLinear directly in an int8 model: canonicalize gives each of its
readers its own copy (``frontend/qdq.py``), so the GELU reads x through two or more equal
copies. ``core.graph.same_value`` takes them for one x (as ``frontend/norm_forms.py`` does);
on integ10 the gate's copy was "not x" and the GELU was cut to CPU."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

import mrvl_convert
from mrvl_convert.quantize import Quantization
from support.models import Builder
from support.transformer_ops import gelu_erf, gelu_tanh

C = 16
FORMS = ["erf:div", "erf:mul", "tanh:pow"]


def _int8_fc_gelu_fc(form: str) -> onnx.ModelProto:
    """FC -> GELU -> FC; quantized by our recipe it is int8 FC -> Q -> DQ -> GELU -> Q -> DQ ->
    int8 FC, every reader of the first DQ given its own copy by canonicalize."""
    b = Builder(seed=3)
    x = b.input("x", [1, C])
    a = b.gemm(x, C, C)
    kind, variant = form.split(":")
    g = gelu_erf(b, a, variant) if kind == "erf" else gelu_tanh(b, a, variant)
    return b.model([b.gemm(g, C, C)])


def _convert(form: str, out):
    rng = np.random.default_rng(0)
    calibration = {"x": rng.uniform(-2, 2, (16, C)).astype(np.float32)}
    return mrvl_convert.convert(_int8_fc_gelu_fc(form), out,
                                quantize=Quantization(calibration)), rng


@pytest.mark.parametrize("form", FORMS)
def test_a_gelu_after_a_dequantize_runs_whole_and_verifies(tmp_path, form):
    result, rng = _convert(form, tmp_path / "o")
    cut = {e["name"]: e.get("reason") for e in result.report["nodes"]
           if e["placement"] not in ("mrvl", "removed")}
    assert cut == {}
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
    nodes = json.loads(next(p for p in result.files if p.name.endswith("-nodes.json"))
                       .read_text())["nodes"]
    gelu = [n for n in nodes if n["op"] == "tvm_op"
            and n["attrs"]["composite_name"][0].startswith("mrvl.gelu")]
    assert gelu, "no GELU composite"
    # every layer (each copy's quant layer too) is read by a later one or is an output
    heads = json.loads(next(p for p in result.files if p.name.endswith("-nodes.json"))
                       .read_text())["heads"]
    read = {i[0] for n in nodes for i in n.get("inputs", [])} | {h[0] for h in heads}
    assert all(k in read for k, n in enumerate(nodes) if n["op"] == "tvm_op")
    qdq = result.out_dir / result.manifest["quantization"]["file"]
    feeds = [{"x": rng.uniform(-2, 2, (1, C)).astype(np.float32)} for _ in range(4)]
    assert mrvl_convert.compare(qdq, result.out_dir, feeds).passed
