"""GELU on the accelerator, as a chain of Mul2D, Sum2D and a Tanh fused into a Mul2D.

The newer codegen has no GELU or Erf layer (princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3
src/relay/backend/contrib/mrvl/codegen.cc: ``CreateCompositeMrvlMulLayer``,
``CreateCompositeMrvlSumLayer`` and ``setActivationFunction`` for the fused tanh), so a GELU
lowers to the tanh approximation

    gelu(x) ~= 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))

written as seven layers that keep every intermediate small:

    s = x * x;  s = s * (0.044715 * sqrt(2/pi));  s = s + sqrt(2/pi)
    t = tanh(x * s)                                  (Mul2D with activation_type tanh)
    g = t * 0.5;  g = g + 0.5;  y = x * g            (or g = t + 1; y = (x/2) * g)

Forms matched (``rules/marvell/transformer.yaml``):

- the Erf form torch exports, ``0.5 * x * (1 + erf(x / sqrt(2)))``: Div(x, sqrt 2) or
  Mul(x, 1/sqrt 2), Erf, Add 1, then Mul x and Mul 0.5 in either order, or one Mul by an x/2
  computed before (``Mul(x, 0.5)``);
- the opset-20 ``Gelu`` op, ``approximate="none"`` (exact GELU) or ``"tanh"``.

Bound: over all real x, |gelu_erf(x) - gelu_tanh(x)| <= ``TANH_APPROXIMATION_BOUND`` (4.74e-4,
largest near |x| = 2.7; tests/layers/test_gelu.py checks it on a dense float64 grid). For
``approximate="tanh"`` the chain is that formula, so only fp16 rounding remains. The Erf form's
constants must be sqrt 2 (or 1/sqrt 2) to within ``SQRT2_RTOL``, 1 and 0.5.

fp16 range: x * x stays finite for |x| <= 255, and x * (sqrt(2/pi) + 0.0357 * x**2) for
|x| <= 122. Beyond, an intermediate overflows to +-inf, the fused tanh maps it to +-1 and the
result is x or 0 (the limits of GELU), and the simulator warns (Fp16RangeWarning).

This is a lowering, not a canonical rewrite: the CPU side keeps the model's own nodes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, Union

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, const_value, is_const, static_shape
from mrvl_convert.errors import MrvlConvertError
from mrvl_convert.ir.layout import LayoutContext, TensorLayout, native
from mrvl_convert.ir.match import Composite
from mrvl_convert.layers._decompose import physical_const
from mrvl_convert.layers._kind import Activation
from mrvl_convert.layers._lowering import new_layer

#: max |gelu_erf(x) - gelu_tanh(x)| over the reals, rounded up (float64 grid max 4.7324e-4).
TANH_APPROXIMATION_BOUND = 4.74e-4
#: How far an Erf form's sqrt 2 (or 1/sqrt 2) may be from it, relative: a few float32 steps.
SQRT2_RTOL = 2.0 ** -21
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
CUBIC = 0.044715


@dataclass(frozen=True)
class ErfGelu:
    """A matched Erf-form GELU: its input, and how the 0.5 * x factor is applied."""
    x: gs.Tensor
    half_x: Optional[gs.Tensor]   # x/2 computed before the gate (the gate multiplies by it)
    half: Optional[gs.Node]       # the Mul after the gate that completes 0.5 * x, else None
    form: str


def _scalar(tensor: gs.Tensor) -> Optional[float]:
    if not is_const(tensor):
        return None
    value = const_value(tensor)
    return float(value.reshape(-1)[0]) if value.size == 1 else None


def _producer(tensor: gs.Tensor, op: str) -> Optional[gs.Node]:
    return tensor.inputs[0] if tensor.inputs and tensor.inputs[0].op == op else None


def _split(node: gs.Node) -> Tuple[Optional[gs.Tensor], Optional[float]]:
    """A binary node's activation operand and its scalar constant operand (None where absent)."""
    if len(node.inputs) != 2:
        return None, None
    acts = [t for t in node.inputs if not is_const(t)]
    consts = [_scalar(t) for t in node.inputs if is_const(t)]
    return (acts[0] if len(acts) == 1 else None), (consts[0] if len(consts) == 1 else None)


def _close(value: Optional[float], target: float) -> bool:
    return value is not None and abs(value - target) <= SQRT2_RTOL * abs(target)


