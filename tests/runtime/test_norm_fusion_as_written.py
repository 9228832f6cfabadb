"""A norm (or a Gelu) runs as its nodes are written on every session the library opens for a QDQ model
(CPU stages and the verify reference): onnxruntime's norm fusions (``NORM_FUSIONS``) put
``Pow, ReduceMean, Add, Sqrt, Div, Mul`` into one kernel that multiplies by a reciprocal, 1
float32 ulp off the Div. The reference saw the whole pattern and fused it, a CPU stage holding
the tail of a norm cut after its mean (and its Pow written as a Mul) did not: g2p-id's tiny-pron
int8 artifact was 5% of peak off its own QDQ model at its first decode step's logits, where a
QuantizeLinear after such a norm turned the ulp into an int8 step (issue 45)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import mrvl_convert
from mrvl_convert.quantize import Quantization
from mrvl_convert.runtime.options import cpu_session_options, ort_options, qdq_as_written
from support.models import Builder, run_ort

D = 128  # the width normalised


def _norm(b: Builder, x: str, centred: bool) -> str:
    """A LayerNorm as PyTorch traces it (``centred``), else an RMS norm: written out."""
    if centred:
        x = b.op("Sub", [x, b.op("ReduceMean", [x], axes=[-1])])
    power = b.op("Pow", [x, b.const(np.array(2.0, np.float32))])
    var = b.op("Add", [b.op("ReduceMean", [power], axes=[-1]),
                       b.const(np.array(1e-5, np.float32))])
    scaled = b.op("Mul", [b.op("Div", [x, b.op("Sqrt", [var])]),
                          b.const(b.rng.uniform(0.5, 1.5, D).astype(np.float32))])
    return b.op("Add", [scaled, b.const(b.rng.uniform(-0.5, 0.5, D).astype(np.float32))])


def _gelu(b: Builder, x: str) -> str:
    """An erf Gelu written out, as PyTorch traces ``nn.GELU``."""
    erf = b.op("Erf", [b.op("Div", [x, b.const(np.array(2 ** 0.5, np.float32))])])
    gated = b.op("Mul", [x, b.op("Add", [erf, b.const(np.array(1.0, np.float32))])])
    return b.op("Mul", [gated, b.const(np.array(0.5, np.float32))])


def _written_form(form: str) -> onnx.ModelProto:
    b = Builder(seed=1, opset=13)
    x = b.input("x", [64, D])
    return b.model([_gelu(b, x) if form == "gelu" else _norm(b, x, form == "layer_norm")])


@pytest.mark.parametrize("form", ["layer_norm", "rms_norm", "gelu"])
def test_a_norm_or_gelu_runs_as_its_nodes_are_written(form: str):
    model = _written_form(form)
    x = (np.random.default_rng(0).standard_normal((64, D)) * 3).astype(np.float32)
    want = next(iter(run_ort(model, {"x": x}, optimize=False).values()))  # as written
    for options in (qdq_as_written(ort_options()), cpu_session_options(1)):
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        assert np.array_equal(session.run(None, {"x": x})[0], want)


def _cut_norm() -> onnx.ModelProto:
    """tiny-pron's encoder form: ``[1, T, D]`` swapped to ``[T, 1, D]``, a LayerNorm whose
    tail the partition leaves on the CPU (batch T), then a quantized feed-forward block."""
    b = Builder(seed=5, opset=13)
    y = _norm(b, b.op("Transpose", [b.input("x", [1, 28, D])], perm=[1, 0, 2]), True)
    return b.model([b.matmul_add(b.op("Relu", [b.matmul_add(y, D, 2 * D)]), 2 * D, D)])


def test_an_int8_norm_tail_on_the_cpu_is_bit_equal_to_its_qdq_model(tmp_path: Path):
    rng = np.random.default_rng(0)
    calibration = {"x": rng.standard_normal((16, 28, D)).astype(np.float32)}
    result = mrvl_convert.convert(_cut_norm(), tmp_path / "o",
                                  quantize=Quantization(calibration))
    assert result.summary["cpu_subgraphs"] >= 1  # the norm's tail runs in onnxruntime
    qdq = result.out_dir / result.manifest["quantization"]["file"]
    feeds = [{"x": rng.standard_normal((1, 28, D)).astype(np.float32)} for _ in range(4)]
    comparison = mrvl_convert.compare(qdq, result.out_dir, feeds)
    assert comparison.passed
    # every tensor compared, the boundary after the norm's tail too, bit-equal
    assert {row.tensor: row.max_abs for row in comparison.rows if row.max_abs} == {}
