"""float16 forms of a float32 model, done by hand as converters write them.

``as_float16`` is what ``onnxconverter_common.float16.convert_float_to_float16`` writes (every
float weight, input, output and Cast target float16); ``castup_weights`` keeps float32
arithmetic and stores each weight as float16 behind a ``Cast`` up to float (``model.half()``
exports with a float32 head, weight-compressed models); ``float32_twin`` is the float32 model
with each weight rounded to float16's values, which is what the two others compute in float32.
"""
from __future__ import annotations

import copy

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

F16, F32 = TensorProto.FLOAT16, TensorProto.FLOAT


def float32_twin(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose float32 weights hold float16 values."""
    twin = copy.deepcopy(model)
    for k, tensor in enumerate(twin.graph.initializer):
        if tensor.data_type == F32:
            values = numpy_helper.to_array(tensor).astype(np.float16).astype(np.float32)
            twin.graph.initializer[k].CopyFrom(numpy_helper.from_array(values, tensor.name))
    return twin


# Inputs ONNX types as float32 only (converters keep them so): (op, input index).
FLOAT_ONLY = {("Resize", 2), ("Upsample", 1)}


def as_float16(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` stored and computed in float16: weights, inputs, outputs and Casts to float
    (a Resize's scales stay float32, as ONNX wants them)."""
    half = copy.deepcopy(model)
    graph = half.graph
    kept = {name for node in graph.node for k, name in enumerate(node.input)
            if (node.op_type, k) in FLOAT_ONLY}
    for k, tensor in enumerate(graph.initializer):
        if tensor.data_type == F32 and tensor.name not in kept:
            values = numpy_helper.to_array(tensor).astype(np.float16)
            graph.initializer[k].CopyFrom(numpy_helper.from_array(values, tensor.name))
    for value in list(graph.input) + list(graph.output):
        if value.type.tensor_type.elem_type == F32:
            value.type.tensor_type.elem_type = F16
    del graph.value_info[:]
    for node in graph.node:
        for attr in node.attribute:
            if node.op_type == "Cast" and attr.name == "to" and attr.i == F32:
                attr.i = F16
            if node.op_type in ("Constant", "ConstantOfShape") and attr.name == "value" \
                    and attr.t.data_type == F32:
                values = numpy_helper.to_array(attr.t).astype(np.float16)
                attr.t.CopyFrom(numpy_helper.from_array(values, attr.t.name))
    onnx.checker.check_model(half)
    return half


def castup_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each float32 weight stored in float16 and Cast up to float where read."""
    stored = copy.deepcopy(model)
    graph = stored.graph
    casts = []
    for k, tensor in enumerate(graph.initializer):
        if tensor.data_type == F32:
            name = tensor.name
            values = numpy_helper.to_array(tensor).astype(np.float16)
            graph.initializer[k].CopyFrom(numpy_helper.from_array(values, name + "_f16"))
            casts.append(onnx.helper.make_node("Cast", [name + "_f16"], [name], to=F32,
                                               name=name + "_castup"))
    nodes = casts + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(stored)
    return stored


def float16_region(model: onnx.ModelProto, first: str, last: str) -> onnx.ModelProto:
    """``model`` (float32) computing nodes ``first`` .. ``last`` (a chain, in graph order) in
    float16: a Cast to float16 before ``first``, one back to float after ``last``, and the
    weights the region reads stored in float16 (mixed-precision exports)."""
    mixed = copy.deepcopy(model)
    graph = mixed.graph
    names = [n.name for n in graph.node]
    region = graph.node[names.index(first):names.index(last) + 1]
    entry, exit_ = region[0].input[0], region[-1].output[0]
    inits = {t.name: t for t in graph.initializer}
    for node in region:
        for name in node.input[1:]:
            if name in inits and inits[name].data_type == F32:
                values = numpy_helper.to_array(inits[name]).astype(np.float16)
                inits[name].CopyFrom(numpy_helper.from_array(values, name))
    region[0].input[0] = entry + "_f16"
    region[-1].output[0] = exit_ + "_f16"
    down = onnx.helper.make_node("Cast", [entry], [entry + "_f16"], to=F16, name="to_f16")
    up = onnx.helper.make_node("Cast", [exit_ + "_f16"], [exit_], to=F32, name="to_f32")
    at = names.index(first)
    nodes = list(graph.node)
    nodes = nodes[:at] + [down] + nodes[at:names.index(last) + 1] + [up] + \
        nodes[names.index(last) + 1:]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.value_info[:]
    onnx.checker.check_model(mixed)
    return mixed
