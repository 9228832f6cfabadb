"""expand_dims: insert size-1 axes (ONNX Unsqueeze), keeping the batch; bytes do not move.

The contract is the newer Marvell codegen's ``mrvl.expand_dims``: princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc
``CreateMrvlExpandDimsLayer``: one input, ``data_layout`` and ``out_layout`` "GENERIC", no
attributes of the op (the layout shapes say everything).
"""
from __future__ import annotations

from mrvl_convert.layers._kind import MARVELL, LayerKind, roles, written
from mrvl_convert.layers.reshape import ReshapeKernel, lowering

KIND = LayerKind(
    name="expand_dims",
    summary="out = in.reshape(shape): the inserted axes have size 1",
    kernel=ReshapeKernel,
    lower=lowering("expand_dims"),
    required_roles=roles("main"),
    attrs=(written("data_layout", "GENERIC", "as the codegen writes it for expand_dims"),
           written("out_layout", "GENERIC", "as the codegen writes it for expand_dims")),
    reshape_like=True,
    layer_sets=frozenset({MARVELL}),
    source="princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 "
           "src/relay/backend/contrib/mrvl/codegen.cc CreateMrvlExpandDimsLayer",
)
