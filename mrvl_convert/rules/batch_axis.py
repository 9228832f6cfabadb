"""Whether a model input's axis 0 is a batch, decided from the graph (the device batch rule's
``model_batch`` asks it).

The rule: the model's batch is what the model treats as one sample. An input whose axis 0 every
reader first moves out of place, by an ``Unsqueeze`` adding axis 0 (``[T, F] -> [1, T, F]``)
or a ``Reshape`` to a higher rank with a leading 1, is one sample whose axis 0 is a data axis
(madmom's music nets read ``[frames, bins]`` this way): its batch is 1. Ops that keep axis 0
where it is on the way there (elementwise ops of equal output rank, ``Pad``, ``Slice``,
``Cast``, an ``Unsqueeze`` or ``Squeeze`` not at axis 0) are followed. Any other reader
(``Conv``, ``MatMul``, ``Transpose``, a graph output, ...) takes axis 0 as it is: then it is a
batch, and a batch larger than the device's is still refused.
"""
from __future__ import annotations

from typing import Optional, Set

import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import is_const, squeeze_axes, static_shape

# Ops through which axis 0 stays axis 0 (when the output's rank is the input's).
_KEEPS_AXIS0 = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Elu", "Relu", "LeakyRelu", "Tanh",
    "Sigmoid", "Exp", "Log", "Sqrt", "Abs", "Neg", "Clip", "Cast", "Identity", "Pad", "Slice",
    "Softplus", "Selu", "HardSigmoid", "Erf", "Reciprocal", "Dropout",
})


def _normalized(axes: list, rank: int) -> Set[int]:
    return {a % rank for a in axes} if rank else set(axes)


def _lifts(node: gs.Node, src: list) -> Optional[bool]:
    """True when the node puts a new axis in front of axis 0; False when axis 0 stays axis 0
    (follow its output); None when the node reads axis 0 as a batch."""
    dst = static_shape(node.outputs[0]) if node.outputs else None
    if node.op in ("Unsqueeze", "Squeeze"):
        axes = squeeze_axes(node)
        if axes is None or dst is None:
            return None
        rank = len(dst) if node.op == "Unsqueeze" else len(src)
        return 0 in _normalized(axes, rank) if node.op == "Unsqueeze" else (
            None if 0 in _normalized(axes, rank) else False)
    if node.op == "Reshape":
        return True if dst and len(dst) > len(src) and dst[0] == 1 != src[0] else None
    if node.op in _KEEPS_AXIS0 and dst is not None and len(dst) == len(src):
        return False
    return None


def axis0_is_batch(graph: gs.Graph, tensor: gs.Tensor) -> bool:
    """False when every path from ``tensor`` moves its axis 0 behind a new leading axis before
    anything reads it (see the module docstring); True otherwise."""
    outputs = {t.name for t in graph.outputs}
    frontier, seen = [tensor], set()
    while frontier:
        current = frontier.pop()
        if current.name in seen:
            continue
        seen.add(current.name)
        src = static_shape(current)
        if current.name in outputs or not current.outputs or not src:
            return True
        for node in current.outputs:
            lifted = _lifts(node, src)
            if lifted is None:
                return True
            if not lifted:
                frontier.extend(t for t in node.outputs[:1] if not is_const(t))
    return False
