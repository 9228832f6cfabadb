"""The exact rewrites of canonicalize: exporters' many spellings of one idiom become one form.

Each rewrite keeps onnxruntime's result bit for bit (tests/frontend/test_canonical_forms.py runs the
original and the rewritten graph on onnxruntime and compares), except ``Max(x, 0) -> Relu``,
whose only difference is the sign of a zero: onnxruntime's Max gives +0 for x = -0, its Relu -0.

- ``Sum(a, b, c, ...)`` -> ``Add(Add(a, b), c) ...``: onnxruntime's Sum adds its inputs left to
  right into one accumulator, so the chain in the same order rounds the same way.
- ``Clip(x, 0, +inf)`` and ``Max(x, 0)`` -> ``Relu(x)``. ``Clip(x, 0)`` with no max is left: it
  clamps +inf to the largest float, which Relu does not.
- ``Min(Relu(x), 6)`` -> ``Clip(x, 0, 6)``, the one Relu6 form (bounds as constant inputs from
  opset 11, as attributes before).
- ``Max(c, x)`` / ``Min(c, x)`` of one constant value -> ``op(x, c)``: onnxruntime's Max and
  Min treat their operands alike (a NaN propagates from either; a tie of zeros gives the same
  zero either way, checked at 1.18 and the newest), so bit for bit.
- ``Sub(x, c)`` -> ``Add(x, -c)``; ``Div(x, c)`` -> ``Mul(x, 1/c)`` when every 1/c is exact in the
  tensor's type (c a power of two), otherwise the Div stays and ``kept`` says why.
- ``Reshape`` of a 4-D tensor to ``[N, C*H*W]`` -> ``Flatten(axis=1)`` (same element order), so
  the FC after it gets the weight-column permutation Flatten gets in lowering.
- ``Sub(c, x)`` -> ``Add(Mul(x, -1), c)``: ``-x`` is exact and ``c + (-x)`` rounds the same
  exact sum as ``c - x`` (IEEE subtraction is the addition of the negation; signed zeros
  agree: +0 - +0 = +0 + -0 = +0), bit for bit for every value but a NaN's sign, as for Neg.
- ``Neg(x)`` of a float tensor -> ``Mul(x, -1)`` (tf2onnx writes Neg), so the rules that take
  a Mul by a constant take it: multiplying by -1 flips the sign bit as Neg does, bit for bit for
  every value but a NaN, which stays a NaN (onnxruntime's Neg flips its sign bit, its Mul may
  not).
- ``Gemm(A, B, C, beta=0)`` -> ``Gemm(A, B)`` (beta 1, no C; tf2onnx writes beta 0 for a Dense
  without bias): ``0 * C`` adds nothing, so onnxruntime's result is the same bit for bit when
  C is absent or a constant of finite values (a C with inf or NaN stays: ``0 * inf`` is NaN).
- ai.onnx.ml ``Scaler(x)`` of a float32 ``[N, C]`` (or ``[C]``) tensor -> ``Mul(Add(x, -offset),
  scale)`` (skl2onnx's feature scaling before an MLP): onnxruntime computes
  ``(x - offset) * scale`` per feature in float32, the same two roundings in that order (``x +
  (-o)`` is ``x - o`` bit for bit, as for Sub above). Another input type stays, ``kept`` says why.

A rewritten node keeps its name (the report finds it); a node merged into another is listed in
``merged`` with the name of the node that now computes it; a node a rewrite adds (the partial
sums of a Sum) is listed in ``derived`` with the node it comes from.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import const_value, is_const, present, static_shape


@dataclass
class Rewrites:
    merged: Dict[str, str] = field(default_factory=dict)     # node -> node that computes it now
    rewritten: Dict[str, str] = field(default_factory=dict)  # node -> what it became
    kept: Dict[str, str] = field(default_factory=dict)       # node -> why it was not rewritten
    derived: Dict[str, str] = field(default_factory=dict)    # new node -> node it comes from


def rewrite(graph: gs.Graph, opset: int) -> Rewrites:
    """Apply every rewrite to ``graph`` in place (the caller cleans up and sorts it)."""
    done = Rewrites()
    names = Names(graph)
    for node in list(graph.nodes):
        handler = _HANDLERS.get(node.op)
        if handler is not None and node.outputs:
            handler(graph, node, done, names, opset)
    return done


class Names:
    """Fresh node and tensor names that collide with nothing in the graph."""

    def __init__(self, graph: gs.Graph) -> None:
        # The graph's names are collected at the first fresh() (the graph as it is then), not
        # here: most passes make a Names and then find nothing to rewrite, and collecting an
        # unrolled model's names in each of them was a tenth of its conversion.
        self._graph: Optional[gs.Graph] = graph
        self._used: Set[str] = set()
        # base -> the suffix its last fresh name took: names are only ever added, so every
        # lower one is still taken (a base asked for n times costs n tries, not n^2 / 2)
        self._suffix: Dict[str, int] = {}

    @property
    def used(self) -> Set[str]:
        """Every name taken: the graph's (when first asked) and each fresh one given."""
        if self._graph is not None:
            self._used |= {n.name for n in self._graph.nodes} | _tensor_names(self._graph)
            self._graph = None
        return self._used

    @used.setter
    def used(self, names: Set[str]) -> None:
        self._used, self._graph = names, None

    def fresh(self, base: str) -> str:
        k, used = self._suffix.get(base, 0), self.used
        name = f"{base}_{k}" if k else base
        while name in used:
            k += 1
            name = f"{base}_{k}"
        used.add(name)
        self._suffix[base] = k
        return name


