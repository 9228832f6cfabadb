"""``--keep-fp16 auto`` converts its trial models with the shapes the plain conversion takes
(issue 39, finding 2): a model whose batch dim is symbolic runs to the end with
``--input-shape``, given for every model or for a glob of models, and with ``--layer-set``."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from mrvl_convert.cli.convert import main


def symbolic_batch_classifier() -> onnx.ModelProto:
    """conv -> relu -> global pool -> flatten -> gemm, input x [N, 3, 8, 8], logits [N, 4]."""
    rng = np.random.default_rng(3)
    inits = {"w1": rng.standard_normal((8, 3, 3, 3)) * 0.3, "b1": np.zeros(8),
             "w2": rng.standard_normal((4, 8)) * 0.5, "b2": np.zeros(4)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("GlobalAveragePool", ["r1"], ["p1"], name="pool"),
             helper.make_node("Flatten", ["p1"], ["f1"], name="flat"),
             helper.make_node("Gemm", ["f1", "w2", "b2"], ["y"], name="fc", transB=1)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shape")
    src = tmp / "m.onnx"
    onnx.save(symbolic_batch_classifier(), src)
    x = np.random.default_rng(4).standard_normal((16, 3, 8, 8)).astype(np.float32)
    np.savez(tmp / "cal.npz", x=x)
    return src, tmp


@pytest.mark.parametrize("shape, extra", [
    ("x:1,3,8,8", []),
    ("m*.onnx=x:1,3,8,8", []),
    ("x:1,3,8,8", ["--layer-set", "marvell"]),
])
def test_keep_fp16_auto_takes_the_given_input_shapes(case, shape, extra, capsys):
    src, tmp = case
    out = tmp / f"out_{abs(hash((shape, tuple(extra))))}"
    code = main([str(src), "-o", str(out), "--quantize", "int8", "--calibration",
                 str(tmp / "cal.npz"), "--keep-fp16", "auto", "--min-agreement", "0.9",
                 "--input-shape", shape, *extra])
    captured = capsys.readouterr()
    assert code in (0, 3), captured.err
    assert "dynamic dim" not in captured.err
    assert any(l.startswith("keep-fp16 m.onnx:") for l in captured.out.splitlines())
    manifest = json.loads((out / "m" / "manifest.json").read_text())
    assert manifest["quantization"]["keep_fp16_auto"]["min_agreement"] == 0.9
