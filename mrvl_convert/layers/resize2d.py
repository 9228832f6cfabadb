"""Resize2D: nearest-neighbour upsampling of an NHWC tensor by integer factors.

Matched from ONNX ``Resize`` (mode nearest) and ``Upsample``; the rule
(``rules/marvell/resize2d.yaml``) admits only the coordinate modes for which nearest
upsampling by an integer factor is ``out[h, w] = in[h // sh, w // sw]``, so the layer is exact.
The contract is the newer Marvell codegen's ``mrvl.resize2d``: princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/codegen.cc
``CreateMrvlResize2DLayer`` (4-D NHWC input, integer scale, nearest_neighbor only; the
attributes are Relay's ``Resize2DAttrs`` as ``SetCallNodeAttribute`` writes them).
"""
from __future__ import annotations

from typing import List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mrvl_convert.core.graph import attr, static_shape
from mrvl_convert.ir.layout import NHWC, LayoutContext
from mrvl_convert.ir.match import Composite
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.base import Kernel
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.layers._kind import MARVELL, Attr, LayerKind, ints, roles, written
from mrvl_convert.layers._lowering import new_layer, spatial_out

_NEAREST = "nearest_neighbor"


def lower(composite: Composite, ctx: LayoutContext) -> None:
    node = composite.binding.node("resize")
    index, layout = ctx.require(node.inputs[0], NHWC)
    out_shape = static_shape(composite.output)
    attrs = {"size": tuple(out_shape[2:]),
             "coordinate_transformation_mode": str(attr(node, "coordinate_transformation_mode",
                                                        "half_pixel" if node.op == "Resize"
                                                        else "asymmetric")),
             "rounding_method": str(attr(node, "nearest_mode", "round_prefer_floor")
                                    if node.op == "Resize" else "floor")}
    ctx.emit(new_layer(composite, "Resize2D", [index], [layout], spatial_out(composite), attrs),
             composite.output)


def _factors(in_shape: Tuple[int, ...], out_shape: Tuple[int, ...]) -> Optional[Tuple[int, int]]:
    """(sh, sw) when the NHWC output is the input scaled by integers on H and W only."""
    if len(in_shape) != 4 or len(out_shape) != 4 or 0 in in_shape:
        return None
    if in_shape[0] != out_shape[0] or in_shape[3] != out_shape[3]:
        return None
    if out_shape[1] % in_shape[1] or out_shape[2] % in_shape[2]:
        return None
    return out_shape[1] // in_shape[1], out_shape[2] // in_shape[2]


class Resize2DKernel(Kernel):
    """out[n, h, w, c] = in[n, h // sh, w // sw, c] (NHWC, integer factors sh, sw >= 1)."""

    exact = True

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        in_shape = spec.input_rank(0, 4)
        size = spec.value("size")
        if tuple(size) != tuple(spec.shape[1:3]):
            raise spec.error("attrs.size", f"is {list(size)} but the output shape is "
                                           f"{list(spec.shape)}")
        factors = _factors(in_shape, spec.shape)
        if factors is None:
            raise spec.error("shape", f"{list(spec.shape)} is not the NHWC input "
                                      f"{list(in_shape)} scaled by integers on H and W")
        self.factors = factors

    def run(self, x: np.ndarray) -> np.ndarray:
        sh, sw = self.factors
        return np.ascontiguousarray(np.repeat(np.repeat(x, sh, axis=1), sw, axis=2))

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        """ONNX Resize, nearest, asymmetric, floor: in[h // sh, w // sw] on NHWC's H and W."""
        sh, sw = self.factors
        scales = builder.float_constant(np.array([1, sh, sw, 1], np.float32))
        return [builder.op("Resize", [inputs[0], "", scales], mode="nearest",
                           coordinate_transformation_mode="asymmetric", nearest_mode="floor")]


KIND = LayerKind(
    name="Resize2D",
    summary="nearest-neighbour upsampling of an NHWC tensor by integer factors: "
            "out[n, h, w, c] = in[n, h // sh, w // sw, c], sh and sw from `size`",
    kernel=Resize2DKernel,
    lower=lower,
    required_roles=roles("resize"),
    attrs=(ints("size", "the output (H, W)", count=2),
           written("layout", "NHWC", "the data layout", checked=True),
           written("method", _NEAREST, "the interpolation", checked=True),
           Attr("coordinate_transformation_mode", "str",
                "the model's coordinate mode (informational: every admitted mode gives "
                "in[h // sh, w // sw])", default="asymmetric"),
           Attr("rounding_method", "str", "the model's nearest rounding (informational)",
                default="floor")),
    layer_sets=frozenset({MARVELL}),
    source="princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 "
           "src/relay/backend/contrib/mrvl/codegen.cc CreateMrvlResize2DLayer",
)
