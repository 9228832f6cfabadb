"""FC: fully connected, out = in @ W.T + b with W in OI layout, optional fused activation.

Matched from ``Gemm`` or ``MatMul [Add bias]`` and an optional activation. A Flatten of an NHWC
tensor that feeds only FC layers is absorbed: its features stay in NHWC order and the weight
columns are permuted to match (upstream's ``weights_need_transform``). The contract is upstream
TVM v0.19's ``mrvl.fc_ni2no`` (``src/relay/backend/contrib/mrvl/codegen.cc``).

In the newer set an FC also takes a token tensor ``[B, T, C]`` (a transformer's projections:
``MatMul`` by a constant ``[C, O]``), over its last axis, out ``[B, T, O]``: Relay's ``nn.dense``
on a 3-D input, which the newer codegen writes as NHWC ``[B, T, C, 1]`` -> ``[B, T, O, 1]``
(princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 src/relay/backend/contrib/mrvl/
codegen.cc ``CreateCompositeMrvlFcLayer``: ``layout_vec.push_back(1)``, ``data_layout`` NHWC;
its mrvl.py ``fc_ni2no`` asks only for a float32 2-D constant weight).
"""
from __future__ import annotations

from typing import List, Mapping, Optional, Sequence

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, const_value, is_const, present, static_shape
from mrvl_convert.ir.layout import LayoutContext, TensorLayout, default_labels, identity
from mrvl_convert.ir.match import Composite
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine, Product
from mrvl_convert.kernels.base import Kernel, LazyWeights, read_bias
from mrvl_convert.kernels.fp16 import fp16_const
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.kernels.ufuncs import RowAdd, activate_inplace
from mrvl_convert.layers._kind import FUSED_ACTIVATION, Const, LayerKind, roles, written
from mrvl_convert.layers._lowering import activation, new_layer


def lower(composite: Composite, ctx: LayoutContext) -> None:
    fc = composite.binding.node("fc")
    source = fc.inputs[0]
    layout = ctx.layout(source)
    if layout.scrambled_from is not None:
        index = ctx.values[source.name][0]
    else:
        index, layout = ctx.require(source, identity(len(layout.shape)))
    weights = _kernel(fc, layout, ctx)
    out_features = weights.shape[0]
    bias = np.zeros(out_features, np.float32)
    c = present(fc, 2) if fc.op == "Gemm" else None
    if c is not None:
        bias = bias + np.broadcast_to(const_value(c).astype(np.float32).reshape(-1),
                                      (out_features,)) * np.float32(attr(fc, "beta", 1.0))
    add = composite.binding.node("bias")
    if add is not None:
        const = [t for t in add.inputs if is_const(t)][0]
        bias = bias + np.broadcast_to(const_value(const).astype(np.float32).reshape(-1),
                                      (out_features,))
    if layout.scrambled_from is not None:
        layout = TensorLayout(layout.shape, (0, 1), layout.labels)
    consts = [("kernel", weights),
              ("bias", bias.astype(np.float32).reshape(1, out_features))]
    rank = len(static_shape(composite.output))
    out = TensorLayout(tuple(static_shape(composite.output)), identity(rank), default_labels(rank))
    ctx.emit(new_layer(composite, "FC", [index], [layout], out,
                       {"activation_type": activation(composite)}, consts), composite.output)


def _kernel(fc: gs.Node, layout: TensorLayout, ctx: LayoutContext) -> np.ndarray:
    """The OI float32 kernel, made once per stage for every FC reading the same weight buffer
    (an unrolled recurrent cell's steps all read one ``R^T``: its transposed copy, then its
    base64 text, are made once, not per step). Read-only: the layers share it."""
    source = const_value(fc.inputs[1])
    key = ("FC kernel", source.__array_interface__["data"][0], source.shape, source.strides,
           source.dtype.str, fc.op, int(attr(fc, "transB", 0)), float(attr(fc, "alpha", 1.0)),
           layout.scrambled_from)
    # The memo holds ``source``: no other array can take its buffer's address while it lives.
    return ctx.memo(key, lambda: (source, _oriented(fc, source, layout)))[1]


