"""FC: fully connected, out = in @ W.T + b with W in OI layout, optional fused activation.

Matched from ``Gemm`` or ``MatMul [Add bias]`` and an optional activation. A Flatten of an NHWC
tensor that feeds only FC layers is absorbed: its features stay in NHWC order and the weight
columns are permuted to match (upstream's ``weights_need_transform``). The contract is upstream
TVM v0.19's ``mrvl.fc_ni2no`` (``src/relay/backend/contrib/mrvl/codegen.cc``).
"""
from __future__ import annotations

from typing import List, Mapping, Optional, Sequence

import numpy as np

from mrvl_convert.core.graph import attr, const_value, is_const, present, static_shape
from mrvl_convert.ir.layout import LayoutContext, TensorLayout
from mrvl_convert.ir.match import Composite
from mrvl_convert.kernels.gemm import NUMPY_GEMM, GemmEngine
from mrvl_convert.kernels.base import Kernel, read_bias
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
        index, layout = ctx.require(source, (0, 1))
    weights = const_value(fc.inputs[1]).astype(np.float32)
    if fc.op == "Gemm":
        weights = weights if int(attr(fc, "transB", 0)) else weights.T
        weights = weights * np.float32(attr(fc, "alpha", 1.0))
    else:
        weights = weights.T
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
        # The flatten kept the producer's NHWC order: reorder the weight columns to match.
        logical, perm = layout.scrambled_from
        weights = weights.reshape([out_features] + list(logical[1:]))
        weights = weights.transpose([0] + list(perm[1:])).reshape(out_features, -1)
        layout = TensorLayout(layout.shape, (0, 1), layout.labels)
    consts = [("kernel", np.ascontiguousarray(weights, dtype=np.float32)),
              ("bias", bias.astype(np.float32).reshape(1, out_features))]
    out = TensorLayout(tuple(static_shape(composite.output)), (0, 1), "NC")
    ctx.emit(new_layer(composite, "FC", [index], [layout], out,
                       {"activation_type": activation(composite)}, consts), composite.output)


class FCKernel(Kernel):
    """out = in @ W.T + b, W in OI layout, optional fused activation."""

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        n, i = spec.input_rank(0, 2)
        weight = spec.const("kernel_const_name", consts)
        if weight.ndim != 2 or weight.shape[1] != i:
            raise spec.error("attrs.kernel_const_name", f"kernel has shape {list(weight.shape)}"
                                                        f", expected [O, {i}] (OI)")
        spec.value("kernel_layout")
        o = weight.shape[0]
        spec.expect_shape((n, o))
        # Pre-transposed to [I, O] so run() is one product.
        self.product = self.gemm.bind(fp16_const(spec, "kernel_const_name", weight).T)
        self.add_bias = RowAdd(read_bias(spec, consts, o))
        self.activation = spec.value("activation_type")

    def passes_nonfinite(self, index: int) -> bool:
        """With no fused activation (which can map -inf to a finite value): every output sums a
        product with each input value, and inf * 0 is NaN."""
        return self.activation is None

    def run(self, x: np.ndarray) -> np.ndarray:
        return activate_inplace(self.add_bias(self.product(x)), self.activation)

    def to_onnx(self, builder: OnnxBuilder, inputs: Sequence[str]) -> Optional[List[str]]:
        """ONNX Gemm with the OI weight (transB) and the bias, then the fused activation."""
        spec = self.spec
        weight = builder.fp16_weight(spec, "kernel_const_name")
        bias = builder.float_constant(self.add_bias.row)
        y = builder.op("Gemm", [inputs[0], weight, bias], transB=1)
        return [builder.activation(y, self.activation)]


KIND = LayerKind(
    name="FC",
    summary="out = in @ W.T + b; in is `[N, I]`",
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
    source="apache/tvm v0.19 src/relay/backend/contrib/mrvl/codegen.cc",
)