def _tensor_names(graph: gs.Graph) -> Set[str]:
    """``set(graph.tensors())``: the names of the graph's inputs, its nodes' inputs and outputs
    and its outputs but the empty one, without graphsurgeon's map of them (each pass makes a
    ``Names``: mapping an unrolled model's tensors was most of the cost of the passes that
    then find nothing to rewrite)."""
    name = attrgetter("name")
    names = set(map(name, graph.inputs))
    names.update(map(name, graph.outputs))
    for node in graph.nodes:
        names.update(map(name, node.inputs))
        names.update(map(name, node.outputs))
    names.discard("")
    return names


def axes_node(op: str, name: str, x: gs.Tensor, out: gs.Tensor, axes: Sequence[int],
              opset: int, names: Names, attrs: Optional[dict] = None) -> gs.Node:
    """A Squeeze, Unsqueeze or ReduceSum of ``x`` over ``axes`` into ``out``: the axes an
    input from opset 13, an attribute before (``attrs``: its others, e.g. keepdims)."""
    extra, given = axes_operands(axes, opset,
                                 lambda value: gs.Constant(names.fresh(f"{name}_axes"), value))
    return gs.Node(op, name, attrs={**(attrs or {}), **given}, inputs=[x, *extra],
                   outputs=[out])


def axes_operands(axes: Sequence[int], opset: int,
                  constant: Callable[[np.ndarray], gs.Tensor]) -> Tuple[List[gs.Tensor], dict]:
    """How a Squeeze, Unsqueeze or ReduceSum is given ``axes``: the inputs after its data
    (``constant`` of them, named by the caller, from opset 13) and the attributes (before)."""
    if opset >= 13:
        return [constant(np.array(list(axes), np.int64))], {}
    return [], {"axes": list(axes)}


def _set_inputs(node: gs.Node, tensors: List[gs.Tensor]) -> None:
    # graphsurgeon's input lists keep tensor.outputs in step; slice assignment bypasses that.
    node.inputs.clear()
    node.inputs.extend(tensors)


def _float_const(tensor: Optional[gs.Tensor]) -> Optional[np.ndarray]:
    if tensor is None or not is_const(tensor):
        return None
    value = const_value(tensor)
    return value if np.issubdtype(value.dtype, np.floating) else None


def split_const(node: gs.Node):
    """(activation, constant value) of a binary op with exactly one float constant operand."""
    if len(node.inputs) != 2:
        return None, None, None
    a, b = node.inputs
    if is_const(a) == is_const(b):
        return None, None, None
    act, const = (b, a) if is_const(a) else (a, b)
    value = _float_const(const)
    # The constant must not broadcast the activation to a larger shape.
    if value is None or static_shape(act) is None or static_shape(act) != static_shape(
            node.outputs[0]):
        return None, None, None
    return act, const, value


def _sum(graph: gs.Graph, node: gs.Node, done: Rewrites, names: Names, opset: int) -> None:
    inputs = list(node.inputs)
    if len(inputs) < 2 or any(not t.name for t in inputs):
        return
    acc = inputs[0]
    for k, term in enumerate(inputs[1:-1], start=1):
        shapes = [static_shape(t) for t in inputs[:k + 1]]
        shape = list(np.broadcast_shapes(*shapes)) if None not in shapes else None
        partial = gs.Variable(names.fresh(f"{node.outputs[0].name}_partial{k}"),
                              dtype=node.outputs[0].dtype, shape=shape)
        add = gs.Node("Add", names.fresh(f"{node.name}_add{k}"), inputs=[acc, term],
                      outputs=[partial])
        graph.nodes.append(add)
        done.derived[add.name] = node.name
        acc = partial
    node.op = "Add"
    _set_inputs(node, [acc, inputs[-1]])
    if len(inputs) > 2:
        done.rewritten[node.name] = (f"Sum of {len(inputs)} inputs became a chain of "
                                     f"{len(inputs) - 1} Add, left to right as onnxruntime sums")
    else:
        done.rewritten[node.name] = "Sum of 2 inputs became Add"


