"""An fp16 layer of an int8 region that reads a dequantized tensor through a node that only
moves it (a Squeeze, a Transpose the converter absorbs) reads the float32 ``q * scale``
unrounded, as the simulator hands it on (the dequantizing quant layer is exact); verify's
reference must not round it there either (``verify/kept_fp16.py``, ``_moved``). madmom's key
CNN, quantized by our recipe with the QDQ pairs between its float ops dropped: Conv, Transpose,
Squeeze, its BatchNormalization as Mul and Add, Elu, all fp16 after the Conv; the reference
rounded the Squeeze's output to fp16 before the Mul, one fp16 step off on 40559 of 252000
values of the first Elu, and the artifact FAILed against its own QDQ model (max_rel 0.024 at
its output). Here the same forms, built small: the stage's fp16 result is bit-equal to the
reference's, for our recipe and for another quantizer's QDQ model."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import mrvl_convert
from mrvl_convert.verify.compare import compare
from mrvl_convert.verify.kept_fp16 import rounded_as_artifact
from support.foreign_qdq import foreign_quantized
from support.int8 import converted_int8
from support.models import Builder
from support.onnxref import run_model as run_ort

C, ROWS, COLS = 8, 12, 10


def key_cnn_like() -> onnx.ModelProto:
    """madmom's key CNN's first block: [frames, bins] padded, made NCHW by two Unsqueezes and
    a Transpose, Conv, back to [frames, bins, C] (Transpose, Squeeze), BatchNormalization as
    Mul and Add, Elu, Pad, then the next Conv."""
    b = Builder(3)
    ints = lambda *v: b.const(np.array(v, np.int64))  # noqa: E731
    y = b.op("Pad", [b.input("x", [ROWS, COLS]), ints(1, 1, 1, 1)])
    y = b.op("Unsqueeze", [b.op("Unsqueeze", [y, ints(-1)]), ints(0)])
    y = b.conv(b.op("Transpose", [y], perm=[0, 3, 1, 2]), 1, C)
    y = b.op("Squeeze", [b.op("Transpose", [y], perm=[0, 2, 3, 1]), ints(0)])
    y = b.op("Mul", [y, b.const((1 + 0.3 * b.rng.standard_normal(C)).astype(np.float32))])
    y = b.op("Add", [y, b.const((0.3 * b.rng.standard_normal(C)).astype(np.float32))])
    y = b.op("Pad", [b.op("Elu", [y]), ints(1, 1, 0, 1, 1, 0)])
    y = b.op("Transpose", [b.op("Unsqueeze", [y, ints(0)])], perm=[0, 3, 1, 2])
    return b.model([b.conv(y, C, C)])


def _feeds(count: int, seed: int):
    rng = np.random.default_rng(seed)
    return [{"x": rng.uniform(-1, 1, [ROWS, COLS]).astype(np.float32)} for _ in range(count)]


def _converted(how: str, folder: Path):
    model = key_cnn_like()
    if how == "ours":
        result, qdq = converted_int8(model, folder)
        return result, qdq
    given = foreign_quantized(model, per_channel=False, activation="QInt8", feeds=_feeds(8, 1))
    result = mrvl_convert.convert(given, folder)
    return result, folder / result.manifest["foreign_int8"]["file"]


@pytest.mark.parametrize("how", ["ours", "foreign"])
def test_an_fp16_layer_reads_the_moved_dequantized_tensor_unrounded(how, tmp_path) -> None:
    result, qdq = _converted(how, tmp_path / "a")
    kept = onnx.load(str(qdq))
    elu = next(n for n in kept.graph.node if n.op_type == "Elu")
    mul = next(n for n in kept.graph.node if n.op_type == "Mul")
    producers = {o: n.op_type for n in kept.graph.node for o in n.output}
    # the premise: the BN's Mul reads the Squeeze of a dequantized Conv, no pair between
    assert producers[mul.input[0]] == "Squeeze"
    rules = {e["name"]: e.get("rule") for e in result.placements}
    assert rules[elu.name] == "mrvl.elu" and rules[mul.name] == "mrvl.mul", rules
    session = mrvl_convert.HybridSession(result.out_dir)
    reference = onnx.load(str(qdq))
    assert rounded_as_artifact(reference, session)
    reference.graph.output.append(onnx.helper.make_empty_tensor_value_info(elu.output[0]))
    for feed in _feeds(3, seed=7):
        want = run_ort(reference, feed)[-1]
        got = np.asarray(_elu_output(session, feed, elu), np.float32).reshape(want.shape)
        assert np.array_equal(got, want), int(np.count_nonzero(got != want))
    verdict = compare(qdq, result.out_dir, _feeds(3, seed=7), with_floor=False)
    assert verdict.passed, verdict.summary_line()


def _elu_output(session: "mrvl_convert.HybridSession", feed, elu: onnx.NodeProto):
    """The Elu's result: a stage boundary where a CPU node follows it; inside the one Mrvl
    stage (its next Pad folded into the Conv, ``frontend/qdq_pads.py``) the Elu layer's own
    output, whose NHWC layout is the batchless ``[H, W, C]`` order."""
    tensors, layers = session.run_layers(feed)
    if elu.output[0] in tensors:
        return tensors[elu.output[0]]
    return next(layer.value for layer in layers if elu.name in layer.spec.source_nodes)
