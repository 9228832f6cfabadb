"""The guard after canonicalize's rewrites: every model output keeps the shape the model gives it.

A rewrite that misses a precondition can change what a node computes without any error: reading
an Expand's input where the other operand does not span the expanded shape makes
``Sub(Expand(m, [1, 3, 4, 8]), m)`` a ``[1, 1, 4, 8]`` tensor while the graph still declares
``[1, 3, 4, 8]`` (the artifact then returns the wrong shape under the declared one). Each rewrite
checks its own precondition; this guard catches one that does not, for every rewrite at once:
onnx infers the rewritten graph's output shapes from scratch (the declared ones cleared) and each
must be the loaded model's.

Requires: the canonical graph (shapes as inferred) and the loaded model.
Ensures: returns None when every output whose shape onnx can infer has the loaded model's
shape; raises ``MrvlConvertError`` naming the output and both shapes otherwise. An output onnx
cannot infer (an op without a shape function, inference failing) is not judged here: ``emit``
checks the shapes the CPU stages produce.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import onnx
import onnx_graphsurgeon as gs

from mrvl_convert.errors import MrvlConvertError
from mrvl_convert.frontend.shape_arithmetic import export_weightless, infer_model_shapes


def check_output_shapes(graph: gs.Graph, original: onnx.ModelProto, label: str) -> None:
    """Raise when a rewrite changed the shape of one of ``graph``'s outputs (see above)."""
    declared = _shapes(original.graph.output)
    proto = export_weightless(graph, value_info=False)
    proto.ir_version = original.ir_version
    del proto.graph.value_info[:]
    for output in proto.graph.output:
        output.type.tensor_type.ClearField("shape")
    try:
        inferred = _shapes(infer_model_shapes(proto).graph.output)
    except Exception:  # onnx raises several types: nothing to judge by
        return
    for name, shape in inferred.items():
        want = declared.get(name)
        if shape is not None and want is not None and shape != want:
            raise MrvlConvertError(
                f"internal error: canonicalize's rewrites changed this output's shape from "
                f"{want} to {shape}; a rewrite applied where its precondition does not hold "
                f"(please report it with the model)", model=label, tensor=name)


def _shapes(values) -> Dict[str, Optional[List[int]]]:
    shapes: Dict[str, Optional[List[int]]] = {}
    for value in values:
        tensor = value.type.tensor_type
        dims = tensor.shape.dim if tensor.HasField("shape") else None
        static = dims is not None and all(d.HasField("dim_value") for d in dims)
        shapes[value.name] = [d.dim_value for d in dims] if static else None
    return shapes
