"""A model stored in float16 (weights, I/O, or float16 arithmetic inside a float32 model) as its
float32 twin, its float16 inputs and outputs kept at the model's boundary.

The accelerator's fp16 mode takes float32 tensors and rounds them itself; an exporter's float16
model (``onnxconverter_common.float16``, ``model.half()`` exports) would otherwise keep every
node on the CPU ("this Conv works on float16"). This pass makes every float16 tensor of the
graph a float32 one, so the rules see what they see for the float32 model, and returns the model
inputs and outputs that were float16: the manifest declares them float16 (``computed_as``
float32), and ``HybridSession`` takes and gives float16 there, widening a feed and rounding an
output as the boundary Cast of the original would, without a CPU stage for that Cast.

Requires: a checked ``ModelProto`` with its weights loaded and shapes inferred (``load.py``).
Ensures: no float16 is left in the main graph or its subgraphs: float16 initializers and
Constant/ConstantOfShape values are float32 with the same values (exact: every float16 is a
float32), ``Cast``/``EyeLike``/random ops that made float16 make float32, every float16 type
(inputs, outputs, value_info) is float32; the names of the model inputs/outputs that were float16
are returned (graph order). A model without float16 is not touched (an empty mapping).

Bound: the result computes the float32 twin of the model: each op that rounded its result to
float16 in the original now keeps float32, so a Cast to float16 inside a float32 model is no
longer a rounding (mixed models), and a value beyond float16's range (65504) is finite where the
original made it inf. Against onnxruntime's run of the float16 original the difference is that
rounding, at most half a float16 ulp (2^-11 relative) per op, carried through the network; the
accelerator rounds to fp16 again, so the artifact's error is judged, as verify does, against
the model as given. A float16 model output is rounded once, at the boundary (round to nearest
even, as onnxruntime's Cast).
"""
from __future__ import annotations

from typing import Dict, Iterator, Optional

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import TensorProto, numpy_helper

_F16, _F32 = TensorProto.FLOAT16, TensorProto.FLOAT
# Ops whose attribute names the element type they make.
_TYPE_ATTRS = {"Cast": "to", "EyeLike": "dtype", "RandomNormal": "dtype",
               "RandomUniform": "dtype", "RandomNormalLike": "dtype",
               "RandomUniformLike": "dtype", "Bernoulli": "dtype"}
_VALUE_ATTRS = {"Constant": "value", "ConstantOfShape": "value"}


def widen_float16(proto: onnx.ModelProto) -> Dict[str, str]:
    """Make ``proto`` (in place) its float32 twin; {model input/output name: "float16"} for the
    boundary tensors that were float16."""
    graph = proto.graph
    boundary = {v.name: "float16" for v in list(graph.input) + list(graph.output)
                if v.type.tensor_type.elem_type == _F16}
    for sub in _graphs(graph):
        _widen_graph(sub)
    return boundary


def same_type_cast(node: gs.Node) -> Optional[str]:
    """Why ``node`` is a no-op, when it is a Cast to its input's own element type (what a
    float16 model's Casts to and from float32 become after ``widen_float16``); else None."""
    if node.op != "Cast" or not node.inputs or not node.outputs:
        return None
    source, to = node.inputs[0], node.attrs.get("to")
    if not isinstance(to, int) or source.dtype is None:
        return None
    target = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(to))
    if np.dtype(source.dtype) != target:
        return None
    return f"Cast to {target.name} of a {target.name} tensor is a no-op"


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every subgraph (If branches, Loop/Scan bodies), depth first."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            for sub in attr.graphs:
                yield from _graphs(sub)


def _widen_graph(graph: onnx.GraphProto) -> None:
    for index, tensor in enumerate(graph.initializer):
        if tensor.data_type == _F16:
            graph.initializer[index].CopyFrom(_widened(tensor))
    for value in list(graph.input) + list(graph.output) + list(graph.value_info):
        if value.type.tensor_type.elem_type == _F16:
            value.type.tensor_type.elem_type = _F32
    for node in graph.node:
        _widen_node(node)


def _widen_node(node: onnx.NodeProto) -> None:
    type_attr, value_attr = _TYPE_ATTRS.get(node.op_type), _VALUE_ATTRS.get(node.op_type)
    for attr in node.attribute:
        if attr.name == type_attr and attr.i == _F16:
            attr.i = _F32
        elif attr.name == value_attr and attr.t.data_type == _F16:
            attr.t.CopyFrom(_widened(attr.t))


def _widened(tensor: TensorProto) -> TensorProto:
    """``tensor`` as float32, its name and values kept (float16 -> float32 is exact)."""
    return numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float32), tensor.name)
