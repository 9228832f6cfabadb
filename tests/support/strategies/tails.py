"""Hypothesis strategies for the lowered tails of tests/system/test_fuzz_tails.py: an Elu (any
alpha), a Max or Min of two activations (one broadcasting or not), an embedding's L2
normalisation (Clip, Max or no clamp, eps below fp16's range), behind an exact identity layer so
the region is compute-heavy and the form gets its input as fed; with the input's scale and the
bound each lowering's module states (u = 2**-11)."""
from __future__ import annotations

from typing import Callable, Tuple

import numpy as np
import onnx
from hypothesis import strategies as st

from support.models import Builder

U = 2.0 ** -11
SHAPE = [1, 4, 3, 5]
C = 12

Bound = Callable[[np.ndarray, np.ndarray], np.ndarray]   # (x, onnxruntime's output) -> bound


def _front(b: Builder) -> str:
    c = SHAPE[1]
    return b.op("Conv", [b.input("x", SHAPE), b.const(np.eye(c, dtype=np.float32)
                                                     .reshape(c, c, 1, 1))], kernel_shape=[1, 1])


@st.composite
def elu(draw) -> Tuple[onnx.ModelProto, list, Bound]:
    alpha = draw(st.floats(0.0625, 2.0, width=32), label="alpha")
    b = Builder()
    model = b.model([b.op("Elu", [_front(b)], alpha=alpha)])
    return model, SHAPE, lambda x, want: (7 * U * np.abs(want) * (1 + 7 * U)
                                          + 2.0 ** -25 * (5 * alpha + 1))


@st.composite
def max_min(draw) -> Tuple[onnx.ModelProto, list, Bound]:
    op = draw(st.sampled_from(["Max", "Min"]), label="op")
    broadcast, swap = draw(st.booleans(), label="broadcast"), draw(st.booleans(), label="swap")
    b = Builder()
    f = _front(b)
    ints = [b.const(np.array([v], np.int64)) for v in (0, 1, 1)]
    # channel 0 (broadcasting) or -x / 2 (f's shape), both exact in fp16 but for subnormals
    o = b.op("Slice", [f, *ints]) if broadcast else b.op("Mul", [f, b.const(np.float32(-0.5))])

    def other(x):
        return x[:, :1] if broadcast else x * np.float32(-0.5)

    model = b.model([b.op(op, [o, f] if swap else [f, o])])
    # + 2**-24 (_minmax.py's subnormal term) + 2**-25 (-x / 2 rounded where x is subnormal)
    return model, SHAPE, lambda x, want: (U * (np.abs(x - other(x)) + np.abs(want)) * (1 + U)
                                          + 3 * 2.0 ** -25)


@st.composite
def l2_normalize(draw) -> Tuple[onnx.ModelProto, list, Bound]:
    clamp = draw(st.sampled_from(["Clip", "Max", None]), label="clamp")
    eps = draw(st.sampled_from([1e-12, 1e-8, 0.0]), label="eps")
    b = Builder()
    x = b.op("Gemm", [b.input("x", [1, C]), b.const(np.eye(C, dtype=np.float32))])
    norm = b.op("ReduceL2", [x], axes=[1], keepdims=1)
    if clamp:
        norm = b.op(clamp, [norm, b.const(np.float32(eps))])
    model = b.model([b.op("Div", [x, norm])])

    def bound(xv, want):
        m = float(np.mean(xv.astype(np.float64) ** 2))
        return (5 * U + 2.0 ** -24 / (2 * m)) * np.abs(want) * (1 + U)
    return model, [1, C], bound


TAILS = st.one_of(elu(), max_min(), l2_normalize())
