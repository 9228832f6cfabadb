"""GELU on the accelerator, as a chain of Mul2D, Sum2D and a sigmoid fused into a Mul2D.

The newer codegen has no GELU or Erf layer (princekumar70/tvm@9446d803b92cdc8c4996a11f52b8f13dec1a02a3
src/relay/backend/contrib/mrvl/codegen.cc: ``CreateCompositeMrvlMulLayer``,
``CreateCompositeMrvlSumLayer`` and ``setActivationFunction`` for the fused sigmoid), so a GELU
lowers to the tanh approximation

    gelu(x) ~= 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))

which the identity 0.5 * (1 + tanh(u)) = sigmoid(2u) turns into five layers that keep every
intermediate small (each layer is one more fp16 rounding):

    s = x * x;  s = s * (2 * 0.044715 * sqrt(2/pi));  s = s + 2 * sqrt(2/pi)
    g = sigmoid(x * s)                               (Mul2D with activation_type sigmoid)
    y = x * g

When the model computes x/2 first (one Mul by it after the gate), that Mul is a layer of its own
(``mrvl.mul``, outside the GELU composite); the chain reads it as sigmoid((x/2) * s) with s's
constants doubled again (4 * 0.044715 * sqrt(2/pi), 4 * sqrt(2/pi)), so no layer is left unread.

Forms matched (``rules/marvell/transformer.yaml``):

- the Erf form torch exports, ``0.5 * x * (1 + erf(x / sqrt(2)))``: Div(x, sqrt 2) or
  Mul(x, 1/sqrt 2), Erf, Add 1, then Mul x and Mul 0.5 in either order, or one Mul by an x/2
  computed before (``Mul(x, 0.5)``);
- the tanh form written node by node: Pow(x, 3) or x * (x * x) (then the model's x * x is
  reused), Mul 0.044715, Add x, Mul sqrt(2/pi), Tanh, Add 1, Mul x and Mul 0.5 (as above);
- the opset-20 ``Gelu`` op, ``approximate="none"`` (exact GELU) or ``"tanh"``.

In a QDQ model x is read through a DequantizeLinear copy per reader (``frontend/qdq.py``):
equal copies are one x (``core.graph.same_value``), and the chain reads each of them (the
Div's for x * x and the sigmoid's argument, the gate's for the last product), so none is left
unread; exact, the copies compute equal floats.

Bound: over all real x, |gelu_erf(x) - gelu_tanh(x)| <= ``TANH_APPROXIMATION_BOUND`` (4.74e-4,
largest near |x| = 2.7; tests/layers/test_gelu.py checks it on a dense float64 grid). For
``approximate="tanh"`` and the tanh form the chain is that formula, so only fp16 rounding
remains. A form's constants must be 1 and 0.5 exactly, and sqrt 2 (or 1/sqrt 2), sqrt(2/pi)
and 0.044715 to within ``CONST_RTOL`` relative (2**-16: a constant written with six decimals
passes; far below the 2**-11 rounding every constant gets as fp16 on the accelerator).

fp16 range: x * x stays finite for |x| <= 255, and the sigmoid's argument
x * (2 * sqrt(2/pi) + 0.0714 * x**2) for |x| <= 97 (the tanh's argument, half of it, stayed
finite to 122). Past 97 that argument exceeds fp16's largest value (the simulator applies
the fused activation to the float32 product, the device may saturate it to +-inf); sigmoid of it
is then 1 or 0 either way, so y is x or 0, GELU's limits. Past 255 x * x overflows to +inf, the
result is again x or 0, and the simulator warns (Fp16RangeWarning).

This is a lowering, not a canonical rewrite: the CPU side keeps the model's own nodes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Collection, Optional, Sequence, Tuple, Union

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import const_value, is_const, same_value, static_shape
from mrvl_convert.errors import MrvlConvertError
from mrvl_convert.ir.layout import LayoutContext, TensorLayout, native
from mrvl_convert.ir.match import Composite
from mrvl_convert.layers._decompose import physical_const
from mrvl_convert.layers._kind import Activation
from mrvl_convert.layers._lowering import new_layer

#: max |gelu_erf(x) - gelu_tanh(x)| over the reals, rounded up (float64 grid max 4.7324e-4).
TANH_APPROXIMATION_BOUND = 4.74e-4
#: How far a form's irrational constants may be from their values, relative.
CONST_RTOL = 2.0 ** -16
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
CUBIC = 0.044715


@dataclass(frozen=True)
class GeluMatch:
    """A GELU written node by node: its input, and how the 0.5 * x factor is applied."""
    x: gs.Tensor
    half_x: Optional[gs.Tensor]   # x/2 computed before the gate (the gate multiplies by it)
    half: Optional[gs.Node]       # the Mul after the gate that completes 0.5 * x, else None
    square: Optional[gs.Tensor]   # the model's own x * x (tanh form's x * (x * x)), else None
    # In a QDQ model each reader of x reads its own DequantizeLinear copy (``same_value``):
    # the copy the chain's x * x reads, and the one the last product reads, so each is read.
    x_square: Optional[gs.Tensor] = None
    x_out: Optional[gs.Tensor] = None


def _scalar(tensor: gs.Tensor) -> Optional[float]:
    if not is_const(tensor):
        return None
    value = const_value(tensor)
    return float(value.reshape(-1)[0]) if value.size == 1 else None


def _producer(tensor: gs.Tensor, op: str) -> Optional[gs.Node]:
    return tensor.inputs[0] if tensor.inputs and tensor.inputs[0].op == op else None


def _split(node: Optional[gs.Node]) -> Tuple[Optional[gs.Tensor], Optional[float]]:
    """A binary node's activation operand and its scalar constant operand (None where absent)."""
    if node is None or len(node.inputs) != 2:
        return None, None
    acts = [t for t in node.inputs if not is_const(t)]
    consts = [_scalar(t) for t in node.inputs if is_const(t)]
    return (acts[0] if len(acts) == 1 else None), (consts[0] if len(consts) == 1 else None)


