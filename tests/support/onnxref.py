"""fp32 onnxruntime references for single ONNX nodes (NCHW), for the simulator's kernel tests."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

#: float16 unit roundoff: one rounding moves a value by at most U * |value|.
U = 2.0 ** -11

#: onnxruntime before 1.21 pools in ceil mode as today's ONNX spec, onnxruntime 1.21+, PyTorch
#: and the simulator do not: it keeps a last window that starts past the input, and with
#: count_include_pad it counts the cells a window reaches past the explicit padding. Those
#: versions cannot referee such a case.
ORT_OLD_CEIL_POOLING = tuple(int(v) for v in ort.__version__.split(".")[:2]) < (1, 21)


def _runs_int8_conv_integer() -> bool:
    """Whether this onnxruntime has a CPU ConvInteger kernel for int8 weights. onnxruntime
    1.18 has only uint8 x uint8 (session creation: NOT_IMPLEMENTED), though its own
    ``quantize_dynamic`` writes int8 weights by default; later versions run both."""
    graph = helper.make_graph(
        [helper.make_node("ConvInteger", ["x", "w"], ["y"])], "probe",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 1, 1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [numpy_helper.from_array(np.ones((1, 1, 1, 1), np.int8), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - NotImplemented from the pybind layer
        return False
    return True


#: onnxruntime runs a ConvInteger with int8 weights (not 1.18: uint8 weights only there).
ORT_CONV_INTEGER_INT8 = _runs_int8_conv_integer()


def ceil_pool_quirks(sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                     pads: Sequence[int], dilations: Sequence[int], ceil_mode: bool) -> Set[str]:
    """Which ceil-mode cases this pool has: "late window" (ceil mode would add a window that
    starts past the input and its head padding) and "past padding" (a window reaches beyond
    the explicit padding)."""
    found: Set[str] = set()
    if not ceil_mode:
        return found
    rank = len(sizes)
    for axis, size in enumerate(sizes):
        head, tail = pads[axis], pads[rank + axis]
        reach = dilations[axis] * (kernel[axis] - 1) + 1
        span = size + head + tail - reach
        last_start = -(-span // strides[axis]) * strides[axis]
        if last_start >= size + head:
            found.add("late window")
            last_start -= strides[axis]
        if last_start + reach > size + head + tail:
            found.add("past padding")
    return found


def single_node_model(op: str, inputs: Dict[str, np.ndarray], output_rank: int,
                      initializers: Optional[Dict[str, np.ndarray]] = None,
                      opset: int = 17, **attrs) -> onnx.ModelProto:
    """A model with one node; ``inputs`` are graph inputs, ``initializers`` constants."""
    initializers = initializers or {}
    graph_inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape))
                    for n, a in inputs.items()]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * output_rank)
    node = helper.make_node(op, list(inputs) + list(initializers), ["y"], **attrs)
    graph = helper.make_graph([node], "single", graph_inputs, [out],
                              [numpy_helper.from_array(a.astype(np.float32), n)
                               for n, a in initializers.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=8)


def run_model(model: onnx.ModelProto, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feed)


def run_node(op: str, inputs: Dict[str, np.ndarray], output_rank: int,
             initializers: Optional[Dict[str, np.ndarray]] = None, opset: int = 17,
             **attrs) -> np.ndarray:
    model = single_node_model(op, inputs, output_rank, initializers, opset, **attrs)
    return run_model(model, {n: a.astype(np.float32) for n, a in inputs.items()})[0]


def fp16_bound(magnitude: np.ndarray, roundings: int = 3) -> np.ndarray:
    """Per-element error bound of the fp16 model for a linear op: every operand is rounded once
    (inputs, weights) and the output once, each moving a term by <= U of its size, so the error
    is at most ``roundings * U`` times the same op applied to the absolute values
    (``magnitude``). The extra 0.05 U (relative) and 1e-6 * max cover U**2 terms and float32
    accumulation-order differences between numpy/BLAS and onnxruntime."""
    magnitude = np.abs(np.asarray(magnitude, dtype=np.float64))
    return (roundings + 0.05) * U * magnitude + 1e-6 * float(magnitude.max(initial=0.0)) + 1e-30


def assert_close_fp16(got: np.ndarray, want: np.ndarray, magnitude: np.ndarray,
                      roundings: int = 3) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    bound = fp16_bound(magnitude, roundings)
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    worst = np.unravel_index(np.argmax(err - bound), err.shape) if err.size else ()
    assert np.all(err <= bound), (
        f"fp16 error beyond bound at {worst}: got {got[worst]}, want {want[worst]}, "
        f"err {err[worst]:.3g} > bound {bound[worst]:.3g}")


def fp16_round(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def shapes_str(*shapes: Sequence[int]) -> str:
    return " ".join("x".join(map(str, s)) for s in shapes)
