"""An Einsum as the Transpose, Reshape, ReduceSum, MatMul and Mul layers the rules map.

Requires: static shapes on the Einsum's operands and output (canonicalize runs this once the
shapes that depended on folded values are known), opset 12 or later (Einsum's own).
Ensures: each float32 ``Einsum`` whose equation ``einsum_equation.py`` reads (one or two
operands, no letter repeated within one operand, no broadcast of a size-1 axis; an ellipsis
and an implicit output are spelled out) and no operand of which is a quantized constant is
rewritten, the Einsum's node keeping its name as the last layer, the others ``derived`` from
it, ``rewritten`` saying what it became; an Einsum it refuses stays, the reason in ``kept``.
Per operand, the letters only it has and the output drops are summed first (``ReduceSum``);
then

- one operand: a ``Transpose`` into the output's order;
- two operands with a letter summed over both (``inner``): each operand ``Transpose``d and
  ``Reshape``d to ``[lead..., rows, inner]`` and ``[lead..., inner, cols]`` (``MatMulPlan``),
  one ``MatMul`` (numpy broadcasting over ``lead``: an axis one operand lacks is 1 there), a
  ``Reshape`` splitting rows and columns back into their letters and a ``Transpose`` into the
  output's order, each only where it moves something. The grouped linear ``btgi,gih->btgh``
  becomes ``[b, g, t, i] @ [g, i, h]`` between two ``Transpose``s, the attention forms
  ``bhqd,bhkd->bhqk`` and ``bhqk,bhkd->bhqd`` a MatMul of 4-D tensors, ``bld,dhk->blhk`` a
  MatMul by ``[d, h k]`` and a Reshape;
- two operands and nothing summed over both: each in the output's order, 1 for the letters it
  lacks, and one broadcasting ``Mul``.

A constant operand's steps are computed here (numpy), so a weight reaches the MatMul in the
layout it needs; a constant first operand is made the second (the operands of an equation
commute), as the layer takes a constant second operand only.

Why a batched MatMul rather than a grouped 1x1 Conv for the grouped linear: the MatMul keeps
the tokens' ``[b, t, ...]`` layout on both sides (the Conv needs the channels moved to axis 1
and back, and a 4-D view), and the newer set's BatchMatmul takes a 4-D activation by a 3-D
constant as it is.

Inside an int8 region (an operand dequantized, the result quantized: onnxruntime's
quantize_static quantizes no Einsum, so deepfilternet's int8 enc has its grouped linears
between QDQ pairs with float weights) the layers are fp16 layers between the region's quant
layers, as any op without an int8 form (``rules/int8_forms.py``). verify's int8 reference
rewrites the QDQ model's Einsums here too, under the same node names
(``recurrent_reference.py``), so that it rounds where these layers round
(``verify/kept_fp16.py``): judged against the Einsum as one node, a correct artifact's fp16
MatMul moved values across quantization boundaries (deepfilternet enc: ``emb`` 2.6 int8 steps
off, max_rel 0.020 against 0.01).

Bound: data movement (Transpose, Reshape) is exact, and so is the Mul (one product per
output). A summed output is a sum of ``n`` products (``n`` the product of the sizes of the
letters it sums); onnxruntime's Einsum and these layers add them in different orders (the own
letters first, then the MatMul's inner axis), so each output differs from the original's by at
most ``2 gamma_n sum |products|``, ``gamma_n = n u / (1 - n u)``, ``u = 2^-24``
(``tests/frontend/test_einsum_forms.py`` and ``tests/system/test_fuzz_einsum.py`` run both on
onnxruntime and check it).
"""
from __future__ import annotations

from typing import List, Sequence, Union

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, const_value, is_const, static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites, _set_inputs, axes_operands
from mrvl_convert.frontend.einsum_equation import (Equation, matmul_plan, read_equation,
                                                   size_of)


