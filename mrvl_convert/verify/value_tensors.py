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
  values they do not read, and at a decision's float data: ``DECISIONS``; a tensor that is data
  elsewhere too is then not rounded either), or
  (c) computed from Shape/Size outputs and constants alone (not through a DequantizeLinear:
  what the quantizer quantized is data), (d) a quantization parameter of
  onnxruntime's integer operators (``quantize_dynamic``'s forms): a DynamicQuantizeLinear's
  scale and zero point, a scale slot (``QUANT_SLOTS``), and what is computed from those and
  constants alone (the product of the input's and the weight's scales, a bias divided into
  accumulator units), or (e) an int32 accumulator (ConvInteger/MatMulInteger, through integer
  ops) Cast to float before its scale Mul. An int8 layer accumulates in int32 and no device
  holds (d) or (e) in fp16; rounded, an accumulator over 65504 became inf and the whole floor
  or reference inf/NaN (text2tashkeel's BiLSTM, ddddocr's common_old). A tensor left out is
  float data and may be rounded.
"""
from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Mapping, Set, Tuple

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
# op -> the input positions that are quantization scales or zero points (not data).
QUANT_SLOTS: Mapping[str, Tuple[int, ...]] = {
    "DynamicQuantizeLSTM": (8, 9, 10, 11), "MatMulInteger": (2, 3), "ConvInteger": (2, 3),
    "QLinearConv": (1, 2, 4, 5, 6, 7), "QLinearMatMul": (1, 2, 4, 5, 6, 7),
    "DynamicQuantizeMatMul": (2, 3), "MatMulIntegerToFloat": (2, 3, 4, 5),
}
_SIZES = ("Shape", "Size")
# op -> the inputs the shape cone follows back through it (not its float data): an ArgMax,
# TopK or a control-flow node's integer results are decisions on float data, not sizes
# computed from it; rounding the data moves them only where a decision flips, as the device's
# fp16 does. A Loop's trip count and condition (and any input typed other than float32, a
# loop-carried counter) are followed. Not stopping here put a whole network in the cone: a
# decoder Loop whose step count ends a Slice protected the backbone whose features it reads
# (slanet-plus: its fp16 floor rounded nothing before the Loop, 10x too low).
DECISIONS: Mapping[str, Tuple[int, ...]] = {
    "ArgMax": (), "ArgMin": (), "TopK": (1,), "Loop": (0, 1), "If": (0,), "Scan": (),
}
_ACCUMULATING = ("ConvInteger", "MatMulInteger")  # int32 results of int8 products
# ops that carry an integer accumulator on as integers (a bias Add, a layout change)
_INTEGER_STEPS = ("Add", "Sub", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten",
                  "Identity")
_FLOAT = onnx.TensorProto.FLOAT


def never_rounded(proto: onnx.ModelProto) -> Set[str]:
    """The tensors of ``proto`` rounding must leave alone (module docstring)."""
    graph = proto.graph
    types = _element_types(proto)
    return ({n for n, elem in types.items() if elem != _FLOAT} | _shape_cone(graph, types)
            | _from_sizes(graph)
            | _quantization_parameters(graph) | _accumulators(graph))


def _quantization_parameters(graph: onnx.GraphProto) -> Set[str]:
    """(d): the scale slots, DynamicQuantizeLinear's scale and zero point, and what is
    computed from them and constants alone."""
    slots = {n.input[k] for n in graph.node for k in QUANT_SLOTS.get(n.op_type, ())
             if k < len(n.input) and n.input[k]}
    return _computed_from(graph, slots, lambda node: node.output[1:]
                          if node.op_type == "DynamicQuantizeLinear" else ())


def _accumulators(graph: onnx.GraphProto) -> Set[str]:
    """(e): ConvInteger/MatMulInteger results, carried through integer steps, and their Cast
    to float (the Mul by the scale after it computes data again)."""
    integer: Set[str] = set()
    as_float: Set[str] = set()
    for node in graph.node:
        if node.op_type in _ACCUMULATING:
            integer.update(o for o in node.output if o)
        elif any(i in integer for i in node.input):
            if node.op_type == "Cast":
                as_float.update(o for o in node.output if o)
            elif node.op_type in _INTEGER_STEPS:
                integer.update(o for o in node.output if o)
    return integer | as_float


def _shape_cone(graph: onnx.GraphProto, types: Mapping[str, int]) -> Set[str]:
    """What the shape/index slots read, followed back through their producers (not through
    Shape/Size: a shape does not depend on its input's values; through a ``DECISIONS`` node
    only into its listed inputs and those ``types`` says are not float32)."""
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
            stack.extend(_followed(node, types))
    return cone


def _followed(node: onnx.NodeProto, types: Mapping[str, int]) -> List[str]:
    """The inputs of ``node`` the shape cone goes on into: all, or a decision's listed ones and
    those known not to be float32 (an input of unknown type is taken as data)."""
    if node.op_type not in DECISIONS:
        return [i for i in node.input if i]
    listed = DECISIONS[node.op_type]
    return [i for k, i in enumerate(node.input)
            if i and (k in listed or types.get(i, _FLOAT) != _FLOAT)]


def _from_sizes(graph: onnx.GraphProto) -> Set[str]:
    """(c): Shape/Size outputs and what is computed from them and constants alone, but for the
    rows a Gather takes of a float table at indices computed so (a position embedding: float
    data the device holds in fp16, whatever its indices come from)."""
    tables = {t.name for t in graph.initializer if t.data_type == _FLOAT}
    # nor what a DequantizeLinear gives: a value the quantizer quantized is data (a YOLOv8
    # head's anchors, computed from its feature maps' sizes, which an fp16 Sum2D holds as a
    # constant in fp16)
    return _computed_from(graph, set(), lambda node: node.output
                          if node.op_type in _SIZES else (),
                          lambda node: node.op_type in _GATHERS and node.input[0] in tables
                          or node.op_type == "DequantizeLinear")


_GATHERS = ("Gather", "GatherElements", "GatherND")


def _computed_from(graph: onnx.GraphProto, seeds: Set[str],
                   sources: Callable[[onnx.NodeProto], Iterable[str]],
                   data: Callable[[onnx.NodeProto], bool] = lambda node: False) -> Set[str]:
    """``seeds``, the outputs ``sources`` gives of each node, and what is computed from those
    and constants alone (nodes taken in graph order, which onnx requires to be topological);
    not the outputs of a node ``data`` says computes float data."""
    constant = {t.name for t in graph.initializer}
    found = set(seeds)
    for node in graph.node:
        inputs = [i for i in node.input if i]
        if node.op_type == "Constant":
            constant.update(node.output)
        elif data(node):
            continue
        elif inputs and any(i in found for i in inputs) and all(
                i in found or i in constant for i in inputs):
            found.update(o for o in node.output if o)
        found.update(o for o in sources(node) if o)
    return found


def _element_types(proto: onnx.ModelProto) -> Dict[str, int]:
    """Each tensor's element type, as the model or shape inference gives it (a tensor typed
    other than float32 is never rounded: (a))."""
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
