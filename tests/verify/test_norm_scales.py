"""verify/norm_scales.py: k from the float32 peak of each norm's input over the samples."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from mrvl_convert.verify.norm_scales import TARGET_PEAK, exponent, norm_scales
from support.norm_models import FORMS, NORM, norm_model


@pytest.mark.parametrize("peak, k", [(0.0, 0), (64.0, 0), (64.001, 1), (128.0, 1), (128.5, 2),
                                     (4500.0, 7), (float("inf"), 0), (float("nan"), 0)])
def test_exponent_is_the_smallest_power_that_brings_the_peak_to_64(peak, k):
    assert exponent(peak) == k


def _peak(model: onnx.ModelProto, tensor: str, feeds) -> float:
    model = onnx.ModelProto.FromString(model.SerializeToString())
    model.graph.output.append(onnx.helper.make_tensor_value_info(tensor, 1, None))
    session = ort.InferenceSession(model.SerializeToString())
    return max(float(np.abs(session.run([tensor], f)[0]).max()) for f in feeds)


@pytest.mark.parametrize("form", FORMS)
def test_chosen_from_the_norm_inputs_peak(form):
    model = norm_model(form)
    rng = np.random.default_rng(3)
    feeds = [{"x": rng.standard_normal((1, 8, 16)).astype(np.float32)} for _ in range(3)]
    scales = norm_scales(model, feeds)
    peak = _peak(model, "d" if form == "layernorm" else "h", feeds)
    k = scales[NORM]
    assert TARGET_PEAK / 2 < peak * 2.0 ** -k <= TARGET_PEAK


def test_no_scale_where_the_squares_stay_small():
    model = norm_model("t5", weight_scale=0.5)
    feeds = [{"x": np.ones((1, 8, 16), np.float32)}]
    assert norm_scales(model, feeds) == {} and norm_scales(model, []) == {}


def test_an_exponent_written_as_a_constant_node_is_found():
    """Exporters (T5's) write Pow's 2 as a Constant node, not an initializer: on main's first
    version of the chooser no norm of the T5 encoder was found."""
    model = norm_model("t5")
    two = next(t for t in model.graph.initializer if t.name == "two")
    model.graph.initializer.remove(two)
    model.graph.node.insert(0, onnx.helper.make_node("Constant", [], ["two"], value=two))
    feeds = [{"x": np.random.default_rng(4).standard_normal((1, 8, 16)).astype(np.float32)}]
    assert list(norm_scales(model, feeds)) == [NORM]
