"""ShuffleNet in int8 stays whole on the accelerator: its channel shuffle, which onnxruntime's
quantize_static writes DequantizeLinear -> Reshape -> Q -> DQ -> Transpose -> Q -> DQ -> Reshape
-> QuantizeLinear in one scale, is one int8 Conv2D whose int8 weight is the permutation matrix
at weight scale 1 (``mrvl.qnn_channel_shuffle``), bit-identical to onnxruntime's run of the QDQ
model as written, with all, some or none of the Q/DQ pairs between its three ops. A shuffle
whose scale changes along it would requantize: it stays on CPU with the rule's reason.
"""
from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Dict, List

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import mrvl_convert
from support import corpus
from support.int8 import converted_int8, reference_session

RULE = "mrvl.qnn_channel_shuffle"


def _shape(model: onnx.ModelProto) -> List[int]:
    return [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]


def _differing(qdq: Path, artifact: Path, inputs: int) -> List[int]:
    """The seeded inputs on which the artifact's output is not onnxruntime's, bit for bit."""
    model = onnx.load(qdq)
    name, shape = model.graph.input[0].name, _shape(model)
    hybrid, reference = mrvl_convert.HybridSession(artifact), reference_session(qdq)
    rng = np.random.default_rng(1)
    off = []
    for k in range(inputs):
        feed = {name: rng.uniform(-1, 1, shape).astype(np.float32)}
        if not np.array_equal(hybrid.run(None, feed)[0], reference.run(None, feed)[0]):
            off.append(k)
    return off


def _steps_off(qdq: Path, artifact: Path, inputs: int) -> float:
    """The largest difference from onnxruntime's run over the seeded inputs, in steps of the
    model output's DequantizeLinear scale."""
    model = onnx.load(qdq)
    name, shape = model.graph.input[0].name, _shape(model)
    [last] = [n for n in model.graph.node if model.graph.output[0].name in n.output]
    assert last.op_type == "DequantizeLinear"
    scale = float(next(numpy_helper.to_array(t) for t in model.graph.initializer
                       if t.name == last.input[1]))
    hybrid, reference = mrvl_convert.HybridSession(artifact), reference_session(qdq)
    rng = np.random.default_rng(1)
    worst = 0.0
    for _ in range(inputs):
        feed = {name: rng.uniform(-1, 1, shape).astype(np.float32)}
        diff = np.abs(hybrid.run(None, feed)[0] - reference.run(None, feed)[0]).max()
        worst = max(worst, float(diff) / scale)
    return worst


def _cpu(result) -> Dict[str, str]:
    return {n["name"]: n.get("reason") for n in result.report["nodes"]
            if n["placement"] == "cpu"}