def _to_relu(node: gs.Node, act: gs.Tensor, done: Rewrites, what: str) -> None:
    node.op = "Relu"
    _set_inputs(node, [act])
    node.attrs.clear()
    done.rewritten[node.name] = f"{what} became Relu"


def _max(graph: gs.Graph, node: gs.Node, done: Rewrites, names: Names, opset: int) -> None:
    act, _, value = split_const(node)
    if act is not None and value.size and not np.any(value):
        _to_relu(node, act, done, "Max(x, 0)")
    else:
        _constant_last(node, done)


def _constant_last(node: gs.Node, done: Rewrites) -> None:
    """``Max(c, x)`` / ``Min(c, x)`` of one constant value as ``op(x, c)``: the Clip rules read
    the bound at input 1 (sig_bak_ovr's ``Max(1e-12, power)``)."""
    act, const, value = split_const(node)
    if act is None or node.inputs[0] is act or value.size != 1:
        return
    _set_inputs(node, [act, const])
    done.rewritten[node.name] = f"{node.op}(c, x) became {node.op}(x, c)"


def _clip_bounds(node: gs.Node, opset: int):
    """(min, max) as floats (None when absent), or False when a bound is not a constant."""
    if opset < 11:
        low, high = node.attrs.get("min"), node.attrs.get("max")
        return (None if low is None else float(low), None if high is None else float(high))
    bounds = []
    for index in (1, 2):
        tensor = present(node, index)
        if tensor is None:
            bounds.append(None)
            continue
        value = _float_const(tensor)
        if value is None or value.size != 1:
            return False
        bounds.append(float(value.reshape(-1)[0]))
    return tuple(bounds)


def _clip(graph: gs.Graph, node: gs.Node, done: Rewrites, names: Names, opset: int) -> None:
    bounds = _clip_bounds(node, opset)
    if not bounds or bounds[0] != 0.0:
        return
    if bounds[1] == float("inf"):
        _to_relu(node, node.inputs[0], done, "Clip(x, 0, +inf)")
    elif bounds[1] is None:
        done.kept[node.name] = ("Clip(x, 0) stays: without a max it clamps +inf to the largest "
                                "float, where Relu keeps +inf")


def _min(graph: gs.Graph, node: gs.Node, done: Rewrites, names: Names, opset: int) -> None:
    act, _, value = split_const(node)
    if act is None or not value.size or not np.all(value == 6.0) or len(act.inputs) != 1:
        _constant_last(node, done)
        return
    relu = act.inputs[0]
    if relu.op != "Relu" or len(act.outputs) != 1 or act in graph.outputs:
        _constant_last(node, done)
        return
    source = relu.inputs[0]
    node.op = "Clip"
    node.attrs.clear()
    if opset < 11:
        _set_inputs(node, [source])
        node.attrs.update(min=0.0, max=6.0)
    else:
        dtype = value.dtype
        _set_inputs(node, [source,
                           gs.Constant(names.fresh(f"{node.name}_min"), np.array(0, dtype)),
                           gs.Constant(names.fresh(f"{node.name}_max"), np.array(6, dtype))])
    relu.inputs.clear()
    relu.outputs.clear()
    done.merged[relu.name] = node.name
    done.rewritten[node.name] = f"Min(Relu(x), 6) became Clip(x, 0, 6) (with {relu.name})"


def _sub(graph: gs.Graph, node: gs.Node, done: Rewrites, names: Names, opset: int) -> None:
    act, const, value = split_const(node)
    if act is not None and node.inputs[0] is not act:
        _const_minus(graph, node, act, value.dtype, done, names)
        return
    if act is None:
        return
    negated = gs.Constant(names.fresh(f"{const.name}_negated"), np.asarray(np.negative(value)))
    node.op = "Add"
    _set_inputs(node, [act, negated])
    done.rewritten[node.name] = "Sub by a constant became Add of its negation"


def _const_minus(graph: gs.Graph, node: gs.Node, x: gs.Tensor, dtype: np.dtype,
                 done: Rewrites, names: Names) -> None:
    # c - x as (x * -1) + c: the layers take an activation minus a constant, or plus one,
    # never a constant minus one (a YOLO head's anchors - distances, tf2onnx's LayerNorm beta).
    minus_one = gs.Constant(names.fresh(f"{node.name}_minus_one"),
                            np.asarray(-1, dtype=dtype))
    negated = gs.Variable(names.fresh(f"{x.name}_negated"), dtype=dtype,
                          shape=static_shape(x))
    mul = gs.Node("Mul", names.fresh(f"{node.name}_negate"), inputs=[x, minus_one],
                  outputs=[negated])
    graph.nodes.append(mul)
    done.derived[mul.name] = node.name
    const = node.inputs[0]
    _set_inputs(node, [negated, const])
    node.op = "Add"
    done.rewritten[node.name] = "constant minus x became Add of x * -1 and the constant"


