"""Max or Min of n >= 2 activations of one shape as a max pooling, exactly.

The newer layer set has no maximum layer (princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3
src/relay/backend/contrib/mrvl/codegen.cc), but its Maxpool2D selects the largest value of a
window. With the operands in one physical order ``[1, a, b, c]`` (a 2-D or 3-D tensor is
first viewed as ``[1, 1, m, c]``, m the product of its other axes, by a reshape layer):

- Concat on the physical channel axis: ``[1, a, b, n c]``, element ``(i, j, k c + l)`` is
  operand k's ``(i, j, l)``;
- reshape (the same bytes) to ``[1, a, n b, c]``: that element is at ``(i, n j + k, l)``, the n
  operands of one position side by side on W;
- Maxpool2D with window and strides ``(1, n)``, no padding: ``[1, a, b, c]``, the max of the n;
- a 2-D or 3-D result reshaped back to its physical shape.

``Min(x_1, ..., x_n) = -Max(-x_1, ..., -x_n)``: a Mul2D by -1 after the Concat and one after
the pool. Every layer moves values, selects one or negates one, so the result is bit-exact in
fp16: the operand onnxruntime's Max/Min picks, as the stage holds it (no NaN operand; where a
+0 and a -0 tie either may come out, as onnxruntime's Max and MaxPool may differ there).
``layers/_minmax.py``'s ``o + Relu(f - o)`` remains for an operand that broadcasts.

int8 (``mrvl.qnn_max_pair``: ``DequantizeLinear``s -> Max -> ``QuantizeLinear``, per-tensor):
each operand is requantized to the output's scale where its own differs (a requant layer,
``qnn/concat.py``), then the same layers run on the int8 values. Quantizing is
nondecreasing, so the max of the quantized operands is the quantized max: exact against
onnxruntime's run of the QDQ model. Min is not taken in int8: -(-128) leaves int8.

Device limits, as the rules (``mrvl.max_pair``, ``mrvl.qnn_max_pair``) check them: batch 1
(Concat and Mul2D take batch 1), rank 2 to 4 (reshape), every operand an activation of the
output's shape.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np

from mrvl_convert.core.graph import static_shape
from mrvl_convert.ir.layout import NHWC, LayoutContext, TensorLayout, native
from mrvl_convert.ir.match import Composite
from mrvl_convert.layers._lowering import new_layer


def _view(physical: Sequence[int]) -> TensorLayout:
    """A layout whose physical (NHWC) shape is ``physical`` (4-D, batch first)."""
    n, h, w, c = physical
    return TensorLayout((n, c, h, w), NHWC, "NCHW")


def _four_d(physical: Sequence[int]) -> Tuple[int, int, int, int]:
    """The 4-D physical shape the pair form works on: the tensor's own when 4-D, else
    ``[1, 1, m, c]`` (the same bytes)."""
    if len(physical) == 4:
        return tuple(physical)
    return 1, 1, int(np.prod(physical[:-1])), int(physical[-1])


def lower_max_pair(composite: Composite, ctx: LayoutContext) -> None:
    """Concat, (Mul2D -1), reshape, Maxpool2D (1, n), (Mul2D -1), reshape: see the module."""
    node = composite.binding.node("pair")
    perm = ctx.keep_order(node.inputs[0], native(len(static_shape(node.outputs[0]))))
    pool_operands(composite, ctx, [ctx.require(t, perm) for t in node.inputs])


def pool_operands(composite: Composite, ctx: LayoutContext,
                  pairs: List[Tuple[int, TensorLayout]]) -> None:
    """The layers of the module on ``pairs`` (value index, layout: the operands in one order);
    ``qnn/concat.py`` gives int8 operands on the output's grid."""
    node = composite.binding.node("pair")
    n, rank = len(node.inputs), len(static_shape(node.outputs[0]))
    layout = pairs[0][1]
    _, a, b, c = _four_d(layout.physical_shape)
    indices = [_reshaped(composite, ctx, i, lo, _view((1, a, b, c))) for i, lo in pairs]
    joined = _step(composite, ctx, "Concat", indices, [_view((1, a, b, c))] * n,
                   _view((1, a, b, n * c)), {"axis": 3})
    if node.op == "Min":
        joined = _negated(composite, ctx, joined, _view((1, a, b, n * c)))
    side = _step(composite, ctx, "reshape", [joined], [_view((1, a, b, n * c))],
                 _view((1, a, n * b, c)), {})
    last = node.op == "Max" and rank == 4
    pooled = _view((1, a, b, c)) if not last else layout
    attrs = {"pool_size": (1, n), "kernel_layout_shape": (1, n), "strides": (1, n),
             "padding": (0, 0, 0, 0), "dilation": (1, 1), "ceil_mode": 0}
    index = _step(composite, ctx, "Maxpool2D", [side], [_view((1, a, n * b, c))], pooled,
                  attrs, last)
    if node.op == "Min":
        last = rank == 4
        index = _negated(composite, ctx, index, pooled if not last else layout, last)
    if not last:
        _step(composite, ctx, "reshape", [index], [_view((1, a, b, c))], layout, {}, True)


def _reshaped(composite: Composite, ctx: LayoutContext, index: int, layout: TensorLayout,
              view: TensorLayout) -> int:
    """``index`` as the 4-D view (a reshape layer unless it already is 4-D)."""
    if len(layout.shape) == 4:
        return index
    return _step(composite, ctx, "reshape", [index], [layout], view, {})


def _negated(composite: Composite, ctx: LayoutContext, index: int, layout: TensorLayout,
             last: bool = False) -> int:
    """Mul2D by -1 (exact: the sign flips)."""
    minus = np.full([1] * len(layout.shape), -1.0, dtype=np.float32)
    return _step(composite, ctx, "Mul2D", [index], [layout], layout,
                 {"activation_type": None}, last, [("operand", minus)])


def _step(composite: Composite, ctx: LayoutContext, kind: str, inputs: List[int],
          in_layouts: List[TensorLayout], out: TensorLayout, attrs: dict, last: bool = False,
          consts: Sequence[Tuple[str, np.ndarray]] = ()) -> int:
    """Emit one layer of the form; only the last names the node (a partial result is compared
    by no per-layer map) and writes its output."""
    layer = new_layer(composite, kind, inputs, in_layouts, out, attrs, consts)
    if not last:
        layer.source_nodes = []
    return ctx.emit(layer, composite.output if last else None)
