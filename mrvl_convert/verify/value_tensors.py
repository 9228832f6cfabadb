"""The tensors of a model that carry shapes, indices or integers: never rounded to fp16.

Verify rounds a reference where the artifact rounds (``kept_fp16.py``) and, for the fp16 floor,
everywhere (``fp16_floor.py``). Only float data is rounded: a Reshape's target, a Slice's
starts, a Gather's indices, an Expand's shape (and the float arithmetic an exporter does on
sizes, ``Cast(Shape(x)) -> Div -> Cast``) are not numbers the device computes in fp16, and a
Cast pair on an int64 tensor is no model onnxruntime can run (issue 43, finding 3).

- requires: a model (not changed);
- ensures: ``never_rounded`` holds every tensor that is (a) typed other than float32 by the
  model or by shape inference, (b) read by a shape/index slot (``INDEX_SLOTS``), or one such
  a tensor is computed from (its producers followed back, stopping at Shape/Size, whose input's
  values they do not read; a tensor that is data elsewhere too is then not rounded either), or
  (c) computed from Shape/Size outputs and constants alone. A tensor left out is float data
  and may be rounded.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Set, Tuple

import onnx

# op -> the input positions that are shapes, indices, axes, sizes or counts (not data).
INDEX_SLOTS: Mapping[str, Tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,),
    "Range": (0, 1, 2), "Slice": (1, 2, 3, 4), "Gather": (1,), "GatherElements": (1,),
    "GatherND": (1,), "ScatterND": (1,), "ScatterElements": (1,), "Squeeze": (1,),
    "Unsqueeze": (1,), "Split": (1,), "Pad": (1, 3), "Resize": (1, 2, 3), "Upsample": (1,),
    "TopK": (1,), "OneHot": (0, 1), "CumSum": (1,), "ReduceSum": (1,), "ReduceMean": (1,),
    "ReduceMax": (1,), "ReduceMin": (1,), "ReduceProd": (1,), "ReduceL2": (1,),
    "ReduceL1": (1,), "ReduceSumSquare": (1,), "ReduceLogSumExp": (1,), "Trilu": (1,),
    "NonMaxSuppression": (2,), "CenterCropPad": (1,), "DFT": (1, 2), "STFT": (1, 3),
}
_SIZES = ("Shape", "Size")
_FLOAT = onnx.TensorProto.FLOAT


def never_rounded(proto: onnx.ModelProto) -> Set[str]:
    """The tensors of ``proto`` rounding must leave alone (module docstring)."""
    return _not_float(proto) | _shape_cone(proto.graph) | _from_sizes(proto.graph)


def _shape_cone(graph: onnx.GraphProto) -> Set[str]:
    """What the shape/index slots read, followed back through their producers (not through
    Shape/Size: a shape does not depend on its input's values)."""
    producer = {o: n for n in graph.node for o in n.output if o}
    cone: Set[str] = set()
    stack = [n.input[k] for n in graph.node for k in INDEX_SLOTS.get(n.op_type, ())
             if k < len(n.input) and n.input[k]]
    while stack:
        name = stack.pop()
        if name in cone:
            continue
        cone.add(name)
        node = producer.get(name)
        if node is not None and node.op_type not in _SIZES:
            stack.extend(i for i in node.input if i)
    return cone


def _from_sizes(graph: onnx.GraphProto) -> Set[str]:
    """Shape/Size outputs and what is computed from them and constants alone (nodes taken in
    graph order, which onnx requires to be topological)."""
    constant = {t.name for t in graph.initializer}
    sizes: Set[str] = set()
    for node in graph.node:
        inputs = [i for i in node.input if i]
        if node.op_type == "Constant":
            constant.update(node.output)
        elif node.op_type in _SIZES or (inputs and any(i in sizes for i in inputs) and all(
                i in sizes or i in constant for i in inputs)):
            sizes.update(o for o in node.output if o)
    return sizes


def _not_float(proto: onnx.ModelProto) -> Set[str]:
    """Tensors the model, or shape inference, types as anything but float32."""
    types = _element_types(proto)
    return {name for name, elem in types.items() if elem != _FLOAT}


def _element_types(proto: onnx.ModelProto) -> Dict[str, int]:
    graph = proto.graph
    infos: List[onnx.ValueInfoProto] = [*graph.input, *graph.output, *graph.value_info]
    try:
        infos += list(onnx.shape_inference.infer_shapes(proto).graph.value_info)
    except Exception:  # noqa: BLE001 - inference is best effort; the slots still hold
        pass
    types = {i.name: i.type.tensor_type.elem_type for i in infos
             if i.type.tensor_type.elem_type}
    types.update({t.name: t.data_type for t in graph.initializer})
    for node in graph.node:
        if node.op_type == "Constant":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                types[node.output[0]] = value.data_type
    return types