def _div(graph: gs.Graph, node: gs.Node, done: Rewrites, names: Names, opset: int) -> None:
    act, const, value = split_const(node)
    if act is None or node.inputs[0] is not act:
        return
    with np.errstate(divide="ignore", over="ignore"):
        inverse = np.asarray(1.0 / value.astype(np.float64)).astype(value.dtype)
        # Both are exact in float64 (at most 2 x 24 significant bits): the product is 1 only
        # when 1/c is exactly the stored inverse, i.e. c is a power of two.
        exact = np.all(np.isfinite(inverse)) and np.all(
            inverse.astype(np.float64) * value.astype(np.float64) == 1.0)
    if not exact:
        done.kept[node.name] = ("Div by a constant stays Div: 1/c is not exact in "
                                f"{value.dtype} for every c (not all powers of two)")
        return
    node.op = "Mul"
    _set_inputs(node, [act, gs.Constant(names.fresh(f"{const.name}_inverse"), inverse)])
    done.rewritten[node.name] = "Div by a power-of-two constant became Mul by its inverse"


def _reshape(graph: gs.Graph, node: gs.Node, done: Rewrites, names: Names, opset: int) -> None:
    src, dst = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    if not src or not dst or len(src) != 4 or len(dst) != 2:
        return
    if dst != [src[0], int(np.prod(src[1:]))]:
        return
    node.op = "Flatten"
    _set_inputs(node, [node.inputs[0]])
    node.attrs.clear()
    node.attrs["axis"] = 1
    done.rewritten[node.name] = "Reshape of a 4-D tensor to [batch, features] became Flatten"


def _neg(graph: gs.Graph, node: gs.Node, done: Rewrites, names: Names, opset: int) -> None:
    x = node.inputs[0] if node.inputs else None
    if x is None or x.dtype is None or not np.issubdtype(np.dtype(x.dtype), np.floating):
        return
    minus_one = gs.Constant(names.fresh(f"{node.name}_minus_one"),
                            np.asarray(-1, dtype=np.dtype(x.dtype)))
    node.op = "Mul"
    _set_inputs(node, [x, minus_one])
    done.rewritten[node.name] = "Neg became Mul by -1 (a sign flip either way)"


def _gemm(graph: gs.Graph, node: gs.Node, done: Rewrites, names: Names, opset: int) -> None:
    if float(node.attrs.get("beta", 1.0)) != 0.0:
        return
    bias = present(node, 2)
    if bias is not None and not (is_const(bias) and np.all(np.isfinite(const_value(bias)))):
        return
    _set_inputs(node, list(node.inputs[:2]))
    node.attrs.pop("beta")
    done.rewritten[node.name] = "a Gemm with beta=0 dropped its C input and beta"


def _scaler(graph: gs.Graph, node: gs.Node, done: Rewrites, names: Names, opset: int) -> None:
    if node.domain != "ai.onnx.ml" or len(node.inputs) != 1:
        return
    x, out = node.inputs[0], node.outputs[0]
    shape = static_shape(x)
    offset = np.asarray(node.attrs.get("offset", []), np.float32)
    scale = np.asarray(node.attrs.get("scale", []), np.float32)
    if x.dtype is None or np.dtype(x.dtype) != np.float32 or shape is None or len(shape) not in (
            1, 2) or offset.size != scale.size or offset.size not in (1, shape[-1]):
        done.kept[node.name] = ("Scaler stays: only a float32 [N, C] or [C] input with one "
                                "offset and scale per feature (or one for all) is an Add and Mul")
        return
    shifted = gs.Variable(names.fresh(f"{out.name}_shifted"), dtype=np.float32, shape=shape)
    add = gs.Node("Add", names.fresh(f"{node.name}_offset"), outputs=[shifted], inputs=[
        x, gs.Constant(names.fresh(f"{node.name}_negated_offset"), np.negative(offset))])
    graph.nodes.append(add)
    done.derived[add.name] = node.name
    node.op, node.domain = "Mul", ""
    node.attrs.clear()
    _set_inputs(node, [shifted, gs.Constant(names.fresh(f"{node.name}_scale"), scale)])
    done.rewritten[node.name] = "Scaler became Add of -offset and Mul by scale (per feature)"


_Handler = Callable[[gs.Graph, gs.Node, Rewrites, Names, int], None]
_HANDLERS: Dict[str, _Handler] = {
    "Sum": _sum, "Max": _max, "Clip": _clip, "Min": _min, "Sub": _sub, "Div": _div,
    "Reshape": _reshape, "Neg": _neg, "Gemm": _gemm, "Scaler": _scaler,
}
