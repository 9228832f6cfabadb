"""Strategies for a Div of two activations (``layers/_div_pairs.py``, rule ``mrvl.div_pair``):
rank 2, 3 or 4, batch 1, the dividend an exact FC or 1x1 Conv by the identity of an fp16
input (an exact compute-heavy layer for the stage), the divisor a second input of the same
rank broadcasting along any subset of the non-batch axes, dividends of 2**-6 to 2**8 and
divisors of 2**-6 to 2**6 in magnitude with either sign, so every quotient is a normal fp16."""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

Case = Tuple[onnx.ModelProto, Dict[str, np.ndarray]]


def div_model(shape: List[int], divisor: List[int]) -> onnx.ModelProto:
    """``y = (I x) / d``, ``I`` an identity Gemm (rank 2) or 1x1 Conv (rank 3 and 4)."""
    rank, channels = len(shape), shape[1]
    eye = np.eye(channels, dtype=np.float32)
    if rank == 2:
        front = helper.make_node("Gemm", ["x", "w"], ["a"], name="front")
    else:
        eye = eye.reshape([channels, channels] + [1] * (rank - 2))
        front = helper.make_node("Conv", ["x", "w"], ["a"], name="front",
                                 kernel_shape=[1] * (rank - 2))
    graph = helper.make_graph(
        [front, helper.make_node("Div", ["a", "d"], ["y"], name="pair_div")], "div_pairs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
         helper.make_tensor_value_info("d", TensorProto.FLOAT, divisor)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(eye, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _signed(rng: np.random.Generator, shape: List[int], low: float, high: float) -> np.ndarray:
    values = rng.choice([-1.0, 1.0], shape) * np.exp2(rng.uniform(low, high, shape))
    return values.astype(np.float16).astype(np.float32)


@st.composite
def div_cases(draw: st.DrawFn) -> Case:
    rank = draw(st.sampled_from([2, 3, 4]))
    shape = [1, draw(st.integers(1, 6))] + [draw(st.integers(1, 5)) for _ in range(rank - 2)]
    divisor = [1] + [n if draw(st.booleans()) else 1 for n in shape[1:]]
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    feed = {"x": _signed(rng, shape, -6, 8), "d": _signed(rng, divisor, -6, 6)}
    return div_model(shape, divisor), feed
