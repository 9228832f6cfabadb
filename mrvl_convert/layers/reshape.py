"""reshape and nn.batch_flatten: layers that only move bytes.

The physical input is already in the order the reshape needs (the layout pass sees to it), so
the layer is a plain C-order reshape to ``shape``. A Flatten of an NHWC tensor that feeds only
FC layers keeps the NHWC order instead (see ``fc.py``). A 4-D output that feeds only Conv2D
layers and whose NHWC order is its own but for size-1 axes (a token tensor [B, T, C] unsqueezed
to [B, 1, T, C], ``frontend/token_forms.py``) is written NHWC: the same bytes, reshaped, so no
layout_transform follows it. The contract is upstream TVM v0.19's
``mrvl.reshape`` and ``mrvl.batch_flatten`` (``src/relay/backend/contrib/mrvl/codegen.cc``).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import static_shape
from mrvl_convert.ir.layout import NHWC, LayoutContext, TensorLayout, default_labels
from mrvl_convert.ir.match import Composite
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.base import Kernel
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.layers._kind import LayerKind, roles
from mrvl_convert.layers._lowering import new_layer

AttrsOf = Callable[[gs.Node], Dict[str, Any]]


def _no_attrs(node: gs.Node) -> Dict[str, Any]:
    return {}


def _read_only_by(composite: Composite, ctx: LayoutContext, layer: str,
                  readers: Callable[[Composite], Iterable[gs.Node]]) -> bool:
    """Whether the output stays in the stage and every node reading it reads it as its first
    input and is one of ``readers`` of a ``layer`` composite of the stage."""
    out = composite.output
    if out.name in {t.name for t in ctx.stage.outputs}:
        return False
    allowed = ctx.memo(("readers", layer), lambda: {
        n.name for u in ctx.stage.units
        if u.composite is not None and u.composite.rule.layer == layer
        for n in readers(u.composite)})
    return bool(out.outputs) and all(c.name in allowed and c.inputs[0] is out
                                     for c in out.outputs)


def _flatten_feeds_fc_only(composite: Composite, ctx: LayoutContext) -> bool:
    return _read_only_by(composite, ctx, "FC", lambda fc: [fc.binding.node("fc")])


def _feeds_conv_only(composite: Composite, ctx: LayoutContext) -> bool:
    # Any node of the composite: a Pad fused into the Conv2D is what reads the image.
    return _read_only_by(composite, ctx, "Conv2D", lambda conv: conv.nodes)


def _out_perm(composite: Composite, ctx: LayoutContext, shape: Sequence[int]) -> tuple:
    """NHWC when that holds the bytes of the logical order and only Conv2D layers read the
    output (they would ask for NHWC: a layout_transform moving size-1 axes); else logical."""
    logical = tuple(range(len(shape)))
    if len(shape) == 4 and TensorLayout(tuple(shape), logical, "NCHW").bytes_like(NHWC) \
            and _feeds_conv_only(composite, ctx):
        return NHWC
    return logical


def lowering(kind: str, attrs_of: AttrsOf = _no_attrs) -> Callable[[Composite, LayoutContext], None]:
    """The lowering of a reshape-like layer ``kind`` whose attributes ``attrs_of`` reads."""
    def lower(composite: Composite, ctx: LayoutContext) -> None:
        node = composite.binding.node("main")
        source = node.inputs[0]
        current = ctx.layout(source)
        rank_out = len(static_shape(composite.output))
        if (kind == "nn.batch_flatten" and current.scrambled_from is None
                and not current.bytes_like(range(len(current.shape)))
                and current.perm[0] == 0 and _flatten_feeds_fc_only(composite, ctx)):
            index = ctx.values[source.name][0]
            out = TensorLayout(tuple(static_shape(composite.output)), (0, 1), "NC",
                               scrambled_from=(current.shape, current.perm))
            ctx.emit(new_layer(composite, kind, [index], [current], out, {}), composite.output)
            return
        index, layout = ctx.require(source, tuple(range(len(current.shape))), any_shape=True)
        # A reshape keeping the rank keeps the axis names; otherwise they start afresh.
        labels = layout.labels if rank_out == len(layout.labels) else default_labels(rank_out)
        shape = tuple(static_shape(composite.output))
        out = TensorLayout(shape, _out_perm(composite, ctx, shape), labels)
        ctx.emit(new_layer(composite, kind, [index], [layout], out, attrs_of(node)),
                 composite.output)
    return lower


class ReshapeKernel(Kernel):
    """out = in.reshape(shape): the physical input is already in the order the reshape needs."""

    exact = True
    keeps_every_value = True

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        in_shape = spec.input_shapes[0]
        if int(np.prod(in_shape)) != int(np.prod(spec.shape)):
            raise spec.error("shape", f"{list(spec.shape)} does not hold the "
                                      f"{int(np.prod(in_shape))} elements of input "
                                      f"{list(in_shape)}")
        self.out_shape = spec.shape

    def run(self, x: np.ndarray) -> np.ndarray:
        return x.reshape(self.out_shape)

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        return [builder.op("Reshape", [inputs[0], builder.shape(self.out_shape)])]


_SOURCE = "apache/tvm v0.19 src/relay/backend/contrib/mrvl/codegen.cc"
RESHAPE = LayerKind(
    name="reshape", summary="out = in.reshape(shape) (the physical input is already in the "
                            "order the reshape needs)",
    kernel=ReshapeKernel, lower=lowering("reshape"), required_roles=roles("main"),
    reshape_like=True, source=_SOURCE)
BATCH_FLATTEN = LayerKind(
    name="nn.batch_flatten", summary="out = in.reshape([N, -1]); before an FC it may keep the "
                                     "NHWC order, which the FC's weights absorb",
    kernel=ReshapeKernel, lower=lowering("nn.batch_flatten"), required_roles=roles("main"),
    reshape_like=True, source=_SOURCE)