def _close(value: Optional[float], target: float) -> bool:
    return value is not None and abs(value - target) <= CONST_RTOL * abs(target)


def _is_square_of(tensor: gs.Tensor, x: gs.Tensor) -> bool:
    node = _producer(tensor, "Mul")
    return node is not None and len(node.inputs) == 2 and all(same_value(t, x) for t in node.inputs)


def _erf_source(tensor: gs.Tensor) -> Optional[Tuple[gs.Tensor, None, gs.Tensor]]:
    """x, where ``tensor`` is erf(x / sqrt 2) (Div by sqrt 2 or Mul by 1/sqrt 2)."""
    erf = _producer(tensor, "Erf")
    scale = erf.inputs[0].inputs[0] if erf is not None and erf.inputs[0].inputs else None
    if scale is None or scale.op not in ("Div", "Mul"):
        return None
    x, c = _split(scale)
    if x is None or (scale.op == "Div" and scale.inputs[0] is not x):
        return None
    return (x, None, x) if _close(c, math.sqrt(2.0) if scale.op == "Div" else math.sqrt(0.5)) \
        else None


def _cube_of(tensor: gs.Tensor, x: gs.Tensor
             ) -> Optional[Tuple[gs.Tensor, Optional[gs.Tensor], gs.Tensor]]:
    """(x, the model's x * x or None, the x the Pow reads) where ``tensor`` is Pow(x, 3) or
    x * (x * x). The x of x * (x * x) must be x itself: the chain reuses the model's x * x,
    and has no layer left to read a third copy of x."""
    node = tensor.inputs[0] if tensor.inputs else None
    if node is not None and node.op == "Pow":
        base, exponent = _split(node)
        return (x, None, base) if base is node.inputs[0] and same_value(base, x) \
            and exponent == 3.0 else None
    if node is None or node.op != "Mul" or len(node.inputs) != 2:
        return None
    for k in (0, 1):
        if node.inputs[k] is x and _is_square_of(node.inputs[1 - k], x):
            return x, node.inputs[1 - k], x
    return None


def _tanh_source(tensor: gs.Tensor
                 ) -> Optional[Tuple[gs.Tensor, Optional[gs.Tensor], gs.Tensor]]:
    """(x, the model's x * x or None, the x its cube reads), where ``tensor`` is
    tanh(sqrt(2/pi) * (x + 0.044715 * x**3))."""
    tanh = _producer(tensor, "Tanh")
    inner_t, c = _split(None if tanh is None else _producer(tanh.inputs[0], "Mul"))
    inner = None if inner_t is None or not _close(c, SQRT_2_OVER_PI) else \
        _producer(inner_t, "Add")
    if inner is None or len(inner.inputs) != 2:
        return None
    for k in (0, 1):
        cube_t, c = _split(_producer(inner.inputs[1 - k], "Mul"))
        if cube_t is not None and _close(c, CUBIC):
            found = _cube_of(cube_t, inner.inputs[k])
            if found is not None:
                return found
    return None