def rewrite_einsums(graph: gs.Graph, opset: int, done: Rewrites) -> bool:
    """Rewrite each Einsum the forms take, in place; True when one changed (the caller cleans
    up and sorts the graph)."""
    names, changed = Names(graph), False
    for node in list(graph.nodes):
        if node.op != "Einsum" or not node.outputs:
            continue
        eq = einsum_equation(node)
        if isinstance(eq, str):
            done.kept[node.name] = f"Einsum stays as it is: {eq}"
            continue
        _Builder(graph, node, names, opset, done).build(eq)
        changed = True
    return changed


def einsum_equation(node: gs.Node) -> Union[Equation, str]:
    """The node's equation read on its operands, or why the forms do not take it."""
    shapes = [static_shape(t) for t in list(node.inputs) + list(node.outputs)]
    if any(s is None for s in shapes):
        return "its shapes are not static"
    tensors = list(node.inputs) + list(node.outputs)
    if any(t.dtype is None or np.dtype(t.dtype) != np.float32 for t in tensors):
        return "it is not float32"
    if all(is_const(t) for t in node.inputs):
        return "every operand is a constant"
    if any(p.op == "DequantizeLinear" and is_const(p.inputs[0])
           for t in node.inputs for p in t.inputs):
        return "an operand is a quantized constant (no int8 form of it)"
    eq = read_equation(str(attr(node, "equation", "")), shapes[:-1])
    if not isinstance(eq, str) and [eq.sizes[c] for c in eq.output] != list(shapes[-1]):
        return f"its output shape {shapes[-1]} is not the equation's"
    if not isinstance(eq, str) and eq.inputs == (eq.output,):
        return "its equation moves nothing (an identity)"
    if not isinstance(eq, str) and 0 in eq.sizes.values():
        return "an axis of size 0"
    return eq


