"""squeeze: drop size-1 axes (keeping the batch axis); bytes do not move.

The example of the README's "Adding a layer kind": the whole kind is this file, one rule entry in
``rules/builtin.yaml`` and one line in ``layers/__init__.py``. The contract is upstream TVM
v0.19's ``mrvl.squeeze`` (``src/relay/backend/contrib/mrvl/codegen.cc``).
"""
from __future__ import annotations

from typing import Any, Dict

import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import squeeze_axes
from mrvl_convert.layers._kind import LayerKind, ints, roles
from mrvl_convert.layers.reshape import ReshapeKernel, lowering


def _attrs(node: gs.Node) -> Dict[str, Any]:
    # ONNX allows negative axes; the format writes them counted from the front
    rank = len(node.inputs[0].shape or ())
    return {"axes": tuple(a % rank if rank else a for a in squeeze_axes(node))}


KIND = LayerKind(
    name="squeeze",
    summary="out = in.reshape(shape): the squeezed axes have size 1",
    kernel=ReshapeKernel,
    lower=lowering("squeeze", _attrs),
    required_roles=roles("main"),
    attrs=(ints("axes", "the logical (ONNX) axes removed", default=()),),
    reshape_like=True,
    source="apache/tvm v0.19 src/relay/backend/contrib/mrvl/codegen.cc",
)
