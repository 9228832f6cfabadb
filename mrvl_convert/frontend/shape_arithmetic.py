"""Shape arithmetic to constants: with the input shapes fixed, every shape a model computes is known.

Exporters write the target shape of a Reshape as arithmetic on the shape of another tensor
(``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``; also Slice, Cast, Range, Equal, Where,
ConstantOfShape, Expand on shape values). Once ``load`` has fixed every input's shape, all of
it is constant, but neither tool alone sees that through a whole model:

- graphsurgeon's ``fold_constants`` folds a ``Shape`` whose input has a static shape (its
  ``fold_shapes``) and then every node whose inputs are all constant (onnxruntime evaluates
  them), but it does not infer the shapes its folding makes known;
- onnx's shape inference (``data_prop=True``) propagates shape values, but Reshape's inference
  before opset 14 does not read them, so the output shape of such a Reshape stays unknown, and so
  do the shapes of everything after it, including the next ``Shape``. An opset-13 model is
  inferred as opset 14 (``infer_model_shapes``), where one inference sees through every block
  of a transformer; older opsets cannot be (Squeeze, Split, Reduce* changed at 13).

So the two alternate: infer the shapes the folded values give, fold what is now known, until a
round resolves nothing more. Each round resolves at least one node or shape, so the loop ends.
Before opset 13, a chain of such Reshapes (one per transformer block) takes a round each.
Nothing here is approximate: a folded value is onnxruntime's own result for constant inputs, and
a weight-only int8 tensor (``Cast(int8 initializer) -> Mul(scale initializer)``) folds the same
way into the float32 weight onnxruntime computes at run time (int8 to float32 is exact, the
product is one float32 multiply), so the layers see ordinary float weights.
"""
from __future__ import annotations

import math
from typing import Callable, Tuple

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.ir.tensor import LazyValues

from mrvl_convert.core.graph import static_shape

Fold = Callable[[gs.Graph], None]


def fold_shape_arithmetic(graph: gs.Graph, original: onnx.ModelProto, fold: Fold) -> gs.Graph:
    """``graph`` (already folded once by ``fold``) with its shape arithmetic folded away and
    every shape that follows from the fixed input shapes inferred, in place; returned for the
    caller's convenience. ``original``: the loaded model (its IR version is kept). No round at
    all when no shape is unknown."""
    progress = _progress(graph)
    while progress[1]:
        if not infer_shapes(graph, original):
            break
        fold(graph)
        after = _progress(graph)
        if after >= progress:
            break
        progress = after
    return graph


def infer_shapes(graph: gs.Graph, original: onnx.ModelProto) -> bool:
    """Give the graph's tensors of unknown shape the shapes onnx infers (``data_prop``) from
    scratch; False when inference fails on it (the shapes stay as they were)."""
    proto = export_weightless(graph, value_info=False)
    proto.ir_version = original.ir_version
    del proto.graph.value_info[:]
    for output in proto.graph.output:
        dims = output.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") or d.dim_value <= 0 for d in dims):
            output.type.tensor_type.ClearField("shape")
    try:
        proto = infer_model_shapes(proto)
    except Exception:  # onnx raises several types; the shapes we had stay
        return False
    tensors = graph.tensors()
    for value in list(proto.graph.value_info) + list(proto.graph.output):
        tensor = tensors.get(value.name)
        if isinstance(tensor, gs.Variable) and static_shape(tensor) is None:
            _take(tensor, value.type.tensor_type)
    return True


def infer_model_shapes(proto: onnx.ModelProto, **options: bool) -> onnx.ModelProto:
    """onnx's shape inference with data propagation (``options``: its other flags), on
    ``proto`` (changed meanwhile, restored). An opset-13 model is inferred as opset 14, whose
    Reshape reads a target shape that data propagation computed (Reshape-13 reads only a
    constant one). For a model both opsets accept, that changes no inferred shape or type:
    what 14 changed is Reshape's ``allowzero`` (default 0, as 13), BatchNormalization's
    ``training_mode`` (default 0, as 13), the recurrent ops' ``layout`` (default 0, as 13),
    more element types, and two new ops. One that 14 refuses (a BatchNormalization with its
    training outputs) is inferred as written. The result names the model's own opset."""
    default = [entry for entry in proto.opset_import if entry.domain in ("", "ai.onnx")]
    if len(default) == 1 and default[0].version == 13:
        default[0].version = 14
        try:
            inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True, **options)
        except Exception:  # refused at 14 (onnx raises several types): as written, below
            inferred = None
        finally:
            default[0].version = 13
        if inferred is not None:
            for entry in inferred.opset_import:
                if entry.domain in ("", "ai.onnx"):
                    entry.version = 13
            return inferred
    return onnx.shape_inference.infer_shapes(proto, data_prop=True, **options)