class _Builder:
    """The layers of one Einsum: added before it, the Einsum's node itself the last one."""

    def __init__(self, graph: gs.Graph, node: gs.Node, names: Names, opset: int,
                 done: Rewrites) -> None:
        self.graph, self.node, self.names, self.opset, self.done = graph, node, names, opset, done
        self.ops: List[str] = []

    def build(self, eq: Equation) -> None:
        equation = str(attr(self.node, "equation", ""))
        operands = list(self.node.inputs)
        if len(operands) == 2 and is_const(operands[0]):  # the layer takes a constant second
            operands, eq = operands[::-1], Equation(eq.inputs[::-1], eq.output, eq.sizes)
        ins = [self.own_sums(t, k, eq) for k, t in enumerate(operands)]
        terms = [''.join(c for c in term if c not in _own(eq, k))
                 for k, term in enumerate(eq.inputs)]
        if len(ins) == 1:
            y = self.transpose(ins[0], terms[0], eq.output)
            self.finish("Identity", [y], {})
        elif not matmul_plan(eq).inner:
            a, b = (self.broadcast(t, term, eq.output, eq) for t, term in zip(ins, terms))
            self.finish("Mul", [a, b], {})
        else:
            self.matmul(ins, terms, eq)
        self.done.rewritten[self.node.name] = (
            f"Einsum {equation!r} became {' -> '.join(self.ops)}: exact but for the order of "
            f"its sums (einsum_forms.py)")

    def matmul(self, ins: List[gs.Tensor], terms: List[str], eq: Equation) -> None:
        plan = matmul_plan(eq)
        lead = [eq.sizes[c] for c in plan.lead]
        rows, inner, cols = (size_of(eq, p) for p in (plan.rows, plan.inner, plan.cols))
        a = self.transpose(ins[0], terms[0], "".join(plan.lead + plan.rows + plan.inner))
        a = self.reshape(a, lead + [rows, inner])
        b = self.transpose(ins[1], terms[1], "".join(
            c for c in plan.lead + plan.inner + plan.cols if c in terms[1]))
        b_lead = [eq.sizes[c] if c in terms[1] else 1 for c in plan.lead]
        while b_lead and b_lead[0] == 1:  # numpy broadcasting adds them back
            b_lead.pop(0)
        b = self.reshape(b, b_lead + [inner, cols])
        product = "".join(plan.lead + plan.rows + plan.cols)
        y = self.add("MatMul", [a, b], {}, lead + [rows, cols])
        y = self.reshape(y, [eq.sizes[c] for c in product])
        if product == eq.output:
            self.finish("Identity", [y], {})
        else:
            self.finish("Transpose", [y], {"perm": [product.index(c) for c in eq.output]})

    def own_sums(self, x: gs.Tensor, index: int, eq: Equation) -> gs.Tensor:
        """Operand ``index`` summed over the letters only it has that the output drops."""
        own = _own(eq, index)
        axes = [k for k, c in enumerate(eq.inputs[index]) if c in own]
        if not axes:
            return x
        shape = [s for k, s in enumerate(static_shape(x)) if k not in axes]
        if is_const(x):
            return self.constant(np.sum(const_value(x), axis=tuple(axes), dtype=np.float32))
        extra, attrs = axes_operands(axes, self.opset, self.constant)
        return self.add("ReduceSum", [x, *extra], {**attrs, "keepdims": 0}, shape)

    def transpose(self, x: gs.Tensor, term: str, order: str) -> gs.Tensor:
        perm = [term.index(c) for c in order]
        if perm == sorted(perm):
            return x
        if is_const(x):
            return self.constant(np.transpose(const_value(x), perm))
        shape = static_shape(x)
        return self.add("Transpose", [x], {"perm": perm}, [shape[k] for k in perm])

    def reshape(self, x: gs.Tensor, shape: Sequence[int]) -> gs.Tensor:
        if list(static_shape(x)) == list(shape):
            return x
        if is_const(x):
            return self.constant(const_value(x).reshape(shape))
        return self.add("Reshape", [x, self.constant(np.array(shape, np.int64))], {}, shape)

    def broadcast(self, x: gs.Tensor, term: str, output: str, eq: Equation) -> gs.Tensor:
        """``x`` in the output's order, 1 for the letters it lacks (leading ones dropped)."""
        x = self.transpose(x, term, "".join(c for c in output if c in term))
        shape = [eq.sizes[c] if c in term else 1 for c in output]
        while shape and shape[0] == 1 and output[len(output) - len(shape)] not in term:
            shape.pop(0)
        return self.reshape(x, shape)

    def constant(self, value: np.ndarray) -> gs.Constant:
        return gs.Constant(self.names.fresh(f"{self.node.name}_const"),
                           np.ascontiguousarray(value))

    def add(self, op: str, inputs: List[gs.Tensor], attrs: dict,
            shape: Sequence[int]) -> gs.Variable:
        out = gs.Variable(self.names.fresh(f"{self.node.outputs[0].name}_{op.lower()}"),
                          dtype=np.float32, shape=list(shape))
        added = gs.Node(op, self.names.fresh(f"{self.node.name}_{op.lower()}"), attrs=attrs,
                        inputs=inputs, outputs=[out])
        self.graph.nodes.append(added)
        self.done.derived[added.name] = self.node.name
        self.ops.append(op)
        return out

    def finish(self, op: str, inputs: List[gs.Tensor], attrs: dict) -> None:
        """The Einsum's node becomes the last layer (an Identity: the layer before it takes
        the node's name)."""
        if op == "Identity":
            self._rename(inputs[0])
            return
        self.node.op, self.node.attrs = op, dict(attrs)
        _set_inputs(self.node, inputs)
        self.ops.append(op)

    def _rename(self, y: gs.Tensor) -> None:
        """The last added layer writes the Einsum's output itself, under the node's name."""
        last, out = y.inputs[0], self.node.outputs[0]
        self.node.outputs.clear()
        self.node.inputs.clear()
        self.graph.nodes.remove(self.node)
        last.outputs[0] = out
        del self.done.derived[last.name]
        last.name = self.node.name


def _own(eq: Equation, index: int) -> str:
    """The letters only operand ``index`` has and the output drops."""
    others = "".join(t for k, t in enumerate(eq.inputs) if k != index)
    return "".join(c for c in eq.inputs[index] if c not in eq.output and c not in others)
