"""``foreign_dynamic_ops.py`` on generated dynamic int8 Convs, fused MatMuls and LSTMs: the
rewritten model runs on onnxruntime within the module's bound of the model as given (half a
run-time step of the input per element, under one step of the product scale for the integer
bias), and exactly where the run-time quantization rounds nothing (an input on its grid)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given

from mrvl_convert.frontend.foreign_int8 import bring_foreign_int8
from support.dynamic_int8 import dynamic, dynamic_step, on_grid
from support.strategies.dynamic_int8 import conv_integer_chains, float_lstms, fused_matmuls

pytestmark = pytest.mark.system


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@given(conv_integer_chains())
def test_a_conv_integer_chain_moves_by_half_a_run_time_step_of_its_input(case):
    model, weight, w_step, integer_bias = case
    rewritten, done = bring_foreign_int8(model)
    assert done is not None and done.dynamic_convs == 1
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    window = np.abs(weight).reshape(weight.shape[0], -1).sum(axis=1).reshape(1, -1, 1, 1)
    rng = np.random.default_rng(0)
    for x, exact in ((on_grid(rng, shape), True),
                     ((3 * rng.standard_normal(shape)).astype(np.float32), False)):
        want, got = _run(model, x), _run(rewritten, x)
        step = dynamic_step(x)
        bound = (step * w_step if integer_bias else 0.0) + 1e-5 * np.abs(want).max() + (
            0.0 if exact else step / 2 * window)
        assert want.shape == got.shape and np.all(np.abs(want - got) <= bound)


@given(float_lstms())
def test_a_dynamic_lstm_step_on_its_input_grid_is_the_float_lstm(case):
    model, per_channel = case
    with tempfile.TemporaryDirectory() as tmp:
        given_model = dynamic(Path(tmp), model, "lstm", per_channel=per_channel)
    rewritten, done = bring_foreign_int8(given_model)
    assert done is not None and done.dynamic_lstms == 1
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = on_grid(np.random.default_rng(0), shape)
    want, got = _run(given_model, x), _run(rewritten, x)
    assert want.shape == got.shape and np.abs(want - got).max() <= 1e-5


@given(fused_matmuls())
def test_a_fused_dynamic_matmul_moves_by_half_a_run_time_step_of_its_input(case):
    model, weight = case
    rewritten, done = bring_foreign_int8(model)
    assert done is not None and done.dynamic == 1
    column = np.abs(weight).sum(axis=0)
    rng = np.random.default_rng(0)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    for x, exact in ((on_grid(rng, shape), True),
                     ((3 * rng.standard_normal(shape)).astype(np.float32), False)):
        want, got = _run(model, x), _run(rewritten, x)
        bound = 1e-5 * np.abs(want).max() + (0.0 if exact else dynamic_step(x) / 2 * column)
        assert want.shape == got.shape and np.all(np.abs(want - got) <= bound)
