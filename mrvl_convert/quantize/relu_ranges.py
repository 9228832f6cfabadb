"""A Relu's or Clip's input quantized with the scale of its output, as onnxruntime >= 1.19 does.

Why: quantize_static gives the one-reader input of a Relu or Clip the range calibrated for its
output (``BaseQuantizer.adjust_tensor_ranges``), so ``Conv -> Q -> DQ -> Relu -> Q`` has one
scale on both sides of the Relu and the converter fuses it into one int8 Conv2D layer.
onnxruntime before 1.19 skips that step when activations are symmetric (Marvell's recipe,
``recipe.recipe()``): the Conv's output keeps its own scale and the converter must add a
requant layer after the Conv, so the model it makes depends on the onnxruntime installed. This
pass, run on the QDQ model quantize_static wrote, does what the newer step does; on a model
the newer onnxruntime wrote it changes nothing.

Requires: a QDQ model as quantize_static writes it (one QuantizeLinear and one DequantizeLinear
per quantized tensor, each with its own ``<tensor>_scale`` and ``<tensor>_zero_point``).

Ensures: for every Relu or Clip in the default domain whose data input is
``t -> QuantizeLinear -> DequantizeLinear`` with ``t`` read only by that QuantizeLinear, its
DequantizeLinear read only by the Relu or Clip, and whose output is read by one QuantizeLinear
only, the scale and zero point initializers of ``t`` (when only that pair reads them) hold the
output's values, bit for bit (onnxruntime >= 1.19 computes them from the same range, so they are
those values). Every node, name and other tensor is unchanged.

Not exact, by design: it is quantize_static's own choice of scale for ``t`` (``t`` is rounded to
the output's scale, as the newer onnxruntime rounds it); the QDQ model written is the reference
the converter's int8 layers are compared with.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import onnx

_DEFAULT_DOMAINS = ("", "ai.onnx")


def relu_inputs_share_output_scale(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` (module docstring) or ``model`` itself if nothing changes."""
    graph = model.graph
    readers: Dict[str, List[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    producer = {out: node for node in graph.node for out in node.output}
    inits = {t.name: t for t in graph.initializer}
    moves: Dict[str, onnx.TensorProto] = {}
    for node in graph.node:
        if node.op_type in ("Relu", "Clip") and node.domain in _DEFAULT_DOMAINS:
            pairs = _params_pair(node, readers, producer, outputs)
            if pairs is not None:
                for into, source in zip(*pairs):
                    if into in inits and source in inits and into not in moves and \
                            inits[into].data_type == inits[source].data_type:
                        moves[into] = inits[source]
    changed = {k: v for k, v in moves.items() if inits[k].SerializeToString(deterministic=True)
               != _renamed(v, k).SerializeToString(deterministic=True)}
    if not changed:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for tensor in out.graph.initializer:
        if tensor.name in changed:
            tensor.CopyFrom(_renamed(changed[tensor.name], tensor.name))
    return out


def _renamed(tensor: onnx.TensorProto, name: str) -> onnx.TensorProto:
    copy = onnx.TensorProto()
    copy.CopyFrom(tensor)
    copy.name = name
    return copy


def _params_pair(node: onnx.NodeProto, readers: Dict[str, List[onnx.NodeProto]],
                 producer: Dict[str, onnx.NodeProto], outputs: set
                 ) -> Optional[Tuple[List[str], List[str]]]:
    """(the input's scale and zero point names, the output's) if ``node`` reads its data
    input through its own QuantizeLinear -> DequantizeLinear pair and one QuantizeLinear reads
    its output; else None."""
    if not node.input or len(node.output) != 1:
        return None
    dq = producer.get(node.input[0])
    if dq is None or dq.op_type != "DequantizeLinear" or _only(readers, dq.output[0]) is not node \
            or dq.output[0] in outputs:
        return None
    q = producer.get(dq.input[0])
    if q is None or q.op_type != "QuantizeLinear" or _only(readers, q.output[0]) is not dq \
            or _only(readers, q.input[0]) is not q or q.input[0] in outputs:
        return None
    after = _only(readers, node.output[0])
    if after is None or after.op_type != "QuantizeLinear" or node.output[0] in outputs:
        return None
    params = list(q.input[1:3])
    if len(params) != 2 or list(dq.input[1:3]) != params or len(after.input) < 3:
        return None
    # the pair's own initializers: one shared with another tensor is left as it is
    if any({id(r) for r in readers.get(p, [])} != {id(q), id(dq)} for p in params):
        return None
    return params, list(after.input[1:3])


def _only(readers: Dict[str, List[onnx.NodeProto]], name: str) -> Optional[onnx.NodeProto]:
    found = readers.get(name, [])
    return found[0] if len(found) == 1 else None


__all__ = ["relu_inputs_share_output_scale"]
