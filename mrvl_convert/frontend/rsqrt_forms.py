"""Norms as other exporters write them: ``x / sqrt(v)`` and the powers around it, made the forms
the layers take (Rsqrt, a broadcasting Mul2D, Power).

An RMSNorm (T5's, ``x * rsqrt(mean(x**2) + eps)``) reaches ONNX as
``Mul(x, Div(1, Sqrt(Add(ReduceMean(Pow(x, 2)), eps))))``, or with ``Reciprocal(Sqrt(..))``, or
``Mul(x, Pow(v, -0.5))``; a magnitude as ``Pow(Sqrt(..), 2)``. The layer set has Rsqrt and a
Mul2D the second operand of which may broadcast into the first, but no division by an activation,
so a Div by the Sqrt cut the model at every norm.

- ``Pow(x, 2)`` -> ``Mul(x, x)``: exact (onnxruntime's Pow squares for exponent 2).
- ``Pow(v, 0.5)`` -> ``Sqrt(v)`` and ``Pow(v, -0.5)`` -> ``Reciprocal(Sqrt(v))``.
- ``Div(1, Sqrt(v))`` (a constant of ones that does not enlarge the quotient) ->
  ``Reciprocal(Sqrt(v))``: exact (both are one correctly rounded division of 1).
- ``Div(a, Sqrt(v))`` that ``mrvl.sqrt_div`` does not take (``a`` another constant, or an
  activation that is not of the quotient's shape, or a divisor of another rank) ->
  ``Mul(Reciprocal(Sqrt(v)), a)``, the larger operand first. ``Div(d, Sqrt(v))`` with ``d`` of the
  quotient's shape stays: ``mrvl.sqrt_div`` takes it, and a CPU stage keeps its one rounding.

Bound (u = 2**-24; Reciprocal, Mul and Div are correctly rounded; onnxruntime's Pow is the C
library's ``powf``, measured within 1.0 u relative of the exact root for every positive normal
float at 1.18 and 1.32). For the Div: the Mul is within ``3 u + u**2 < 2**-22`` relative of
``a / s`` (plus 2**-149 where the quotient is subnormal) at every version, both reading the same
``s``. For the Pows it depends on onnxruntime's Sqrt kernel:

- correctly rounded (onnxruntime 1.32): for a finite positive ``v``, ``Sqrt`` is within
  ``u + 1.64 u < 2**-22`` relative of ``Pow(v, 0.5)``, ``Reciprocal(Sqrt)`` within
  ``2 u + 1.64 u + u**2 < 2**-22`` of ``Pow(v, -0.5)``. Special values: ``Pow(-0, 0.5)`` is +0
  where Sqrt gives -0, ``Pow(-0, -0.5)`` is +inf where the rewrite gives -inf, and
  ``Pow(-inf, +-0.5)`` is inf or 0 where it gives NaN.
- Eigen's fast ``psqrt`` (onnxruntime 1.18: ``x * rsqrt(x)`` from ``rsqrtps``, one Newton step,
  inputs below 2**-126 flushed to +0): not correctly rounded; measured over every positive normal
  float32 (AMD EPYC), Sqrt within 4.54 u of the exact root, the rewrite within 4.60 u of
  ``Pow(v, 0.5)`` and 4.63 u of ``Pow(v, -0.5)``, above 2**-22; for any ``rsqrtps`` (relative
  error at most 1.5 * 2**-12) the Newton step leaves 3.38 u and its five roundings and Pow's
  1 u and Reciprocal's 1 u add at most 7 u more, so within ``2**-20`` for a positive normal
  ``v``. Special values: ``Pow(+inf, +-0.5)`` is inf or 0 where the rewrite gives NaN,
  ``Pow(-inf, +-0.5)`` likewise, and a subnormal ``v`` gives 0 (``Reciprocal``: +inf) where Pow
  gives its root; ``-0`` gives +0 (+inf) as Pow does.

So ``POW_BOUND`` (2**-20) holds at every supported onnxruntime, ``POW_BOUND_ROUNDED`` (2**-22)
where its Sqrt is correctly rounded; ``DIV_BOUND`` (2**-22) everywhere. Elsewhere (``v = +0``,
negative, NaN; ``a / 0``, ``a / inf``) the two agree.
tests/frontend/test_rsqrt_forms.py runs each rewrite on onnxruntime before and after.

Requires: a graphsurgeon graph with constants as initializers (after folding), static shapes.
Ensures: the rewrites above, a rewritten node keeping its name (listed in ``rewritten``), the
Sqrt or Reciprocal it adds listed in ``derived``; elsewhere the graph is as it was. The caller
cleans up and sorts the graph.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import const_value, is_const, static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites

POW_BOUND = 2.0 ** -20  # at every supported onnxruntime (1.18's Sqrt is Eigen's fast psqrt)
POW_BOUND_ROUNDED = 2.0 ** -22  # where onnxruntime's Sqrt is correctly rounded (1.32)
DIV_BOUND = 2.0 ** -22
_POW = "within 2**-20 relative in float32 (frontend/rsqrt_forms.py)"
_DIV = "within 2**-22 relative in float32 (frontend/rsqrt_forms.py)"


def rewrite_rsqrt_forms(graph: gs.Graph, done: Rewrites) -> bool:
    """Apply the rewrites to ``graph`` in place; True when one happened."""
    names, before = Names(graph), len(done.rewritten)
    for node in list(graph.nodes):
        if node.op == "Pow" and len(node.inputs) == 2 and node.outputs:
            _pow(graph, node, done, names)
    for node in list(graph.nodes):
        if node.op == "Div" and len(node.inputs) == 2 and node.outputs:
            _div(graph, node, done, names)
    return len(done.rewritten) > before


def _floating(tensor: gs.Tensor) -> bool:
    return tensor.dtype is not None and np.issubdtype(np.dtype(tensor.dtype), np.floating)


def _scalar(tensor: gs.Tensor) -> Optional[float]:
    """The one value of a float constant, or None."""
    if not is_const(tensor):
        return None
    value = const_value(tensor)
    if value.size != 1 or not np.issubdtype(value.dtype, np.floating):
        return None
    return float(value.reshape(-1)[0])


def _keeps_shape(node: gs.Node) -> bool:
    """The constant operand does not broadcast the output larger than the activation."""
    shape = static_shape(node.inputs[0])
    return shape is not None and shape == static_shape(node.outputs[0])


def _set(node: gs.Node, op: str, inputs) -> None:
    node.op = op
    node.attrs.clear()
    node.inputs.clear()
    node.inputs.extend(inputs)


def _sqrt(graph: gs.Graph, v: gs.Tensor, base: str, origin: gs.Node, done: Rewrites,
          names: Names) -> gs.Tensor:
    s = gs.Variable(names.fresh(f"{base}_sqrt"), dtype=v.dtype, shape=v.shape)
    node = gs.Node("Sqrt", names.fresh(f"{base}_sqrt"), inputs=[v], outputs=[s])
    graph.nodes.append(node)
    done.derived[node.name] = origin.name
    return s


def _pow(graph: gs.Graph, node: gs.Node, done: Rewrites, names: Names) -> None:
    x, exponent = node.inputs[0], _scalar(node.inputs[1])
    if exponent not in (2.0, 0.5, -0.5) or is_const(x) or not _floating(x) \
            or not _keeps_shape(node):
        return
    if exponent == 2.0:
        _set(node, "Mul", [x, x])
        done.rewritten[node.name] = "Pow(x, 2) became Mul(x, x) (exact)"
    elif exponent == 0.5:
        _set(node, "Sqrt", [x])
        done.rewritten[node.name] = f"Pow(v, 0.5) became Sqrt(v), {_POW}"
    else:
        _set(node, "Reciprocal", [_sqrt(graph, x, node.name, node, done, names)])
        done.rewritten[node.name] = f"Pow(v, -0.5) became Reciprocal(Sqrt(v)), {_POW}"


def _sqrt_div_takes(node: gs.Node) -> bool:
    """What mrvl.sqrt_div maps (rules/checks_transformer.py check_sqrt_divisor)."""
    dividend, divisor = node.inputs
    out = static_shape(node.outputs[0])
    return (not is_const(dividend) and static_shape(dividend) == out
            and out is not None and len(static_shape(divisor) or []) == len(out))


def _div(graph: gs.Graph, node: gs.Node, done: Rewrites, names: Names) -> None:
    a, s = node.inputs
    if not s.inputs or s.inputs[0].op != "Sqrt" or not _floating(s) or _sqrt_div_takes(node):
        return
    out, s_shape = static_shape(node.outputs[0]), static_shape(s)
    if out is None or s_shape is None:
        return
    if is_const(a) and np.all(const_value(a) == 1.0) and s_shape == out:
        _set(node, "Reciprocal", [s])
        done.rewritten[node.name] = "Div(1, Sqrt(v)) became Reciprocal(Sqrt(v)) (exact)"
        return
    r = gs.Variable(names.fresh(f"{node.name}_reciprocal"), dtype=s.dtype, shape=s.shape)
    reciprocal = gs.Node("Reciprocal", names.fresh(f"{node.name}_reciprocal"), inputs=[s],
                         outputs=[r])
    graph.nodes.append(reciprocal)
    done.derived[reciprocal.name] = node.name
    # Mul2D broadcasts its second operand into its first: the one of the output's shape first.
    operands = [a, r] if static_shape(a) == out and not is_const(a) else [r, a]
    _set(node, "Mul", operands)
    done.rewritten[node.name] = f"Div(a, Sqrt(v)) became Mul(Reciprocal(Sqrt(v)), a), {_DIV}"
