"""Strategies for the fp16 floor's Max/Min (``verify/floor_minmax.py``): a chain of one to three
two-input Max/Min nodes over model inputs, each node's operands in either order, an operand
broadcasting (``[1, C, 1, 1]``) as input 0 or 1, nodes named or not, and feeds whose operands
lie up to 1e3 apart, so the lowering's gap rounds where a Max of rounded values would not."""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper

C, HW = 3, 4
# (op, other input, whether the chain's value is input 0, named)
Step = Tuple[str, str, bool, bool]


def minmax_chain(steps: List[Step]) -> onnx.ModelProto:
    """``y = op_k(... op_1(x, i_1) ..., i_k)``; ``b`` is ``[1, C, 1, 1]``, the others full."""
    shapes = {"x": [1, C, HW, HW], "a": [1, C, HW, HW], "b": [1, C, 1, 1]}
    nodes, value = [], "x"
    for k, (op, other, first, named) in enumerate(steps):
        out = "y" if k == len(steps) - 1 else f"v{k}"
        operands = [value, other] if first else [other, value]
        nodes.append(helper.make_node(op, operands, [out], name=f"pick{k}" if named else ""))
        value = out
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, HW, HW])
    return helper.make_model(helper.make_graph(nodes, "minmax_chain", inputs, [y]),
                             opset_imports=[helper.make_opsetid("", 13)])


def lowered(steps: List[Step], feed: Dict[str, np.ndarray]) -> np.ndarray:
    """What the device computes (``layers/_minmax.py``) on fp16 operands, in numpy: f is the
    operand of the output's shape (input 0 unless it broadcasts), the gap rounded, each
    result rounded; operands of one shape pooled, exactly (``layers/_max_pairs.py``)."""
    def half(v: np.ndarray) -> np.ndarray:
        return v.astype(np.float16).astype(np.float32)
    value = half(feed["x"])
    for op, other, first, _ in steps:
        operands = [value, half(feed[other])]
        if not first:
            operands.reverse()
        if operands[0].shape == operands[1].shape:  # pooled exactly (layers/_max_pairs.py)
            value = np.maximum(*operands) if op == "Max" else np.minimum(*operands)
            continue
        full = 1 if operands[0].shape != value.shape else 0
        f, o = operands[full], operands[1 - full]
        gap = half(np.maximum(f - o, np.float32(0)))
        value = half(o + gap) if op == "Max" else half(f - gap)
    return value


@st.composite
def minmax_chains(draw: st.DrawFn) -> Tuple[List[Step], Dict[str, np.ndarray]]:
    steps = draw(st.lists(st.tuples(st.sampled_from(["Max", "Min"]), st.sampled_from(["a", "b"]),
                                    st.booleans(), st.booleans()), min_size=1, max_size=3))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    feed = {}
    for name, shape in (("x", (1, C, HW, HW)), ("a", (1, C, HW, HW)), ("b", (1, C, 1, 1))):
        scale = 10.0 ** draw(st.floats(-2, 3))
        shift = draw(st.sampled_from([0.0, 1000.0, -1000.0]))
        feed[name] = (rng.standard_normal(shape) * scale + shift).astype(np.float32)
    return steps, feed