def _erf_input(gate: gs.Node) -> Union[Tuple[gs.Tensor, gs.Tensor], str]:
    """(x, the gate's other operand), walking Mul <- Add 1 <- Erf <- x / sqrt 2."""
    for k, tensor in enumerate(gate.inputs[:2]):
        one = _producer(tensor, "Add")
        if one is None or len(gate.inputs) != 2:
            continue
        source, value = _split(one)
        erf = None if source is None or value != 1.0 else _producer(source, "Erf")
        scale = None if erf is None else erf.inputs[0].inputs[0] if erf.inputs[0].inputs \
            else None
        if scale is None or scale.op not in ("Div", "Mul"):
            continue
        x, c = _split(scale)
        if scale.op == "Div" and scale.inputs[0] is not x:
            continue
        target = math.sqrt(2.0) if scale.op == "Div" else math.sqrt(0.5)
        if x is not None and _close(c, target):
            return x, gate.inputs[1 - k]
    return "not Mul(x or 0.5 or x/2, 1 + erf(x / sqrt 2)): a GELU's Erf form"


def _is_half_of(tensor: gs.Tensor, x: gs.Tensor) -> bool:
    node = _producer(tensor, "Mul")
    if node is None:
        return False
    source, value = _split(node)
    return source is x and value == 0.5


def erf_gelu(gate: gs.Node, graph_outputs: Sequence[str]) -> Union[ErfGelu, str]:
    """The Erf-form GELU whose gate (the Mul by 1 + erf) is ``gate``, or why it is not one."""
    found = _erf_input(gate)
    if isinstance(found, str):
        return found
    x, other = found
    if _is_half_of(other, x):
        return ErfGelu(x, other, None, "erf, x/2 first")
    if other is not x and _scalar(other) != 0.5:
        return f"the gate multiplies 1 + erf by {other.name}, not by x, 0.5 or x/2"
    out = gate.outputs[0]
    consumers = out.outputs
    half = consumers[0] if len(consumers) == 1 and out.name not in graph_outputs else None
    if half is None or half.op != "Mul" or len(half.inputs) != 2:
        return "the gate's product is not multiplied further by the missing 0.5 or x"
    rest = half.inputs[1] if half.inputs[0] is out else half.inputs[0]
    wanted_x = other is not x
    if (rest is x) if wanted_x else _scalar(rest) == 0.5:
        return ErfGelu(x, None, half, "erf")
    return f"the Mul after the gate multiplies by {rest.name}, not by the missing " + (
        "x" if wanted_x else "0.5")


def gelu_op_form(node: gs.Node) -> str:
    """The form of an opset-20 Gelu node, for the report."""
    return f"Gelu(approximate={attr(node, 'approximate', 'none')})"


def _chain(composite: Composite, ctx: LayoutContext, x: gs.Tensor, half_x: Optional[gs.Tensor],
           output: gs.Tensor) -> None:
    rank = len(static_shape(x))
    perm = ctx.keep_order(x, native(rank))
    xi, layout = ctx.require(x, perm)
    out = TensorLayout(layout.shape, layout.perm, layout.labels)

    def emit(kind: str, inputs: Sequence[int], const: Optional[float] = None,
             act: Optional[Activation] = None, last: bool = False) -> int:
        consts = [] if const is None else [
            ("operand", physical_const(np.full([1] * rank, const, np.float32), rank, perm))]
        layer = new_layer(composite, kind, inputs, [out] * len(inputs), out,
                          {"activation_type": act}, consts)
        if not last:
            layer.source_nodes = []   # partial results: the per-layer comparison skips them
        return ctx.emit(layer, output if last else None)

    s = emit("Mul2D", [xi, xi])
    s = emit("Mul2D", [s], CUBIC * SQRT_2_OVER_PI)
    s = emit("Sum2D", [s], SQRT_2_OVER_PI)
    t = emit("Mul2D", [xi, s], act=Activation.TANH)
    if half_x is None:
        g = emit("Sum2D", [emit("Mul2D", [t], 0.5)], 0.5)
        emit("Mul2D", [xi, g], last=True)
    else:
        hi, _ = ctx.require(half_x, perm)
        emit("Mul2D", [hi, emit("Sum2D", [t], 1.0)], last=True)


def lower_gelu(composite: Composite, ctx: LayoutContext) -> None:
    """A matched GELU (Erf form or Gelu op) as the tanh-approximation chain."""
    op = composite.binding.node("gelu")
    if op is not None:
        _chain(composite, ctx, op.inputs[0], None, composite.output)
        return
    found = erf_gelu(composite.binding.node("gate"), [])
    if isinstance(found, str):  # pragma: no cover - the rule's check refuses it first
        raise MrvlConvertError(f"internal error: not a GELU: {found}",
                               node=composite.binding.node("gate").name)
    _chain(composite, ctx, found.x, found.half_x, composite.output)
