"""After ``--equalize`` the analysis compares each layer with the float tensor it stands for:
cross-layer equalization scales the channels between a pair (the first Conv's output divided
by s, the second's input weights multiplied by it), so the float model as given no longer has
the layer's scale there, and the equalized form gives every reference."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

import mrvl_convert
from mrvl_convert.quantize.recipe import Quantization, quantized_float_form
from mrvl_convert.verify.metrics import Sums, snr_db

from support.rewrites import equalizable_chain

THRESHOLD = 20.0


def _x(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, 1, 3, 8, 8)).astype(np.float32)


def _tensor(model, name: str, x: np.ndarray) -> np.ndarray:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    copy.graph.output.add().name = name
    model = copy
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run([name], {"x": x})[0]


def test_an_equalized_pair_is_compared_at_its_own_scale(tmp_path):
    model = equalizable_chain("Relu")
    mrvl_convert.convert(model, tmp_path / "out", name="m",
                         quantize=Quantization({"x": _x(16, 1)[:, 0]}, equalize=True))
    x = _x(1, 2)[0]
    # The pair's middle tensor differs between the model and its equalized form: the old
    # reference would have been far off.
    given, form = _tensor(model, "c1", x), _tensor(quantized_float_form(model, equalize=True),
                                                   "c1", x)
    sums = Sums()
    sums.add(form, given)
    assert snr_db(sums) < THRESHOLD
    analysis = mrvl_convert.analyze_quantization(model, tmp_path / "out",
                                                 [{"x": s} for s in _x(4, 3)],
                                                 threshold_db=THRESHOLD)
    row = analysis.row_for("conv1")
    assert row is not None and row.snr_db > THRESHOLD, row
    assert not analysis.below_isolated, [r.layer for r in analysis.below_isolated]
