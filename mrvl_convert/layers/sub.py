"""Sub: elementwise difference of two activations, the second broadcasting into the first, with an
optional fused activation. (``x - c`` never gets here: canonicalize makes it ``Add(x, -c)``, a
Sum2D; ``c - x`` stays on CPU, as the format does not say which operand a constant is.)

The contract is the newer codegen's ``mrvl.subtract``: ``CreateCompositeMrvlSubtractLayer``
(princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/
codegen.cc), R4, ``activation_type`` by ``setActivationFunction``. Also the last layer of a
PRelu (``_decompose.py``: Relu(x) - slope * Relu(-x)) and of a Max or Min of two activations
(``_minmax.py``).
"""
from __future__ import annotations

from typing import List, Mapping, Optional, Sequence

import numpy as np

from mrvl_convert.core.graph import static_shape
from mrvl_convert.ir.layout import LayoutContext, TensorLayout, native
from mrvl_convert.ir.match import Composite
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.base import Kernel
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.kernels.ufuncs import activate_inplace
from mrvl_convert.layers._decompose import lower_prelu
from mrvl_convert.layers._minmax import lower_max_min
from mrvl_convert.layers._kind import FUSED_ACTIVATION, LayerKind, roles
from mrvl_convert.layers._lowering import activation, new_layer
from mrvl_convert.layers._unary import ONLY_MARVELL
from mrvl_convert.layers.mul2d import broadcast_operand

SOURCE = ("princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 "
          "src/relay/backend/contrib/mrvl/codegen.cc CreateCompositeMrvlSubtractLayer")


def lower(composite: Composite, ctx: LayoutContext) -> None:
    if composite.binding.node("prelu") is not None:
        lower_prelu(composite, ctx)
        return
    if composite.binding.node("minmax") is not None:
        lower_max_min(composite, ctx)
        return
    node = composite.binding.node("sub")
    rank = len(static_shape(node.outputs[0]))
    perm = ctx.keep_order(node.inputs[0], native(rank))
    indices, layouts = [], []
    for tensor in node.inputs:
        index, layout = ctx.require(tensor, perm)
        indices.append(index)
        layouts.append(layout)
    out = TensorLayout(tuple(static_shape(composite.output)), layouts[0].perm, layouts[0].labels)
    ctx.emit(new_layer(composite, "Sub", indices, layouts, out,
                       {"activation_type": activation(composite)}), composite.output)


class SubKernel(Kernel):
    """a - b (b broadcast into a); optional fused activation."""

    num_inputs = 2

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        broadcast_operand(spec, consts)
        self.activation = spec.value("activation_type")

    def passes_nonfinite(self, index: int) -> bool:
        """With no fused activation (which can map -inf to a finite value): inf or NaN minus
        anything, or anything minus it, is inf or NaN."""
        return self.activation is None

    def run(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return activate_inplace(a - b, self.activation)

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        """ONNX Sub (broadcasting as numpy does), then the activation."""
        return [builder.activation(builder.op("Sub", list(inputs)), self.activation)]


KIND = LayerKind(
    name="Sub",
    summary="elementwise a - b of two activations, b numpy-broadcasting into a",
    kernel=SubKernel,
    lower=lower,
    one_of_roles=roles("sub", "prelu", "minmax"),
    optional_roles=roles("act"),
    attrs=(FUSED_ACTIVATION,),
    layer_sets=ONLY_MARVELL,
    r4=ONLY_MARVELL,
    source=SOURCE,
)
