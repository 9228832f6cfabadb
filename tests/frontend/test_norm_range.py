"""frontend/norm_range.py: a norm's input scaled by 2**-k, bit-equal on onnxruntime, and the fp16
artifact of a norm whose squares overflow fp16 right with it (a range error without)."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import onnxruntime as ort
import pytest

from mrvl_convert import convert
from mrvl_convert.errors import MrvlConvertError, OptionError
from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.norm_range import scale_norms
from mrvl_convert.frontend.rsqrt_forms import rewrite_rsqrt_forms
from mrvl_convert.options import ConvertOptions
from mrvl_convert.runtime.session import HybridSession
from support.norm_models import FORMS, NORM, norm_model


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _scaled(model: onnx.ModelProto, k: int, rsqrt_first: bool = False):
    graph = gs.import_onnx(model)
    done = Rewrites()
    if rsqrt_first:  # as canonicalize runs them: Pow -> Mul(x, x), Div(1, .) -> Reciprocal
        rewrite_rsqrt_forms(graph, done)
    scale_norms(graph, {NORM: k}, done)
    graph.cleanup().toposort()
    return gs.export_onnx(graph), done


def _inputs():
    rng = np.random.default_rng(7)
    return [(rng.standard_normal((1, 8, 16)) * scale).astype(np.float32)
            for scale in (1.0, 1e-3, 1e3, 3e-8)]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("k", [1, 6, 20])
@pytest.mark.parametrize("rsqrt_first", [False, True])
def test_scaled_norm_is_bit_equal_on_onnxruntime(form, k, rsqrt_first):
    model = norm_model(form)
    scaled, done = _scaled(model, k, rsqrt_first)
    assert NORM in done.rewritten and f"2**-{k}" in done.rewritten[NORM]
    assert any(n.op_type == "Mul" and n.name.startswith(f"{NORM}_range_scale")
               for n in scaled.graph.node)
    for x in _inputs():
        before, after = _run(model, x), _run(scaled, x)
        np.testing.assert_array_equal(after, before)


def test_the_scaled_square_stays_small():
    """What the rewrite is for: the square's float32 values shrink by 4**-k."""
    model, x = norm_model("t5"), _inputs()[0]
    scaled, _ = _scaled(model, 6)
    square = next(n.output[0] for n in scaled.graph.node if n.op_type == "Pow")
    peaks = []
    for m, name in ((model, "sq"), (scaled, square)):
        m = onnx.ModelProto.FromString(m.SerializeToString())
        m.graph.output.append(onnx.helper.make_tensor_value_info(name, 1, None))
        peaks.append(float(np.abs(ort.InferenceSession(m.SerializeToString()).run(
            [name], {"x": x})[0]).max()))
    assert peaks[0] > 65504 and peaks[1] == peaks[0] / 4 ** 6


def test_a_root_read_elsewhere_is_left_with_its_reason():
    model = norm_model("t5")
    model.graph.output.append(onnx.helper.make_tensor_value_info("q", 1, [1, 8, 1]))
    scaled, done = _scaled(model, 6)
    assert NORM not in done.rewritten
    assert "a value inside it is a model output" in done.kept[NORM]
    x = _inputs()[0]
    np.testing.assert_array_equal(_run(scaled, x), _run(model, x))


def test_an_unknown_norm_name_is_kept_with_its_reason():
    _, done = _scaled(norm_model("t5"), 6)
    graph = gs.import_onnx(norm_model("t5"))
    scale_norms(graph, {"no/such": 3}, done)
    assert "no such node" in done.kept["no/such"]


@pytest.mark.parametrize("form", ["t5", "layernorm"])
def test_fp16_artifact_overflows_without_and_is_right_with_the_scale(tmp_path, form):
    path = tmp_path / "norm.onnx"
    onnx.save(norm_model(form), path)
    x = _inputs()[0]
    want = _run(norm_model(form), x)
    convert(path, tmp_path / "plain")
    with pytest.raises(MrvlConvertError, match="overflows float16"):
        HybridSession(tmp_path / "plain").run(None, {"x": x})
    result = convert(path, tmp_path / "scaled", norm_scales={NORM: 6})
    said = next(e for e in result.report["nodes"] if e["name"] == NORM)
    assert "scaled by 2**-6" in said["canonical"]
    assert result.report["summary"]["mrvl_subgraphs"] == 1
    assert result.report["summary"]["cpu_subgraphs"] == 0
    got = HybridSession(tmp_path / "scaled").run(None, {"x": x})[0]
    # fp16 rounding of every layer only: well under 1% of the output's peak
    assert np.abs(got - want).max() < 0.01 * np.abs(want).max()


@pytest.mark.parametrize("bad", [{"n": 0}, {"n": 101}, {"n": 1.5}, {3: 2}, ["n"]])
def test_norm_scales_option_is_checked(bad):
    with pytest.raises(OptionError, match="norm_scales"):
        ConvertOptions(norm_scales=bad)


def test_a_centred_input_read_elsewhere_is_left_with_its_reason():
    """A LayerNorm is scaled through its x, so d = x - mean(x) scales too: not when another
    node reads d."""
    model = norm_model("layernorm")
    model.graph.node.append(onnx.helper.make_node("Relu", ["d"], ["dr"], name="other"))
    model.graph.output.append(onnx.helper.make_tensor_value_info("dr", 1, [1, 8, 16]))
    scaled, done = _scaled(model, 6)
    assert "centred input has other readers" in done.kept[NORM]
    x = _inputs()[0]
    for a, b in zip(ort.InferenceSession(scaled.SerializeToString()).run(None, {"x": x}),
                    ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})):
        np.testing.assert_array_equal(a, b)