@pytest.fixture(scope="module")
def unit(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shufflenet_unit")
    return converted_int8(corpus.built("shufflenet_unit"), tmp / "out")


def test_shufflenet_unit_int8_is_one_mrvl_subgraph_bit_identical(unit):
    result, qdq = unit
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"], _cpu(result)
    assert "int8_forms" not in result.report, result.report["int8_forms"]
    transposes = [n for n in result.report["nodes"] if n["op_type"] == "Transpose"]
    assert len(transposes) == 2 and {n["rule"] for n in transposes} == {RULE}
    assert _differing(qdq, result.out_dir, inputs=12) == []


def test_the_shuffle_is_an_int8_permutation_conv_of_one_scale(unit):
    result, _ = unit
    nodes = json.loads(next(result.out_dir.glob("*-nodes.json")).read_text())["nodes"]
    consts = json.loads(next(result.out_dir.glob("*-consts.json")).read_text())
    layers = [n["attrs"] for n in nodes if n["attrs"].get("rule") == [RULE]]
    assert len(layers) == 2
    for attrs in layers:
        assert attrs["layer_name"] == ["Conv2D"] and attrs["kernel_size"] == ["1", "1"]
        assert attrs["weight_scale"] == ["1"] and attrs["input_scale"] == attrs["output_scale"]
        const = consts[attrs["kernel_const_name"][0]]
        kernel = np.frombuffer(base64.b64decode(const["data_base64"]), np.int8)
        kernel = kernel.reshape(const["shape"])[:, 0, 0, :]        # OHWI, 1x1
        # A permutation matrix: each output channel is 1 x exactly one input channel.
        assert sorted(np.unique(kernel).tolist()) == [0, 1]
        assert (kernel.sum(axis=0) == 1).all() and (kernel.sum(axis=1) == 1).all()
        assert not np.array_equal(kernel, np.eye(len(kernel), dtype=np.int8))


def _drop_pair(model: onnx.ModelProto, op_name: str) -> None:
    """Remove the QuantizeLinear -> DequantizeLinear pair after node ``op_name``: its consumer
    reads the op's float output directly."""
    graph = model.graph
    op = next(n for n in graph.node if n.name == op_name)
    q = next(n for n in graph.node if n.op_type == "QuantizeLinear" and n.input[0] == op.output[0])
    dq = next(n for n in graph.node
              if n.op_type == "DequantizeLinear" and n.input[0] == q.output[0])
    for node in graph.node:
        node.input[:] = [op.output[0] if i == dq.output[0] else i for i in node.input]
    graph.node.remove(q)
    graph.node.remove(dq)


def _shuffle_ops(model: onnx.ModelProto) -> List[str]:
    """The first shuffle's Reshape and Transpose names."""
    transpose = next(n for n in model.graph.node if n.op_type == "Transpose")
    split = next(n for n in model.graph.node if n.op_type == "Reshape")
    return [split.name, transpose.name]


@pytest.mark.parametrize("drop", [("split",), ("moved",), ("split", "moved")])
def test_fewer_qdq_pairs_in_the_shuffle_stay_one_exact_layer(unit, tmp_path, drop):
    _, qdq = unit
    model = onnx.load(qdq)
    split, transpose = _shuffle_ops(model)
    for which in drop:
        _drop_pair(model, split if which == "split" else transpose)
    onnx.checker.check_model(model)
    path = tmp_path / "fewer.onnx"
    onnx.save(model, path)
    result = mrvl_convert.convert(path, tmp_path / "out")
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"], _cpu(result)
    assert result.placement(transpose)["rule"] == RULE
    assert _differing(path, result.out_dir, inputs=6) == []


def test_a_shuffle_whose_scale_changes_is_refused_with_the_rules_reason(unit, tmp_path):
    """The pair after the first Reshape quantized at twice the scale: the values would be
    requantized, not copied, so the shuffle stays on CPU, named, with the rule's reason."""
    _, qdq = unit
    model = onnx.load(qdq)
    split, transpose = _shuffle_ops(model)
    reshape = next(n for n in model.graph.node if n.name == split)
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear"
             and n.input[0] == reshape.output[0])
    dq = next(n for n in model.graph.node if n.op_type == "DequantizeLinear"
              and n.input[0] == q.output[0])
    scale = next(numpy_helper.to_array(t) for t in model.graph.initializer
                 if t.name == q.input[1])
    model.graph.initializer.append(numpy_helper.from_array((scale * 2).astype(np.float32),
                                                           "doubled_scale"))
    q.input[1] = dq.input[1] = "doubled_scale"
    path = tmp_path / "rescaled.onnx"
    onnx.save(model, path)
    result = mrvl_convert.convert(path, tmp_path / "out")
    cpu = _cpu(result)
    assert transpose in cpu, cpu
    assert cpu[transpose].startswith(f"{RULE}: the shuffle would requantize its int8 values"), cpu
    assert q.name in cpu[transpose]
    shuffled = [n["name"] for n in result.report["nodes"] if n.get("rule") == RULE]
    assert transpose not in shuffled and len(shuffled) == 9   # the other shuffle's nine nodes
    assert _differing(path, result.out_dir, inputs=3) == []


def test_zoo_shufflenet_int8_fits_the_device(tmp_path):
    """The onnx zoo's ShuffleNet in int8, every shuffle once a CPU stage between two Mrvl ones
    (more models than the device has slots): one Mrvl subgraph, exact up to its Softmax head.
    That Softmax is an fp16 layer between quant layers (``int8_forms``), at most one output
    step from onnxruntime's float Softmax (docs/QUANTIZATION.md): onnxruntime 1.18 lands one
    step off on one of these inputs, newer versions on none."""
    result, qdq = converted_int8(corpus.zoo("shufflenet"), tmp_path / "out")
    summary = result.summary
    assert (summary["mrvl_subgraphs"], summary["cpu_subgraphs"]) == (1, 0), _cpu(result)
    assert result.report["device"]["fits"] is True, result.report["device"]["reasons"]
    assert "int8_forms" not in result.report or \
        {f["layer_name"] for f in result.report["int8_forms"]} == {"Softmax"}
    assert _steps_off(qdq, result.out_dir, inputs=20) <= 1.0 + 1e-6
