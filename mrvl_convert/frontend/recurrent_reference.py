"""A QDQ model's recurrent cells unrolled and its Einsums rewritten as a conversion unrolls and
rewrites them, for verify's reference.

An int8 artifact runs an unrolled cell's steps as fp16 layers (``recurrent_unroll.py``); verify's
int8 reference rounds the QDQ model where the artifact's fp16 layers round, finding them by
their source nodes (``verify/kept_fp16.py``). The QDQ model holds the cell as one float node, so
no step was rounded and the fp16 steps' state moved the int8 layers after the cell across
quantization boundaries (ddddocr's common: max_rel 0.0115 against a tolerance of 0.01, a
correct artifact failing). Here the cell is unrolled under the conversion's node names. An
Einsum is the same case: the artifact runs its Transpose/MatMul layers (``einsum_forms.py``) as
fp16 layers, the QDQ model one float Einsum; it is rewritten here as the conversion rewrites it.

Requires: a QDQ model (changed in place: its nodes named as ``load.name_nodes`` names them),
its inputs' shapes in the artifact. Ensures: a model that computes what it did (within
``recurrent_unroll.py``'s bound) with each cell the conversion unrolled unrolled, its
quantized weights folded to the constants onnxruntime computes for them (as canonicalize
folds them, ``qdq.py``), every tensor name kept, each Einsum the forms take rewritten (within
``einsum_forms.py``'s bound); the model itself when it has no cell to unroll and no Einsum to
rewrite.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import onnx
import onnx_graphsurgeon as gs

from mrvl_convert.core.toposort import toposort
from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.einsum_forms import rewrite_einsums
from mrvl_convert.frontend.folding import FoldBounds, fold_constants
from mrvl_convert.frontend.load import name_nodes
from mrvl_convert.frontend.qdq import fold_quantized_constants
from mrvl_convert.frontend.recurrent_steps import STEPS
from mrvl_convert.frontend.recurrent_unroll import unroll_recurrent
from mrvl_convert.frontend.shape_arithmetic import infer_model_shapes
from mrvl_convert.frontend.shapes import resolve_shapes


def unrolled_cells(proto: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]
                   ) -> onnx.ModelProto:
    """``proto`` with its cells unrolled (module docstring), its inputs at ``shapes``."""
    if not any(n.op_type in STEPS or n.op_type == "Einsum" for n in proto.graph.node):
        return proto
    name_nodes(proto)  # an unnamed cell named as the converter named it (LSTM_79), in place
    fixed = _at_shapes(proto, shapes)
    opset = next(o.version for o in fixed.opset_import if o.domain in ("", "ai.onnx"))
    graph = gs.import_onnx(infer_model_shapes(fixed))
    resolve_shapes(graph, fixed.ir_version)  # what a computed Reshape target left unknown
    _fold_weights(graph, proto, opset)
    done = Rewrites()
    # an Einsum the conversion rewrote computes as its layers (an fp16 MatMul between
    # Transposes): the reference rounds those layers, under the conversion's node names
    if not (unroll_recurrent(graph, done, opset) | rewrite_einsums(graph, opset, done)):
        return proto
    toposort(graph.cleanup(remove_unused_graph_inputs=False))
    unrolled = gs.export_onnx(graph)
    unrolled.ir_version = proto.ir_version
    return unrolled


def _at_shapes(proto: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> onnx.ModelProto:
    fixed = onnx.ModelProto()
    fixed.CopyFrom(proto)
    for tensor in fixed.graph.input:
        if tensor.name in shapes:
            tensor.type.tensor_type.shape.ClearField("dim")
            tensor.type.tensor_type.shape.dim.extend(
                onnx.TensorShapeProto.Dimension(dim_value=int(d)) for d in shapes[tensor.name])
    return fixed


def _fold_weights(graph: gs.Graph, proto: onnx.ModelProto, opset: int) -> None:
    """A cell's weights the recipe quantized (a DequantizeLinear of a Concat of constants:
    rec-model's LSTMs) made constants, as canonicalize makes them, so the cell unrolls here
    where it unrolled in the conversion."""
    given = {t.name for t in proto.graph.initializer} | {
        out for node in proto.graph.node if node.op_type == "Constant" for out in node.output}
    fold_constants(graph, False)
    while fold_quantized_constants(graph, opset, FoldBounds.of(graph).tensor_bytes, given):
        fold_constants(graph, False)