def _oriented(fc: gs.Node, source: np.ndarray, layout: TensorLayout) -> np.ndarray:
    weights = source.astype(np.float32)
    if fc.op == "Gemm":
        weights = weights if int(attr(fc, "transB", 0)) else weights.T
        weights = weights * np.float32(attr(fc, "alpha", 1.0))
    else:
        weights = weights.T
    if layout.scrambled_from is not None:
        # The flatten kept the producer's NHWC order: reorder the weight columns to match.
        out_features = weights.shape[0]
        logical, perm = layout.scrambled_from
        weights = weights.reshape([out_features] + list(logical[1:]))
        weights = weights.transpose([0] + list(perm[1:])).reshape(out_features, -1)
    kernel = np.ascontiguousarray(weights, dtype=np.float32)
    kernel.flags.writeable = False
    return kernel


class FCKernel(Kernel):
    """out = in @ W.T + b over the last axis of a 2-D or 3-D input, W in OI layout, optional
    fused activation."""

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        in_shape = spec.input_shapes[0]
        if len(in_shape) not in (2, 3):
            raise spec.error("inputs", f"input 0 has physical shape {list(in_shape)}, "
                                       "expected rank 2 or 3")
        i = in_shape[-1]
        weight = spec.const("kernel_const_name", consts)
        if weight.ndim != 2 or weight.shape[1] != i:
            raise spec.error("attrs.kernel_const_name", f"kernel has shape {list(weight.shape)}"
                                                        f", expected [O, {i}] (OI)")
        spec.value("kernel_layout")
        o = weight.shape[0]
        spec.expect_shape((*in_shape[:-1], o))
        self.rows = (*in_shape[:-1], o)
        fp16_const(spec, "kernel_const_name", weight)  # its range error: now
        # Pre-transposed to [I, O] so run() is one product; made on the first run, from the
        # raw array until a graph-engine segment holds the rounded one (``to_onnx``).
        self.weights = LazyWeights(lambda: fp16_const(spec, "kernel_const_name", weight),
                                   lambda rounded: self.gemm.bind(rounded.T))
        self.add_bias = RowAdd(read_bias(spec, consts, o))
        self.activation = spec.value("activation_type")

    def passes_nonfinite(self, index: int) -> bool:
        """With no fused activation (which can map -inf to a finite value): every output sums a
        product with each input value, and inf * 0 is NaN."""
        return self.activation is None

    def run(self, x: np.ndarray) -> np.ndarray:
        # One [rows, I] product whatever the rank: every row of [B, T, I] is one input vector.
        y = self.weights.get()(x.reshape(-1, x.shape[-1])).reshape(self.rows)
        return activate_inplace(self.add_bias(y), self.activation)

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        """ONNX Gemm with the OI weight (transB) and the bias, then the fused activation (a
        3-D input: MatMul by the transposed weight, then Add)."""
        spec = self.spec
        bias = builder.float_constant(self.add_bias.row)
        rounded = fp16_const(spec, "kernel_const_name", spec.const("kernel_const_name",
                                                                   builder.consts))
        # The first run's weights from the segment's own (the raw constant need not outlive
        # compile); a 3-D input's [I, O] product weight is the transpose of the MatMul's.
        if len(self.rows) == 2:
            weight = builder.constant(rounded, "w")
            y = builder.op("Gemm", [inputs[0], weight, bias], transB=1)
            self.weights.share(builder.reader(weight))
        else:
            weight = builder.constant(np.ascontiguousarray(rounded.T), "w")
            product = builder.op("MatMul", [inputs[0], weight])
            y = builder.op("Add", [product, bias])
            read = builder.reader(weight)
            self.weights.share(lambda: read().T)
        return [builder.activation(y, self.activation)]

    @property
    def product(self) -> Product:
        """The prepared product, as it was named when made at compile time."""
        return self.weights.get()


KIND = LayerKind(
    name="FC",
    summary="out = in @ W.T + b over the last axis; in is `[N, I]`, or `[B, T, I]` in the "
            "newer set (written NHWC `[B, T, I, 1]`)",
    kernel=FCKernel,
    lower=lower,
    required_roles=roles("fc"),
    optional_roles=roles("bias", "act"),
    attrs=(
        written("kernel_layout", "OI", "the kernel constant's layout", checked=True),
        written("bias_layout", "-O", "the bias constant's layout"),
        written("out_dtype", "float32", "as upstream writes it"),
        written("units", "", "as upstream writes it"),
        FUSED_ACTIVATION,
    ),
    consts=(Const("kernel", "kernel", "OI `[O, I]`"),
            Const("bias", "bias", "`[1, O]`")),
    compute_heavy=True,
    quantizable=True,
    nhwc_3d=True,
    source="apache/tvm v0.19 src/relay/backend/contrib/mrvl/codegen.cc",
)
