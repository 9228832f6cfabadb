"""The simulator's float16 number model, in one place.

The accelerator runs the RFC's fp16 mode. We model it as:

* inputs and weights are rounded to float16;
* products are accumulated in float32 (numpy float32 arithmetic, BLAS sgemm; wide dense 3x3
  convolutions use Winograd F(2x2, 3x3), whose float32 rounding differs slightly: winograd.py);
* every layer's output is rounded to float16 (overflow past 65504 becomes inf);
* subgraph outputs are handed back as float32.

Storage choice, stated explicitly: between layers an activation is a **float32 array whose every
value is exactly a float16 value** ("fp16-valued float32"). This is the same set of numbers as a
``np.float16`` array, but the math kernels need float32 anyway and numpy's float32<->float16
casts are scalar loops (about 2 ns per element each way, which would cost a ResNet-50 more than
its convolutions). ``round_to_fp16`` gives exactly the values of
``x.astype(np.float16).astype(np.float32)`` in one of two ways, by size:

* from ``ORT_MIN_SIZE`` elements on, onnxruntime's ``Cast`` to float16 and back, written into
  the array in place (its CPU kernel converts with the hardware's vector instructions); a
  ``ReduceSum`` of the result in the same session tells whether it is all finite. On a
  56x56x256 output this is about twice as fast as the numpy form below
  (``python benchmarks/bench_threads.py``, README);
* below, where the session call costs more than it saves, the same rounding in float32 with a
  handful of vectorised numpy operations (about 6 passes, in place), which is bit-identical to
  the cast (checked over all finite float32 inputs) except that a result of zero is always +0.0.

Both are checked against numpy's cast by tests/kernels/test_fp16.py.
"""
from __future__ import annotations

from functools import cache
from typing import Any, Tuple

import numpy as np

from mrvl_convert.errors import Fp16RangeError
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.kernels.ufuncs import CHUNK, chunks, filled

#: Largest finite float16 value.
FP16_MAX = 65504.0

_EXP_MASK = np.uint32(0x7F800000)
# Values with this exponent or above (|x| >= 2**15, inf, NaN) take the exact slow path: only
# there can float16 overflow (at 65520), and they are rare in activations.
_SLOW_EXP = np.uint32(0x47000000)
# Below 2**-14 (float16's smallest normal) float16 has a fixed step 2**-24.
_MIN_NORMAL = np.float32(2.0 ** -14)
# Adding c = 1.5 * 2**(e + 13) to x with exponent e makes the float32 sum's last bit weigh
# 2**(e - 10), which is exactly float16's step at exponent e, so the hardware's
# round-to-nearest-even of (x + c) is float16's rounding of x; subtracting c is exact.
_MAGIC_SCALE = np.float32(1.5 * 2.0 ** 13)
#: With method="auto", arrays of at least this many elements are rounded by onnxruntime.
ORT_MIN_SIZE = CHUNK
ROUNDING_METHODS = ("auto", "numpy", "onnxruntime")


def round_to_fp16(y: np.ndarray, *, inplace: bool = False,
                  method: str = "auto") -> Tuple[np.ndarray, bool]:
    """Round a float32 array to the float16 grid; return (rounded float32 array, in_range).

    ``in_range`` is False when some value overflowed to +-inf or is NaN; the returned array then
    holds those infs/NaNs, exactly as a float16 cast would. The values equal
    ``y.astype(np.float16).astype(np.float32)``; the one difference in bits is that the numpy
    method makes a value that rounds to zero +0.0 (numerically equal, and no kernel
    distinguishes -0.0). ``method`` is "auto" (onnxruntime from ``ORT_MIN_SIZE`` elements on,
    numpy below), "numpy" or "onnxruntime"; tests and benchmarks pick one.
    With ``inplace=True`` a C-contiguous float32 ``y`` is overwritten and returned.
    """
    if method not in ROUNDING_METHODS:
        raise ValueError(f"method must be one of {ROUNDING_METHODS}, got {method!r}")
    y = np.asarray(y, dtype=np.float32)
    if not (inplace and y.flags.c_contiguous and y.flags.writeable):
        y = np.array(y, dtype=np.float32, order="C", copy=True)
    if y.size and (method == "onnxruntime" or (method == "auto" and y.size >= ORT_MIN_SIZE)):
        return y, _round_with_onnxruntime(y)
    flat = y.reshape(-1)  # a view: y is C-contiguous
    # Six passes per chunk of CHUNK elements (ufuncs.py): they stay in the L2 cache, need no
    # array-sized temporary, and the clamp runs against a same-length constant.
    scratch = np.empty(min(flat.size, CHUNK), dtype=np.uint32)
    in_range = True
    for part in chunks(flat):
        in_range &= _round_chunk(part, scratch)
    return y, in_range


