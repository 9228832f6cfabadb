"""frontend/norm_pools.py: tf2onnx's Keras LayerNormalization with GlobalAveragePool moments
(g2p-id's bert_pron) takes the LayerNorm form, within the stated bound on onnxruntime, and a
BERT block with it is whole on the accelerator."""
from __future__ import annotations

import numpy as np
import onnx

import mrvl_convert
from mrvl_convert.frontend.canonicalize import canonicalize
from mrvl_convert.frontend.load import load_model
from support.models import Builder, canonicalized, run_ort
from support.tf_bert import bert_layer, layer_norm_only

U = 2.0 ** -24


def feed(seed: int, shape=(1, 6, 8)):
    rng = np.random.default_rng(seed)
    return {"x": (rng.standard_normal(shape) * 4 + 2).astype(np.float32)}


def test_the_moments_are_reduce_means_and_gamma_scales_the_normalised_tensor():
    canonical = canonicalize(load_model(layer_norm_only()))
    ops = [n.op for n in canonical.graph.nodes]
    assert "GlobalAveragePool" not in ops and ops.count("ReduceMean") == 2
    means = [n for n in canonical.graph.nodes if n.op == "ReduceMean"]
    assert all("GlobalAveragePool" in canonical.rewritten[n.name] for n in means)
    # tf's r * gamma, an outer product of a statistic and a weight, is gone: r scales x - m
    r, = [n.outputs[0] for n in canonical.graph.nodes if n.op == "Reciprocal"]
    assert [(m.op, m.inputs[0].inputs[0].op) for m in r.outputs] == [("Mul", "Sub")]


def stats_model(shape) -> onnx.ModelProto:
    """A norm's mean (a Sub reads it) and variance as GlobalAveragePool, both model outputs."""
    b = Builder(opset=13)
    x = b.input("x", shape)
    mean = b.op("GlobalAveragePool", [x])
    d = b.op("Sub", [x, mean])
    square = b.op("Mul", [d, d])
    return b.model([mean, b.op("GlobalAveragePool", [square]), square])


def test_the_statistics_are_within_the_bound():
    n = 200
    model = stats_model([1, 7, n])
    canonical, proto = canonicalized(model)
    assert [n.op for n in canonical.graph.nodes].count("ReduceMean") == 2
    for seed in range(5):
        x = feed(seed, (1, 7, n))
        want, got = run_ort(model, x), run_ort(proto, x)
        square = want[model.graph.output[2].name]
        for out, values in zip(model.graph.output[:2], (x["x"], square)):
            bound = 2 * n * U * np.abs(values).mean(axis=-1, keepdims=True)
            assert np.all(np.abs(got[out.name] - want[out.name]) <= bound), out.name


def test_a_plain_global_average_pool_of_3d_stays():
    b = Builder(opset=13)
    model = b.model([b.op("GlobalAveragePool", [b.op("Relu", [b.input("x", [1, 4, 6])])])])
    canonical = canonicalize(load_model(model))
    assert not any("norm_pools" in why for why in canonical.rewritten.values())
    x = feed(0, (1, 4, 6))
    want, got = run_ort(model, x), run_ort(canonicalized(model)[1], x)
    assert all(np.array_equal(got[k], v) for k, v in want.items())


def test_a_tf2onnx_bert_block_is_one_mrvl_subgraph_with_its_outputs(tmp_path):
    model = bert_layer()
    result = mrvl_convert.convert(model, tmp_path / "o")
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
    assert mrvl_convert.compare(model, result.out_dir, [feed(k) for k in range(2)]).passed
