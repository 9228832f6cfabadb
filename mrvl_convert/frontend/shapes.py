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
  do the shapes of everything after it, including the next ``Shape``.

So the two alternate: infer the shapes the folded values give, fold what is now known, until a
round resolves nothing more. Each round resolves at least one node or shape, so the loop ends.
Nothing here is approximate: a folded value is onnxruntime's own result for constant inputs, and
a weight-only int8 tensor (``Cast(int8 initializer) -> Mul(scale initializer)``) folds the same
way into the float32 weight onnxruntime computes at run time (int8 to float32 is exact, the
product is one float32 multiply), so the layers see ordinary float weights.
"""
from __future__ import annotations

from typing import Callable, Optional, Tuple

import onnx
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import static_shape

Fold = Callable[[gs.Graph], None]


def fold_shape_arithmetic(graph: gs.Graph, original: onnx.ModelProto, fold: Fold) -> gs.Graph:
    """``graph`` (already folded once by ``fold``) with its shape arithmetic folded away and
    every shape that follows from the fixed input shapes inferred. ``original``: the loaded
    model (its IR version is kept). Returns ``graph`` itself when nothing is unknown."""
    progress = _progress(graph)
    while progress[1]:
        inferred = infer_shapes(graph, original)
        if inferred is None:
            return graph
        fold(inferred)
        after = _progress(inferred)
        if after >= progress:
            return inferred
        graph, progress = inferred, after
    return graph


def infer_shapes(graph: gs.Graph, original: onnx.ModelProto) -> Optional[gs.Graph]:
    """The graph re-imported with shapes inferred from scratch (``data_prop``), or None when
    onnx's shape inference fails on it (the caller keeps the shapes it had)."""
    proto = gs.export_onnx(graph, do_type_check=False)
    proto.ir_version = original.ir_version
    del proto.graph.value_info[:]
    for output in proto.graph.output:
        dims = output.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") or d.dim_value <= 0 for d in dims):
            output.type.tensor_type.ClearField("shape")
    try:
        proto = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception:  # onnx raises several types; the shapes we had stay
        return None
    return gs.import_onnx(proto).cleanup(remove_unused_graph_inputs=False).toposort()


def _progress(graph: gs.Graph) -> Tuple[int, int]:
    """(nodes, tensors of unknown shape): a round that lowers neither has resolved nothing."""
    tensors = [t for n in graph.nodes for t in n.outputs if t.name] + list(graph.outputs)
    return len(graph.nodes), sum(static_shape(t) is None for t in tensors)
