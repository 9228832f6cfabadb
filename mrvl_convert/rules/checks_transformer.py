"""Constraints of the transformer composites (rules/marvell/transformer.yaml): GELU and
LayerNormalization, lowered to chains of existing layers (layers/gelu.py, layers/layer_norm.py).
Part of the vocabulary of ``checks.CHECKS``: same signature, same contract (None, or the
details that fill a reason's placeholders)."""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, is_const, present, static_shape
from mrvl_convert.layers.gelu import gelu_match
from mrvl_convert.layers.layer_norm import layer_norm_axis
from mrvl_convert.layers.reduce import MEAN_AXES

Details = Optional[Dict[str, Any]]


def _outputs(graph: gs.Graph) -> set:
    return {t.name for t in graph.outputs}


def check_gelu_gate(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """``node`` is the Mul by 1 + erf(x / sqrt 2) (``form: erf``) or by
    1 + tanh(sqrt(2/pi) * (x + 0.044715 x**3)) (``form: tanh``) of a GELU (layers/gelu.py)."""
    found = gelu_match(node, args["form"], _outputs(graph))
    return {"detail": found} if isinstance(found, str) else None


def check_gelu_half(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """``node`` is the Mul that completes a GELU's 0.5 * x after its gate."""
    for tensor in node.inputs:
        gate = tensor.inputs[0] if tensor.inputs else None
        if gate is not None and gate.op == "Mul":
            found = gelu_match(gate, args["form"], _outputs(graph))
            if not isinstance(found, str) and found.half is node:
                return None
    return {"detail": "the GELU's gate already multiplies by 0.5 * x"}


def check_onnx_domain(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """The op of the default ONNX domain (com.microsoft's Gelu is another op of the same name)."""
    domain = getattr(node, "domain", None) or ""
    return None if domain in ("", "ai.onnx") else {"domain": domain}


def check_layer_norm(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """Over the last axis only (one ReduceMean axis, as mrvl.py's reduce_mean takes), constant
    scale and bias, and no consumer of the Mean / InvStdDev outputs."""
    shape = static_shape(node.inputs[0])
    if shape is None or len(shape) not in MEAN_AXES:
        return {"detail": f"the layer chain takes a 3-D or 4-D tensor; this one is "
                          f"{'unknown' if shape is None else len(shape)}-D"}
    if layer_norm_axis(node) != len(shape) - 1:
        return {"detail": f"it normalises from axis {attr(node, 'axis', -1)}; only the last "
                          f"axis maps (one ReduceMean axis)"}
    for index, role in ((1, "scale"), (2, "bias")):
        tensor = present(node, index)
        if tensor is not None and not is_const(tensor):
            return {"detail": f"the {role} ({tensor.name}) is computed at run time"}
    outputs = _outputs(graph)
    for tensor in node.outputs[1:]:
        if tensor.outputs or tensor.name in outputs:
            return {"detail": f"its output {tensor.name} (mean or inverse deviation) is used"}
    return None


def check_sqrt_divisor(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """Div(d, Sqrt(v)): the divisor is the Sqrt's output, the dividend an activation of the
    output's shape into which the divisor broadcasts (a LayerNorm's d / sqrt(var + eps))."""
    if len(node.inputs) != 2 or not node.inputs[1].inputs \
            or node.inputs[1].inputs[0].op != "Sqrt":
        return {"detail": "the Sqrt's output is the dividend, not the divisor"}
    dividend, divisor = static_shape(node.inputs[0]), static_shape(node.inputs[1])
    out = static_shape(node.outputs[0])
    if is_const(node.inputs[0]) or dividend != out or len(divisor) != len(out):
        return {"detail": f"the dividend {dividend} must be an activation of the output's "
                          f"shape {out}, the divisor {divisor} of its rank"}
    return None


TRANSFORMER_CHECKS: Dict[str, Any] = {
    "gelu_gate": check_gelu_gate,
    "gelu_half": check_gelu_half,
    "layer_norm": check_layer_norm,
    "onnx_domain": check_onnx_domain,
    "sqrt_divisor": check_sqrt_divisor,
}
