"""Every tensor's static shape as the converter knows it, for a pass that reads a model without
converting it (verify's written norms, the int8 recipe's float spans).

onnx's shape inference alone leaves a tensor's shape unknown where the model computes it at run
time (a PyTorch export slicing ``position_ids`` by ``Shape(input_ids)``, ``Range`` on a size,
tf2onnx's Tensordot ``Shape -> Gather -> Concat -> Reshape``); everything after such a tensor
is unknown too, and a rule that needs a static shape (every composite: a layer's layout) then
matches nothing there. With the input shapes fixed the converter folds that arithmetic
(``canonicalize``: ``folding.fold_constants`` and ``shape_arithmetic``); this does the same on a
copy and hands the shapes back.

Contract. Requires: a model and the static shapes of its inputs. Ensures: the model is not
changed; the result maps every tensor that is not folded to a constant and whose shape is then
static to (shape, numpy dtype); it is empty when the copy cannot be loaded (a dynamic input
without a shape, a model ``load`` refuses). Exact: a shape onnx and onnxruntime agree on.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence, Tuple

import onnx
import onnx_graphsurgeon as gs
from onnx import helper

from mrvl_convert.errors import MrvlConvertError
from mrvl_convert.frontend.folding import fold_constants
from mrvl_convert.frontend.load import load_model
from mrvl_convert.frontend.shape_arithmetic import fold_shape_arithmetic

Shapes = Dict[str, Tuple[List[int], Any]]


def folded_shapes(proto: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> Shapes:
    """Tensor name -> (static shape, numpy dtype) of ``proto`` at input ``shapes``, as
    ``canonicalize`` folds it (module docstring)."""
    try:
        loaded = load_model(onnx.ModelProto.FromString(proto.SerializeToString()),
                            shapes={k: list(v) for k, v in shapes.items()})
        graph = gs.import_onnx(loaded.proto)
        fold_constants(graph, False)
        fold_shape_arithmetic(graph, loaded.proto, lambda g: fold_constants(g, False))
    except MrvlConvertError:
        return {}
    return {name: (list(t.shape), t.dtype) for name, t in graph.tensors().items()
            if isinstance(t, gs.Variable) and t.shape is not None
            and all(isinstance(d, int) for d in t.shape)}


def static_input_shapes(proto: onnx.ModelProto) -> Dict[str, List[int]]:
    """The graph inputs (not initializers) whose every dim is a fixed size."""
    inits = {t.name for t in proto.graph.initializer}
    found = {}
    for value in proto.graph.input:
        dims = value.type.tensor_type.shape.dim
        if value.name not in inits and all(d.HasField("dim_value") for d in dims):
            found[value.name] = [d.dim_value for d in dims]
    return found


def fill_unknown_shapes(model: onnx.ModelProto) -> int:
    """``model`` (shapes inferred, every input of static shape) with a ``value_info`` of static
    shape, in place, for each node output whose inferred one is missing or not static and
    whose folded one (``folded_shapes``) is; the count added. Nothing is folded when every
    shape is static already."""
    known = {v.name: v for v in model.graph.value_info}
    outside = {v.name for v in (*model.graph.input, *model.graph.output)}
    unknown = {o for n in model.graph.node for o in n.output if o and o not in outside
               and not _static(known.get(o))}
    inputs = static_input_shapes(model)
    if not unknown or len(inputs) != len(model.graph.input) - len(
            {t.name for t in model.graph.initializer} & {i.name for i in model.graph.input}):
        return 0
    folded = folded_shapes(model, inputs)
    added = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(dtype), shape)
             for name, (shape, dtype) in folded.items() if name in unknown]
    kept = [v for v in model.graph.value_info if v.name not in {a.name for a in added}]
    del model.graph.value_info[:]
    model.graph.value_info.extend([*kept, *added])
    return len(added)


def _static(value: Any) -> bool:
    if value is None or not value.type.tensor_type.HasField("shape"):
        return False
    return all(d.HasField("dim_value") for d in value.type.tensor_type.shape.dim)
