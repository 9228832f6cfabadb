"""Strategies for the exact Max/Min of activations of one shape (``layers/_max_pairs.py``):
Max or Min of 2 to 4 operands of rank 2, 3 or 4, each a channel permutation of an fp16 input
by an exact layer (a 1x1 Conv, a Conv1d of width 1, or a Gemm by a permutation matrix), the
channels 1 to 5, small spatial sizes, and values whose magnitudes span 2**-12 to 2**12, so a
gap ``f - o`` would round where a selection does not."""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

Case = Tuple[onnx.ModelProto, Dict[str, np.ndarray]]


def _permutation(channels: int, order: List[int], rank: int) -> np.ndarray:
    """The weight that picks channel ``order[k]`` into channel k (a Conv's OI.. or a Gemm's)."""
    eye = np.eye(channels, dtype=np.float32)[order]
    return eye.T.copy() if rank == 2 else eye.reshape([channels, channels] + [1] * (rank - 2))


def pair_model(op: str, shape: List[int], orders: List[List[int]]) -> onnx.ModelProto:
    """``y = op(P_1 x, ..., P_n x)``, each ``P_k`` an exact channel permutation of ``x``."""
    rank, channels = len(shape), shape[1]
    inits, nodes, operands = [], [], []
    for k, order in enumerate(orders):
        inits.append(numpy_helper.from_array(_permutation(channels, order, rank), f"p{k}"))
        if rank == 2:
            nodes.append(helper.make_node("Gemm", ["x", f"p{k}"], [f"o{k}"], name=f"perm{k}"))
        else:
            nodes.append(helper.make_node("Conv", ["x", f"p{k}"], [f"o{k}"], name=f"perm{k}",
                                          kernel_shape=[1] * (rank - 2)))
        operands.append(f"o{k}")
    nodes.append(helper.make_node(op, operands, ["y"], name="pair"))
    graph = helper.make_graph(nodes, "max_pairs",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@st.composite
def pair_cases(draw: st.DrawFn) -> Case:
    rank = draw(st.sampled_from([2, 3, 4]))
    channels = draw(st.integers(1, 5))
    shape = [1, channels] + [draw(st.integers(1, 6)) for _ in range(rank - 2)]
    n = draw(st.integers(2, 4))
    orders = [draw(st.permutations(list(range(channels)))) for _ in range(n)]
    op = draw(st.sampled_from(["Max", "Min"]))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    x = rng.standard_normal(shape) * np.exp2(rng.uniform(-12, 12, shape))
    return pair_model(op, shape, orders), {"x": x.astype(np.float16).astype(np.float32)}
