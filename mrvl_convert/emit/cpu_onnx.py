"""Plain ONNX for one CPU stage: the canonical graph's nodes of that stage, loadable by onnxruntime."""
from __future__ import annotations

from typing import AbstractSet, List

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter, update_import_domains
from onnx_graphsurgeon.ir.tensor import SparseValues

from mrvl_convert.ir.stages import Stage

# protobuf cannot serialise a message over 2 GiB; bigger stages keep their weights beside them.
EXTERNAL_DATA_THRESHOLD = 1 << 30


def _value_info(tensor: gs.Tensor) -> onnx.ValueInfoProto:
    dtype = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(tensor.dtype))
    shape = list(tensor.shape) if tensor.shape is not None else None
    return onnx.helper.make_tensor_value_info(tensor.name, dtype, shape)


def source(graph: gs.Graph, wanted: AbstractSet[str]) -> onnx.ModelProto:
    """What ``build`` reads of ``gs.export_onnx(graph, do_type_check=False)`` for stages of
    the nodes ``wanted``, without exporting the rest: those nodes, the initializers they read
    and the value_info of what they write, each in the export's order, and the model's opsets
    and functions as exported. ``build`` of it is byte for byte ``build`` of the whole export
    (an unrolled model's CPU stage of two nodes no longer exports its thousands)."""
    nodes = [OnnxExporter.export_node(n) for n in graph.nodes if n.name in wanted]
    read = {name for node in nodes for name in _all_inputs(node)}
    written = {name for node in nodes for name in node.output}
    tensors = graph.tensors()
    boundary = {t.name for t in graph.inputs + graph.outputs}
    # export_graph's filters: dense Constants are initializers; a Variable that is no graph
    # input or output and has a dtype or a shape is a value_info
    initializer = [OnnxExporter.export_tensor_proto(t) for name, t in tensors.items()
                   if name in read and isinstance(t, gs.Constant)
                   and not isinstance(t._values, SparseValues)]
    value_info = [OnnxExporter.export_value_info_proto(t, False) for name, t in tensors.items()
                  if name in written and name not in boundary and isinstance(t, gs.Variable)
                  and (t.dtype is not None or t.shape is not None)]
    exported = onnx.helper.make_graph(nodes, graph.name, [], [], initializer,
                                      value_info=value_info)
    model = onnx.helper.make_model(
        exported, functions=[OnnxExporter.export_function(f) for f in graph.functions],
        opset_imports=update_import_domains(graph))
    model.producer_name, model.producer_version = graph.producer_name, graph.producer_version
    return model


def build(stage: Stage, canonical: onnx.ModelProto) -> onnx.ModelProto:
    wanted = {n.name for n in stage.nodes}
    nodes = [n for n in canonical.graph.node if n.name in wanted]
    used = {name for n in nodes for name in _all_inputs(n)}
    initializers = [t for t in canonical.graph.initializer if t.name in used]
    graph = onnx.helper.make_graph(
        nodes, stage.name, [_value_info(t) for t in stage.inputs],
        [_value_info(t) for t in stage.outputs], initializers)
    outputs = {o for n in nodes for o in n.output}  # once, not per value_info (tiny-pron: 848k)
    value_info = [v for v in canonical.graph.value_info if v.name in outputs]
    graph.value_info.extend(value_info)
    model = onnx.helper.make_model(graph, opset_imports=list(canonical.opset_import),
                                   ir_version=canonical.ir_version,
                                   producer_name="mrvl_convert")
    model.functions.extend(canonical.functions)
    return model


def _all_inputs(node: onnx.NodeProto) -> List[str]:
    """Inputs of a node, including the outer-scope names its subgraphs (If/Loop bodies) read."""
    names = [i for i in node.input if i]
    for attribute in node.attribute:
        graphs = list(attribute.graphs) + ([attribute.g] if attribute.HasField("g") else [])
        for sub in graphs:
            for inner in sub.node:
                names.extend(_all_inputs(inner))
    return names


def needs_external_data(model: onnx.ModelProto) -> bool:
    total = sum(len(t.raw_data) for t in model.graph.initializer)
    return total > EXTERNAL_DATA_THRESHOLD