# Inference reads the shape and type of a float weight, never its values (shape values are
# int64, Resize scales a few floats): larger float tensors go without their bytes, which onnx
# would otherwise copy twice per round.
_VALUES_READ_UP_TO = 1024
_FLOAT_WEIGHTS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                  onnx.TensorProto.DOUBLE)


def drop_weight_data(proto: onnx.ModelProto) -> None:
    """Clear the values of every float initializer larger than inference reads, in place."""
    for init in proto.graph.initializer:
        if init.data_type in _FLOAT_WEIGHTS and int(math.prod(init.dims)) > _VALUES_READ_UP_TO:
            for name in ("raw_data", "float_data", "double_data", "int32_data"):
                init.ClearField(name)


def export_weightless(graph: gs.Graph, value_info: bool = True) -> onnx.ModelProto:
    """``graph`` as ONNX for shape inference: what ``drop_weight_data`` would clear is never
    copied (exporting a weight copies its bytes, to be cleared right after), the rest as
    ``gs.export_onnx`` writes it; without ``value_info``, its graph's ``value_info`` is
    empty (as if deleted after: the callers infer from scratch; a tensor's value info costs
    more to write than its node). ``graph`` is unchanged on return."""
    tensors = graph.tensors()
    swapped = [(t, t._values) for t in tensors.values()
               if isinstance(t, gs.Constant) and _inference_skips(t)]
    untyped = [] if value_info else _value_infos(graph, tensors)
    try:
        for tensor, _ in swapped:
            tensor._values = LazyValues(_bare(tensor))
        for tensor, _, _ in untyped:  # gs writes a value info for a typed or shaped one
            tensor.dtype, tensor.shape = None, None
        proto = gs.export_onnx(graph, do_type_check=False)
    finally:
        for tensor, values in swapped:
            tensor._values = values
        for tensor, dtype, shape in untyped:
            tensor.dtype, tensor.shape = dtype, shape
    if not value_info:
        del proto.graph.value_info[:]  # a subgraph's outer tensors: left as gs writes them
    drop_weight_data(proto)  # a weight gs exports by another path (none known)
    return proto


def _value_infos(graph: gs.Graph, tensors: dict) -> list:
    """(tensor, dtype, shape) of each tensor ``gs.export_onnx`` writes a value info for in
    ``graph``'s own ``value_info`` (not an input or output); none when a node holds a subgraph
    (a subgraph may read the same tensor and keep its value info)."""
    if any(node.attrs and any(node.subgraphs()) for node in graph.nodes):
        return []
    io = {t.name for t in graph.inputs} | {t.name for t in graph.outputs}
    return [(t, t.dtype, t.shape) for name, t in tensors.items()
            if name not in io and isinstance(t, gs.Variable)
            and (t.dtype is not None or t.shape is not None)]


def _inference_skips(tensor: gs.Constant) -> bool:
    """True for a weight whose values ``drop_weight_data`` clears (same test, on the gs side)."""
    if getattr(tensor, "export_dtype", tensor.dtype) != tensor.dtype:  # gs < 0.5.3 has none
        return False
    try:
        onnx_type = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(tensor.dtype))
    except (TypeError, KeyError):  # an onnx-only type gs keeps as is
        return False
    return (onnx_type in _FLOAT_WEIGHTS and tensor.shape is not None
            and int(math.prod(tensor.shape)) > _VALUES_READ_UP_TO)


def _bare(tensor: gs.Constant) -> onnx.TensorProto:
    """The initializer ``gs.export_onnx`` writes for ``tensor``, without its values."""
    bare = onnx.TensorProto(name=tensor.name, dims=list(tensor.shape),
                            data_type=onnx.helper.np_dtype_to_tensor_dtype(np.dtype(tensor.dtype)))
    if tensor.data_location is not None:
        bare.data_location = tensor.data_location
    return bare


def _take(tensor: gs.Variable, inferred: onnx.TypeProto.Tensor) -> None:
    if inferred.HasField("shape"):
        tensor.shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                        for d in inferred.shape.dim]
    if tensor.dtype is None and inferred.elem_type:
        tensor.dtype = onnx.helper.tensor_dtype_to_np_dtype(inferred.elem_type)


def _progress(graph: gs.Graph) -> Tuple[int, int]:
    """(nodes, tensors of unknown shape): a round that lowers neither has resolved nothing."""
    tensors = [t for n in graph.nodes for t in n.outputs if t.name] + list(graph.outputs)
    return len(graph.nodes), sum(static_shape(t) is None for t in tensors)
