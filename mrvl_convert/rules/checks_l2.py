"""The constraint of the L2-normalize composite (rules/marvell/normalize.yaml, lowered by
layers/l2_normalize.py). Part of the vocabulary of ``checks.CHECKS``: same signature, same
contract (None, or the details that fill a reason's placeholders)."""
from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, const_value, is_const, present, reduce_axes, \
    same_value, static_shape
from mrvl_convert.layers.l2_normalize import DELTA, mean_weight

Details = Optional[Dict[str, Any]]


def _eps(node: gs.Node) -> Tuple[Optional[float], str]:
    """(the clamp's lower bound, "") of a Clip(min), Max(., c) or Relu (canonicalize's Max(., 0)),
    or (None, why not)."""
    if node.op == "Relu":
        return 0.0, ""
    if node.op == "Max":
        consts = [t for t in node.inputs if is_const(t)]
        if len(node.inputs) != 2 or len(consts) != 1 or const_value(consts[0]).size != 1:
            return None, "the Max is not against one constant value"
        return float(const_value(consts[0]).reshape(-1)[0]), ""
    low, high = present(node, 1), present(node, 2)
    if (low is not None and not is_const(low)) or (high is not None and not is_const(high)):
        return None, "a bound of the Clip is computed at run time"
    if high is not None and np.isfinite(const_value(high)).any() or "max" in node.attrs:
        return None, "the Clip has an upper bound"
    value = const_value(low) if low is not None else np.float32(attr(node, "min", -np.inf))
    return float(np.asarray(value).reshape(-1)[0]), ""


def _form(div: gs.Node) -> Tuple[Optional[gs.Node], Optional[float], str]:
    """(the ReduceL2, eps or 0.0, "") of Div(x, [Expand](Clip|Max(ReduceL2(x)))), or a reason."""
    node, eps = div.inputs[1].inputs[0] if div.inputs[1].inputs else None, 0.0
    if node is not None and node.op == "Expand":
        node = node.inputs[0].inputs[0] if node.inputs[0].inputs else None
    if node is not None and node.op in ("Clip", "Max", "Relu"):
        eps, why = _eps(node)
        if eps is None:
            return None, None, why
        node = node.inputs[0].inputs[0] if node.inputs[0].inputs else None
    # An int8 model's x reaches the norm and the Div through two DequantizeLinear copies of
    # one quantized tensor (frontend/qdq.py gives each reader its own): one value.
    if node is None or node.op != "ReduceL2" or not same_value(node.inputs[0], div.inputs[0]):
        return None, None, "the divisor is not the norm of the dividend"
    return node, eps, ""


def check_l2_normalize(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """Div(x, [Expand](Clip(ReduceL2(x), eps))) of x [1, C] over C, keepdims, with eps^2 / C
    at most the lowering's DELTA (layers/l2_normalize.py)."""
    if len(node.inputs) != 2:
        return {"detail": "not a division of two tensors"}
    l2, eps, why = _form(node)
    if l2 is None:
        return {"detail": why}
    shape = static_shape(node.inputs[0])
    if shape is None or len(shape) != 2 or shape[0] != 1:
        return {"detail": f"the normalized tensor is {shape}; the form takes an embedding "
                          "[1, C]"}
    if reduce_axes(l2) != [1] or not int(attr(l2, "keepdims", 1)):
        return {"detail": f"the norm is over axes {reduce_axes(l2)} with keepdims "
                          f"{attr(l2, 'keepdims', 1)}, not over C keeping it"}
    if not math.isfinite(eps) or eps * eps * mean_weight(shape[1]) > DELTA:
        return {"detail": f"eps {eps} clamps the norm where fp16 resolves it (eps^2 / C > "
                          "2**-24): the clamp would need a bound the codegen writes"}
    return None


L2_CHECKS: Dict[str, Any] = {"l2_normalize": check_l2_normalize}