_SOURCES = {"erf": (_erf_source, "1 + erf(x / sqrt 2)"),
            "tanh": (_tanh_source, "1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3))")}


def _gate_input(gate: gs.Node, form: str) -> Union[Tuple[
        gs.Tensor, Optional[gs.Tensor], gs.Tensor, gs.Tensor], str]:
    """(x, the model's x * x or None, the x the square reads, the gate's other operand),
    walking back from the gate
    (the Mul by 1 + erf or 1 + tanh) to x."""
    source, text = _SOURCES[form]
    for k in range(2 if len(gate.inputs) == 2 else 0):
        inner, value = _split(_producer(gate.inputs[k], "Add"))
        found = source(inner) if inner is not None and value == 1.0 else None
        if found is not None:
            return found[0], found[1], found[2], gate.inputs[1 - k]
    return f"not Mul(x or 0.5 or x/2, {text}): a GELU's {form} form"


def _is_half_of(tensor: gs.Tensor, x: gs.Tensor) -> bool:
    source, value = _split(_producer(tensor, "Mul"))
    return source is not None and same_value(source, x) and value == 0.5


def gelu_match(gate: gs.Node, form: str, graph_outputs: Collection[str]
               ) -> Union[GeluMatch, str]:
    """The GELU (``form`` "erf" or "tanh") whose gate, the Mul by 1 + erf or 1 + tanh, is
    ``gate``; or why it is not one."""
    found = _gate_input(gate, form)
    if isinstance(found, str):
        return found
    x, square, x_square, other = found
    if _is_half_of(other, x):
        return GeluMatch(x, other, None, square, x_square, x)
    if not same_value(other, x) and _scalar(other) != 0.5:
        return f"the gate multiplies by {other.name}, not by x, 0.5 or x/2"
    out = gate.outputs[0]
    consumers = out.outputs
    half = consumers[0] if len(consumers) == 1 and out.name not in graph_outputs else None
    if half is None or half.op != "Mul" or len(half.inputs) != 2:
        return "the gate's product is not multiplied further by the missing 0.5 or x"
    rest = half.inputs[1] if half.inputs[0] is out else half.inputs[0]
    wanted_x = not same_value(other, x)
    if same_value(rest, x) if wanted_x else _scalar(rest) == 0.5:
        return GeluMatch(x, None, half, square, x_square, rest if wanted_x else other)
    return f"the Mul after the gate multiplies by {rest.name}, not by the missing " + (
        "x" if wanted_x else "0.5")


def _chain(composite: Composite, ctx: LayoutContext, x: gs.Tensor, half_x: Optional[gs.Tensor],
           square: Optional[gs.Tensor], output: gs.Tensor,
           copies: Tuple[Optional[gs.Tensor], Optional[gs.Tensor]] = (None, None)) -> None:
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

    # The model's own x/2 is a layer of its own (mrvl.mul): it multiplies the sigmoid's
    # argument (s doubled to match) so that it feeds the chain instead of being left unread.
    v, scale = (xi, 2.0) if half_x is None else (ctx.require(half_x, perm)[0], 4.0)
    # x's DequantizeLinear copies in a QDQ model (``same_value``): equal values, each one read.
    x_square, x_out = (xi if t is None else ctx.require(t, perm)[0] for t in copies)
    s = emit("Mul2D", [x_square, x_square]) if square is None else ctx.require(square, perm)[0]
    s = emit("Mul2D", [s], scale * CUBIC * SQRT_2_OVER_PI)
    s = emit("Sum2D", [s], scale * SQRT_2_OVER_PI)
    g = emit("Mul2D", [v, s], act=Activation.SIGMOID)
    emit("Mul2D", [x_out, g], last=True)


def lower_gelu(composite: Composite, ctx: LayoutContext) -> None:
    """A matched GELU (Erf or tanh form, or Gelu op) as the tanh-approximation chain."""
    op = composite.binding.node("gelu")
    if op is not None:
        _chain(composite, ctx, op.inputs[0], None, None, composite.output)
        return
    gate = composite.binding.node("gate")
    found = gelu_match(gate, "erf" if composite.binding.node("erf") else "tanh", ())
    if isinstance(found, str):  # pragma: no cover - the rule's check refuses it first
        raise MrvlConvertError(f"internal error: not a GELU: {found}", node=gate.name)
    _chain(composite, ctx, found.x, found.half_x, found.square, composite.output,
           (found.x_square, found.x_out))