def _round_chunk(x: np.ndarray, scratch: np.ndarray) -> bool:
    """Round a flat float32 chunk in place; False if it overflowed or holds NaN."""
    magic = np.bitwise_and(x.view(np.uint32), _EXP_MASK, out=scratch[:x.size])
    # As float32, magic is 2**e, the power of two <= |x| (or 0).
    if magic.max() >= _SLOW_EXP:  # one integer reduction replaces a float min/max range check
        with np.errstate(over="ignore", invalid="ignore"):
            x[...] = x.astype(np.float16)
        return bool(np.isfinite(x).all())
    magic_f = magic.view(np.float32)
    np.maximum(magic_f, filled(float(_MIN_NORMAL), "<f4")[:x.size], out=magic_f)
    magic_f *= _MAGIC_SCALE
    x += magic_f
    x -= magic_f
    return True


def _round_with_onnxruntime(y: np.ndarray) -> bool:
    """Round a C-contiguous float32 array in place with onnxruntime's Cast; True if finite.

    The sum of float16-range values cannot overflow float32 (that would take 5e33 of them), so
    it is finite exactly when every value is: an inf makes it inf, a NaN or both infs NaN.
    """
    session = _cast_session()
    binding = session.io_binding()  # one per call: calls may overlap in several threads
    total = np.empty((), np.float32)
    binding.bind_cpu_input("x", y)
    # The output aliases the input: the first Cast has read all of x before the second writes.
    binding.bind_output("y", "cpu", 0, np.float32, list(y.shape), y.ctypes.data)
    binding.bind_output("sum", "cpu", 0, np.float32, [], total.ctypes.data)
    session.run_with_iobinding(binding)
    return bool(np.isfinite(total))


@cache
def _cast_session() -> Any:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["half"], to=TensorProto.FLOAT16),
         helper.make_node("Cast", ["half"], ["y"], to=TensorProto.FLOAT),
         helper.make_node("ReduceSum", ["y"], ["sum"], keepdims=0)],
        "mrvl_sim_round_to_fp16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("sum", TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7  # what every onnxruntime this project supports accepts
    options = ort.SessionOptions()
    # No graph rewrites: a Cast pair that narrows is the point here, not a no-op to remove.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    # One thread: a pool's wake-up cost more than it saved on 800K values with two.
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def const_to_fp16(values: np.ndarray) -> Tuple[np.ndarray, bool]:
    """Round a constant (weights, bias) once at compile time; same contract as round_to_fp16."""
    return round_to_fp16(np.ascontiguousarray(values, dtype=np.float32))


def is_fp16_valued(y: np.ndarray) -> bool:
    """True if every value of y is exactly representable in float16 (used by tests)."""
    y = np.asarray(y, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        back = y.astype(np.float16).astype(np.float32)
    return bool(np.array_equal(back, y, equal_nan=True))


def fp16_const(spec: LayerSpec, key: str, values: np.ndarray) -> np.ndarray:
    """Round a weight to float16 once; a weight beyond float16's range is an fp16 error."""
    rounded, in_range = const_to_fp16(values)
    if not in_range:
        raise Fp16RangeError(
            f"{spec.file}: layer {spec.name}: constant {spec.string(key)!r} ({key}) has values "
            f"outside the float16 range (|x| > 65504) or NaN", layer=spec.name,
            source_nodes=spec.source_nodes)
    return rounded
