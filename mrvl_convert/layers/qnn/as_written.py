"""One float op between DequantizeLinear and QuantizeLinear, evaluated by onnxruntime as a QDQ model
runs it as written (Q/DQ fusion off): the number model of the int8 layers whose float op sums.

Why onnxruntime and not numpy: the int8 simulation must equal onnxruntime's run of the QDQ model
(``runtime.session.qdq_as_written``), and there a Conv, Gemm, pool or ReduceMean is a float32
op on dequantized values whose sums MLAS forms in an order of its own (blocked, fused
multiply-adds, per-algorithm). An exact int32 accumulator, as the accelerator has, lands on the
other side of a rounding boundary whenever the exact value lies within float32 rounding of it
(a near-tie: measured in docs/QUANTIZATION.md); so does numpy's own summation order. The only
exact model of onnxruntime's float32 sums is onnxruntime's kernels, fed what the QDQ model feeds
them: the int8 activations, the int8 weights and int32 bias dequantized by DequantizeLinear with
the layer's scales, and the result quantized by QuantizeLinear. Elementwise ops (one float32
operation per element: dequantize, add, multiply, quantize) need no such help, and the int8
kernels compute those in numpy, identically.

The model is built once per layer from the Nodes-JSON's values alone (shapes, scales, integer
constants, the op's geometry), in NCHW as the QDQ model holds it; one intra-op thread (MLAS
splits work over outputs, never over a sum, so the thread count changes no value).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence, Tuple

import numpy as np

OPSET = 13
_INT8, _INT32 = 3, 6  # onnx.TensorProto.INT8 / INT32


def session_options() -> Any:
    """Options of every session here: fusion of Q/DQ pairs off (the model as written), one
    thread, errors only."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.enable_cpu_mem_arena = False
    options.add_session_config_entry("session.disable_quant_qdq", "1")
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def _scalar(name: str, value: Any, dtype: Any) -> Any:
    from onnx import numpy_helper
    return numpy_helper.from_array(np.asarray(value, dtype=dtype).reshape(()), name)


class QdqOp:
    """``Q(op(DQ(x_0), ..., DQ(w_0), ...), out_scale)``: activations ``inputs`` (int8, one
    (shape, scale) each, in the op's input order) followed by integer constants ``weights``
    ((array, scale), int8 or int32), all symmetric (zero point 0). Called with int8-valued
    arrays, returns the int8 result as float32 integers."""

    def __init__(self, op_type: str, inputs: Sequence[Tuple[Sequence[int], float]],
                 out_scale: float, attrs: Mapping[str, Any],
                 weights: Sequence[Tuple[np.ndarray, float]] = ()) -> None:
        import onnxruntime as ort

        model = _model(op_type, inputs, out_scale, attrs, weights)
        self.names = [f"x{i}" for i in range(len(inputs))]
        self.session = ort.InferenceSession(model, session_options(),
                                            providers=["CPUExecutionProvider"])

    def __call__(self, *values: np.ndarray) -> np.ndarray:
        feed = {name: _as_int8(v) for name, v in zip(self.names, values)}
        return self.session.run(None, feed)[0].astype(np.float32)


def _as_int8(values: np.ndarray) -> np.ndarray:
    # Values are int8 already; the clip only keeps a crafted input from wrapping around.
    return np.clip(values, -128, 127).astype(np.int8)


def _model(op_type: str, inputs: Sequence[Tuple[Sequence[int], float]], out_scale: float,
           attrs: Mapping[str, Any], weights: Sequence[Tuple[np.ndarray, float]]) -> bytes:
    from onnx import helper, numpy_helper

    nodes, inits, graph_inputs, operands = [], [], [], []
    inits.append(_scalar("zp8", 0, np.int8))
    inits.append(_scalar("zp32", 0, np.int32))
    for i, (shape, scale) in enumerate(inputs):
        graph_inputs.append(helper.make_tensor_value_info(f"x{i}", _INT8, list(shape)))
        inits.append(_scalar(f"s{i}", scale, np.float32))
        nodes.append(helper.make_node("DequantizeLinear", [f"x{i}", f"s{i}", "zp8"], [f"f{i}"]))
        operands.append(f"f{i}")
    for k, (array, scale) in enumerate(weights):
        zero = "zp32" if array.dtype == np.int32 else "zp8"
        inits.append(numpy_helper.from_array(array, f"w{k}"))
        inits.append(_scalar(f"ws{k}", scale, np.float32))
        nodes.append(helper.make_node("DequantizeLinear", [f"w{k}", f"ws{k}", zero], [f"g{k}"]))
        operands.append(f"g{k}")
    inits.append(_scalar("so", out_scale, np.float32))
    nodes.append(helper.make_node(op_type, operands, ["y"], **dict(attrs)))
    nodes.append(helper.make_node("QuantizeLinear", ["y", "so", "zp8"], ["q"]))
    graph = helper.make_graph(nodes, f"mrvl_int8_{op_type.lower()}", graph_inputs,
                              [helper.make_tensor_value_info("q", _INT8, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=8)
    return model.SerializeToString()
