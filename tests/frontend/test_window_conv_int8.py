"""Windows of frames read by an FC in int8 (madmom's onsets_cnn quantized by our recipe): the
Q/DQ pairs after each Slice, Unsqueeze, Concat and Flatten, read through as the fp16 rewrite
reads the windows (``frontend/window_conv.py``, ``window_pairs.py``). On main the stacking
Concat stayed on CPU at batch T ("concatenates batch 1 only; this batch is 32"): 2 Mrvl
subgraphs, fits no, where fp16 is 1."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import numpy_helper

import mrvl_convert
from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.qdq import dedicate_dequantize
from mrvl_convert.frontend.window_conv import rewrite_window_convs
from mrvl_convert.quantize import Quantization
from support.models import run_ort
from support.strategies.seqaxis import sequence_from_spec

_FRAMES, _BINS = 40, 6


def _windows(**changes) -> onnx.ModelProto:
    spec = {"seed": 5, "frames": _FRAMES, "bins": _BINS, "channels": 8, "windows": 7,
            "dilation": 1, "stack_axis": 1, "per_frame": [], "mean": False, **changes}
    return sequence_from_spec(spec).model


def _int8(model: onnx.ModelProto, out):
    rng = np.random.default_rng(1)
    calibration = {"x": rng.standard_normal((8, _FRAMES, _BINS)).astype(np.float32)}
    return mrvl_convert.convert(model, out, shapes={"x": [_FRAMES, _BINS]},
                                quantize=Quantization(calibration))


def _feeds(count: int = 3):
    rng = np.random.default_rng(2)
    return [{"x": rng.standard_normal((_FRAMES, _BINS)).astype(np.float32)}
            for _ in range(count)]


@pytest.mark.parametrize("changes", [{}, {"stack_axis": 2, "dilation": 2},
                                     {"per_frame": ["elu"], "windows": 3}])
def test_int8_windows_of_frames_are_one_int8_conv_whole_and_bit_equal(tmp_path, changes):
    result = _int8(_windows(**changes), tmp_path / "int8")
    cpu = [(n["name"], n.get("reason")) for n in result.report["nodes"]
           if n["placement"] == "cpu"]
    assert cpu == [] and result.summary["mrvl_subgraphs"] == 1, (result.summary, cpu)
    assert result.report["device"]["fits"] is True, result.report["device"]["reasons"]
    assert result.report["precision"]["shares"]["int8"] == 1.0
    fc = next(n for n in result.report["nodes"] if n["name"] == "window_fc")
    assert fc["rule"] == "mrvl.qnn_conv2d" and "a Conv along the frames" in fc["canonical"]
    qdq = result.out_dir / result.manifest["quantization"]["file"]
    comparison = mrvl_convert.compare(qdq, result.out_dir, _feeds(), with_floor=False)
    assert comparison.passed, comparison.summary_line()
    assert all(row.max_abs == 0 for row in comparison.judged_rows), comparison.summary_line()


def _qdq(tmp_path) -> onnx.ModelProto:
    result = _int8(_windows(), tmp_path / "int8")
    qdq = onnx.load(str(result.out_dir / result.manifest["quantization"]["file"]))
    return onnx.shape_inference.infer_shapes(qdq)


def _rewritten(qdq: onnx.ModelProto):
    graph = gs.import_onnx(qdq)
    dedicate_dequantize(graph)
    done = Rewrites()
    changed = rewrite_window_convs(graph, 13, done)
    after = gs.export_onnx(graph.cleanup().toposort(), do_type_check=False)
    after.ir_version = qdq.ir_version
    return changed, done, after


def _output_step(qdq: onnx.ModelProto) -> float:
    inits = {i.name: numpy_helper.to_array(i) for i in qdq.graph.initializer}
    node = next(n for n in qdq.graph.node if n.output[0] == qdq.graph.output[0].name)
    return float(inits[node.input[1]])


def test_the_int8_rewrite_computes_what_the_qdq_model_did(tmp_path):
    """onnxruntime on the QDQ model before and after: the Conv sums the MatMul's products in
    another order (within 2 (n - 1) u sum |x B|, far below one int8 step), so every output is
    the QDQ model's, at most one step off where a sum sits on a rounding boundary."""
    qdq = _qdq(tmp_path)
    changed, done, after = _rewritten(qdq)
    assert changed and "a Conv along the frames" in done.rewritten["window_fc"]
    assert not [n for n in after.graph.node if n.op_type in ("Concat", "Slice")
                or n.name == "window_fc" and n.op_type == "MatMul"]
    conv = next(n for n in after.graph.node if n.op_type == "Conv")
    weight = next(n for n in after.graph.node if n.output[0] == conv.input[1])
    assert weight.op_type == "DequantizeLinear"  # the int8 matrix, rearranged
    step, name = _output_step(qdq), qdq.graph.output[0].name
    same = 0
    for feed in _feeds(4):
        got = run_ort(after, feed, optimize=False)[name]
        want = run_ort(qdq, feed, optimize=False)[name]
        assert np.abs(got - want).max() <= step * 1.0001
        same += int(np.array_equal(got, want))
    assert same >= 3


def test_windows_of_different_scales_are_left_as_they_are(tmp_path):
    """One window quantized at its own scale: the Conv could not read the frames through one
    function of each element, so nothing is rewritten."""
    qdq = _qdq(tmp_path)
    node = next(n for n in qdq.graph.node if n.name == "win3_stack_out_QuantizeLinear")
    scale = next(i for i in qdq.graph.initializer if i.name == node.input[1])
    other = numpy_helper.from_array(numpy_helper.to_array(scale) * 2, "win3_own_scale")
    qdq.graph.initializer.append(other)
    for n in qdq.graph.node:
        if n.name in ("win3_stack_out_QuantizeLinear", "win3_stack_out_DequantizeLinear"):
            n.input[1] = "win3_own_scale"
    changed, _, _ = _rewritten(qdq)
    assert not changed
