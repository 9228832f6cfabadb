"""What the one-input layers of the newer set share (Relu, LeakyRelu, Clip, Sigmoid, Tanh, Softmax,
Power, Rsqrt): the lowering of a one-node composite and the kernel skeleton.

The newer codegen writes them all in ``CreateCompositeMrvlActivationLayer`` (princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc): a 2-D
layer as ``NC`` with its own shapes, any other rank R4 (``resizeInputOutputLayoutTo4dim``), and
only the kind's own extra attributes (``alpha``, ``a_min``/``a_max``, ``exponent``).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, FrozenSet, Mapping, Optional, Sequence

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import static_shape
from mrvl_convert.ir.layout import LayoutContext, TensorLayout, native
from mrvl_convert.ir.match import Composite
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.base import Kernel
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.layers._kind import MARVELL
from mrvl_convert.layers._lowering import new_layer

#: The newer codegen's source, cited by every kind of the set.
SOURCE = ("princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 "
          "src/relay/backend/contrib/mrvl/codegen.cc CreateCompositeMrvlActivationLayer")
ONLY_MARVELL: FrozenSet[str] = frozenset({MARVELL})

AttrsOf = Callable[[gs.Node], Dict[str, Any]]


def _no_attrs(node: gs.Node) -> Dict[str, Any]:
    return {}


def emit_unary(composite: Composite, ctx: LayoutContext, kind: str, source: gs.Tensor,
               attrs: Dict[str, Any], output: gs.Tensor, *, last: bool = True,
               perm: Optional[Sequence[int]] = None) -> int:
    """One one-input layer on ``source``, in the order it already has inside the stage
    (``LayoutContext.keep_order``; a stage input in the accelerator's own layout: NHWC for 4-D).

    ``last``: the layer computes the composite's output; a layer before it in a decomposition
    (``last=False``) names no source node, so the per-layer comparison skips it. ``perm``: the
    physical order the layer needs (Softmax: its axis last), instead of ``keep_order``'s.
    """
    rank = len(static_shape(source))
    if perm is None:
        perm = ctx.keep_order(source, native(rank))
    index, layout = ctx.require(source, perm)
    out = TensorLayout(tuple(static_shape(output)), layout.perm, layout.labels)
    layer = new_layer(composite, kind, [index], [layout], out, attrs)
    if not last:
        layer.source_nodes = []
    return ctx.emit(layer, output if last else None)


def lowering(kind: str, role: str, attrs_of: AttrsOf = _no_attrs
             ) -> Callable[[Composite, LayoutContext], None]:
    """The lowering of a one-node composite (its node bound to ``role``) into one ``kind`` layer."""
    def lower(composite: Composite, ctx: LayoutContext) -> None:
        node = composite.binding.node(role)
        emit_unary(composite, ctx, kind, node.inputs[0], attrs_of(node), composite.output)
    return lower


class UnaryKernel(Kernel):
    """One input, same output shape; ``compute`` returns a fresh float32 array."""

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        spec.expect_shape(spec.input_shapes[0])

    def run(self, x: np.ndarray) -> np.ndarray:
        return self.compute(x)

    def compute(self, x: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError
