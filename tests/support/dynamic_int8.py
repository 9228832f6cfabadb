"""Small models in onnxruntime's dynamic int8 forms (``quantize_dynamic``), for the tests of
``frontend/foreign_dynamic_ops.py``: ConvInteger chains built by hand (per-channel scales and
zero points, onnxruntime 1.8's run-time quantized bias, which today's quantize_dynamic no
longer writes), and LSTMs quantize_dynamic makes DynamicQuantizeLSTMs."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def conv_integer_model(weight: np.ndarray, w_zero: np.ndarray, w_scale: np.ndarray,
                       bias: Optional[np.ndarray] = None, *, integer_bias: bool = False,
                       size: int = 6, pads: Sequence[int] = (1, 1, 1, 1),
                       strides: Sequence[int] = (1, 1)) -> onnx.ModelProto:
    """x[1, C, size, size] -> DynamicQuantizeLinear -> ConvInteger(uint8 ``weight``, its zero
    point: scalar or [M]) -> Cast -> Mul(x_scale * ``w_scale``: scalar or [M], broadcast as
    [1, M, 1, 1]); ``bias`` added as a float after (today's form) or, ``integer_bias``, as
    onnxruntime 1.8 did: ``floor(bias / (x_scale * w_scale))`` in int32 added to the
    accumulator before the Cast."""
    channels, inputs = weight.shape[0], weight.shape[1]
    per_channel = np.asarray(w_scale).size > 1
    inits = [numpy_helper.from_array(weight.astype(np.uint8), "w_q"),
             numpy_helper.from_array(np.asarray(w_zero, np.uint8), "w_zero"),
             numpy_helper.from_array(np.asarray(w_scale, np.float32), "w_scale"),
             numpy_helper.from_array(np.asarray(w_scale, np.float32).reshape(
                 (1, channels, 1, 1) if per_channel else ()), "w_scale_out"),
             numpy_helper.from_array(np.array([1, -1, 1, 1], np.int64), "bias_shape")]
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["x_q", "x_scale", "x_zero"],
                              name="x_quantize"),
             helper.make_node("ConvInteger", ["x_q", "w_q", "x_zero", "w_zero"], ["acc"],
                              name="conv_integer", kernel_shape=list(weight.shape[2:]),
                              pads=list(pads), strides=list(strides)),
             helper.make_node("Mul", ["x_scale", "w_scale_out"], ["scales"], name="scales")]
    accumulator = "acc"
    if bias is not None:
        inits.append(numpy_helper.from_array(np.asarray(bias, np.float32), "bias"))
    if bias is not None and integer_bias:
        nodes += [helper.make_node("Mul", ["x_scale", "w_scale"], ["b_scale"], name="b_scale"),
                  helper.make_node("Div", ["bias", "b_scale"], ["b_div"], name="b_div"),
                  helper.make_node("Floor", ["b_div"], ["b_floor"], name="b_floor"),
                  helper.make_node("Cast", ["b_floor"], ["b_int"], name="b_cast",
                                   to=TensorProto.INT32),
                  helper.make_node("Reshape", ["b_int", "bias_shape"], ["b_q"], name="b_shape"),
                  helper.make_node("Add", ["acc", "b_q"], ["acc_b"], name="b_add")]
        accumulator = "acc_b"
    nodes += [helper.make_node("Cast", [accumulator], ["acc_f"], name="acc_cast",
                               to=TensorProto.FLOAT),
              helper.make_node("Mul", ["acc_f", "scales"], ["y" if bias is None or integer_bias
                                                            else "y0"], name="output_scale")]
    if bias is not None and not integer_bias:
        nodes += [helper.make_node("Reshape", ["bias", "bias_shape"], ["b_r"], name="b_r"),
                  helper.make_node("Add", ["y0", "b_r"], ["y"], name="bias_add")]
    graph = helper.make_graph(
        nodes, "conv_integer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, inputs, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def float_lstm(seed: int, steps: int, inputs: int, hidden: int,
               direction: str = "forward", batch: int = 1) -> onnx.ModelProto:
    """x[steps, batch, inputs] -> LSTM (with bias) -> Y, Y_h."""
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    inits = [numpy_helper.from_array(
        (0.4 * rng.standard_normal(shape)).astype(np.float32), name)
        for name, shape in (("W", (dirs, 4 * hidden, inputs)), ("R", (dirs, 4 * hidden, hidden)),
                            ("B", (dirs, 8 * hidden)))]
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y", "y_h"], name="lstm",
                            hidden_size=hidden, direction=direction)
    graph = helper.make_graph(
        [node], "lstm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, batch, inputs])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [steps, dirs, batch, hidden]),
         helper.make_tensor_value_info("y_h", TensorProto.FLOAT, [dirs, batch, hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model


def dynamic(tmp_path: Path, model: onnx.ModelProto, name: str, **kw) -> onnx.ModelProto:
    """``model`` through onnxruntime's ``quantize_dynamic`` (``kw``: its options)."""
    from onnxruntime.quantization import quantize_dynamic
    src, out = tmp_path / f"{name}_f.onnx", tmp_path / f"{name}.onnx"
    onnx.save(model, str(src))
    quantize_dynamic(str(src), str(out), **kw)
    return onnx.load(str(out))


def on_grid(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    """Values (two at least) DynamicQuantizeLinear quantizes exactly: its range [-100/32,
    155/32] spanned (both ends present), so its scale is 1/32 and zero point 100, every value
    on that grid."""
    q = rng.integers(0, 256, size=int(np.prod(shape)))
    q[:2] = (0, 255)
    return ((q - 100) / 32.0).astype(np.float32).reshape(shape)


def dynamic_step(x: np.ndarray) -> float:
    """DynamicQuantizeLinear's run-time scale of ``x`` (its range widened to hold 0)."""
    return float((max(float(x.max()), 0.0) - min(float(x.min()), 0.0)) / 255.0)


def fused_matmul_model(op: str, weight: np.ndarray, w_zero: np.ndarray, w_scale: np.ndarray,
                       bias: Optional[np.ndarray] = None) -> onnx.ModelProto:
    """x[2, K] -> com.microsoft ``op`` (DynamicQuantizeMatMul, or MatMulIntegerToFloat of a
    DynamicQuantizeLinear's outputs: onnxruntime's fusions of the MatMulInteger chain) with an
    int8 ``weight`` [K, N], its zero point and scale (scalar or [N]) and ``bias`` -> y."""
    inits = [numpy_helper.from_array(weight.astype(np.int8), "w_q"),
             numpy_helper.from_array(np.asarray(w_zero, np.int8), "w_zero"),
             numpy_helper.from_array(np.asarray(w_scale, np.float32), "w_scale")]
    tail = []
    if bias is not None:
        inits.append(numpy_helper.from_array(np.asarray(bias, np.float32), "bias"))
        tail = ["bias"]
    if op == "DynamicQuantizeMatMul":
        nodes = [helper.make_node(op, ["x", "w_q", "w_scale", "w_zero", *tail], ["y"],
                                  name="fused", domain="com.microsoft")]
    else:
        nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["x_q", "x_scale", "x_zero"],
                                  name="x_quantize"),
                 helper.make_node(op, ["x_q", "w_q", "x_scale", "w_scale", "x_zero", "w_zero",
                                       *tail], ["y"], name="fused", domain="com.microsoft")]
    graph = helper.make_graph(
        nodes, "fused_matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, weight.shape[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, weight.shape[1]])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model
