"""frontend/residual_range.py: a T5-like pre-norm residual stream that itself passes fp16's 65504
scaled by 2**-k as a whole (root, branches, every norm's eps): bit-equal on onnxruntime, and its
fp16 artifact right where, unscaled, it overflows (on main: a range error, and scaling the norms
alone cannot help, the stream itself is beyond fp16)."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import onnxruntime as ort
import pytest

from mrvl_convert import convert
from mrvl_convert.errors import MrvlConvertError
from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.norm_range import scale_norms
from mrvl_convert.frontend.residual_range import STREAM_HEADROOM
from mrvl_convert.runtime.session import HybridSession
from mrvl_convert.verify.compare import compare
from mrvl_convert.verify.norm_scales import norm_scales
from support.norm_models import stream_model

NORMS = [f"norm{i}/ReduceMean" for i in range(4)]


def _feeds(count: int = 3):
    return [{"x": np.random.default_rng(s).standard_normal((1, 8, 16)).astype(np.float32)}
            for s in range(count)]


def _run(model: onnx.ModelProto, feed):
    return ort.InferenceSession(model.SerializeToString()).run(None, feed)


def _scaled(model: onnx.ModelProto, scales):
    graph = gs.import_onnx(model)
    done = Rewrites()
    scale_norms(graph, scales, done)
    return gs.export_onnx(graph.cleanup().toposort()), done


@pytest.mark.parametrize("k", [1, 5, 12])
def test_the_scaled_stream_is_bit_equal(k):
    """One norm named with k + 7: its whole stream scales by 2**-k (STREAM_HEADROOM 7 less),
    that norm by 2**-7 more."""
    model = stream_model()
    scaled, done = _scaled(model, {NORMS[0]: k + STREAM_HEADROOM})
    assert all("residual stream scaled by 2**-" + str(k) in done.rewritten[n] for n in NORMS)
    assert "then its norm input scaled by 2**-7 " in done.rewritten[NORMS[0]]
    assert "then" not in done.rewritten[NORMS[1]]
    assert sum("_stream_scale" in name for name in done.derived) == 4  # root, three branches
    for feed in _feeds():
        for got, want in zip(_run(scaled, feed), _run(model, feed)):
            np.testing.assert_array_equal(got, want)


def test_the_stream_takes_the_largest_k_of_its_norms_less_the_headroom():
    _, done = _scaled(stream_model(), {NORMS[0]: 4, NORMS[2]: 9})
    assert all("residual stream scaled by 2**-2 " in done.rewritten[n] for n in NORMS)
    assert "then its norm input scaled by 2**-2 " in done.rewritten[NORMS[0]]
    assert "then its norm input scaled by 2**-7 " in done.rewritten[NORMS[2]]


def test_a_stream_within_the_headroom_is_not_scaled_its_norms_are():
    scaled, done = _scaled(stream_model(), {NORMS[1]: 5})
    assert list(done.rewritten) == [NORMS[1]]
    assert done.rewritten[NORMS[1]].startswith("norm input scaled by 2**-5 ")
    for feed in _feeds(1):
        for got, want in zip(_run(scaled, feed), _run(stream_model(), feed)):
            np.testing.assert_array_equal(got, want)


def test_a_stream_read_elsewhere_scales_its_norms_alone():
    model = stream_model()
    model.graph.node.append(onnx.helper.make_node("Relu", ["res0"], ["side"], name="side"))
    model.graph.output.append(onnx.helper.make_tensor_value_info("side", 1, [1, 8, 16]))
    scaled, done = _scaled(model, {n: 10 for n in NORMS})
    assert all("frontend/norm_range.py" in done.rewritten[n] for n in NORMS)
    for feed in _feeds(1):
        for got, want in zip(_run(scaled, feed), _run(model, feed)):
            np.testing.assert_array_equal(got, want)


def test_fp16_artifact_of_an_overflowing_stream(tmp_path):
    path = tmp_path / "stream.onnx"
    onnx.save(stream_model(), path)
    feeds = _feeds()
    convert(path, tmp_path / "plain")
    with pytest.raises(MrvlConvertError, match="overflows float16"):
        for feed in feeds:
            HybridSession(tmp_path / "plain").run(None, feed)
    scales = norm_scales(path, feeds)
    assert set(scales) >= {NORMS[2], NORMS[3]}
    result = convert(path, tmp_path / "scaled", norm_scales=scales)
    assert result.report["summary"]["mrvl_subgraphs"] == 1
    session = HybridSession(tmp_path / "scaled")
    for feed in feeds:
        want = _run(stream_model(), feed)[0]
        got = session.run(None, feed)[0]
        assert np.abs(got - want).max() < 0.01 * np.abs(want).max()
    check = compare(path, tmp_path / "scaled", feeds)
    assert check.passed and not check.overflow, check.summary_line()


def test_fc_outputs_beyond_fp16_are_scaled_at_their_inputs(tmp_path):
    """The root FC and a branch FC themselves pass 65504 (75571, 72127 on these inputs): their
    activation inputs are scaled, so their outputs are computed in range."""
    model = stream_model(branch_scale=22000.0)
    path = tmp_path / "stream.onnx"
    onnx.save(model, path)
    feeds = _feeds()
    scales = norm_scales(path, feeds)
    scaled, _ = _scaled(model, scales)
    fcs = [n for n in scaled.graph.node if n.op_type == "MatMul"]
    assert all("_stream_scaled" in n.input[0] for n in fcs), [n.input[0] for n in fcs]
    for feed in feeds:
        for got, want in zip(_run(scaled, feed), _run(model, feed)):
            np.testing.assert_array_equal(got, want)
    convert(path, tmp_path / "art", norm_scales=scales)
    check = compare(path, tmp_path / "art", feeds)
    assert check.passed and not check.overflow, check.summary_line()


def _as_exported(model: onnx.ModelProto) -> onnx.ModelProto:
    """The stream as T5's export writes it: eps a Constant node, each norm reading the stream
    through a Cast to float32, the branches ending in a Mul of two activations (a dynamic int8
    MatMul's dequantizing product)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    eps = next(t for t in model.graph.initializer if t.name == "eps")
    model.graph.initializer.remove(eps)
    nodes = [onnx.helper.make_node("Constant", [], ["eps"], value=eps)]
    for node in model.graph.node:
        if node.op_type == "Pow":  # norm i reads Cast(x): its square and its product
            x, cast = node.input[0], f"{node.name}_cast"
            nodes.append(onnx.helper.make_node("Cast", [x], [cast], to=1, name=cast))
            product = next(n for n in model.graph.node if n.op_type == "Mul"
                           and n.name == node.name.replace("Pow", "Mul"))
            node.input[0] = cast
            product.input[0] = cast
        if node.op_type == "MatMul" and node.name.startswith("fc") and node.name != "fc_in":
            out = node.output[0]
            node.output[0] = f"{out}_raw"
            nodes.append(node)
            nodes.append(onnx.helper.make_node("Mul", [f"{out}_raw", "one"], [out],
                                               name=f"{node.name}_dequantize"))
            continue
        nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def test_the_exported_spelling_is_scaled_alike_and_bit_equal():
    """verify scales its reference (the model as given) as the artifact was scaled
    (verify/norm_scales.py scaled_like): Constant-node eps, float Casts, Mul-ended branches."""
    from mrvl_convert.verify.norm_scales import scaled_like

    model = _as_exported(stream_model())
    scaled = scaled_like(model, {"options": {"norm_scales": {NORMS[0]: 12}}})
    assert any("_stream_scale" in n.name for n in scaled.graph.node)
    for feed in _feeds():
        for got, want in zip(_run(scaled, feed), _run(model, feed)):
            np.testing.assert_array_equal(got, want)
    assert scaled_like(model, {"options": {}}) is model
