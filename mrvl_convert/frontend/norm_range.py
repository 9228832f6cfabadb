"""A norm's input scaled by a power of two, so its sum of squares stays inside fp16's range.

An RMSNorm ``x * 1/sqrt(mean(x**2) + eps)`` (T5's) or a LayerNorm ``d / sqrt(mean(d**2) + eps)``,
``d = x - mean(x)``, squares its input: a T5 residual stream of 4500 squares to 2.0e7, beyond
fp16's largest 65504, although neither ``x`` nor the norm's output leaves fp16's range. For a power
of two ``s = 2**-k``

    x * 1/sqrt(mean(x**2) + eps)  ==  (x*s) * 1/sqrt(mean((x*s)**2) + eps*s**2)

so the norm reads ``x*s`` (one Mul by a constant, before the square and the product; a LayerNorm's
``x`` before its centring mean and Sub) and its eps constant becomes ``eps*s**2``. ``k`` comes
from the caller (``norm_scales``: the name of the ReduceMean of the squares -> k); the conversion
never guesses it: ``verify/norm_scales.py`` chooses it from the float32 peaks of ``x`` over samples
(``--keep-fp32 auto``'s choosing half).

Bound: in float32 (onnxruntime before and after) the rewrite is bit-equal wherever every element
of ``x*s`` is 0 or at least 2**-63 in magnitude, and ``eps*s**2`` is a normal float: multiplying
by ``2**-k`` and ``2**-2k`` is exact for normal results, every rounding of the sum of squares, the
mean's division and the Add scales with them (binary floating point), ``sqrt(v*4**-k)`` is
``sqrt(v)*2**-k`` exactly for a correctly rounded Sqrt (and for onnxruntime 1.18's Eigen
``psqrt``, whose table and Newton step read the mantissa and the exponent's parity only: measured
bit-equal in tests/frontend/test_norm_range.py), ``1/(q*s) = (1/q)/s`` and ``(x*s)*(r/s)`` is the
same real product ``x*r``, rounded once. Where ``x*s`` is subnormal (|x| < 2**(k-126)) the
products differ by at most 2**-150 * |r| / s absolutely, and squares below 2**-126 lose their
subnormal bits (at most 2**-150 each in the sum). In fp16 on the accelerator ``eps*s**2`` rounds
to fp16 (to 0 below 2**-25): the norm of a row whose mean square is not far above eps changes by
at most ``eps / (2 mean(x**2))`` relatively; ``x*s`` below 2**-14 is an fp16 subnormal (|x| <
2**(k-14)), within 2**-25 absolutely, i.e. within ``2**-25 * |r| / s`` of the output.

The forms: the square is ``Pow(d, 2)`` or ``Mul(d, d)``, read only by a ReduceMean, read only by
an Add of a float constant (eps), read only by a Sqrt, whose every reader is ``Div(d, sqrt)``, or
``Reciprocal(sqrt)`` / ``Div(1, sqrt)`` read only by ``Mul``s whose other operand is ``d`` (after
``rsqrt_forms.py``). ``d`` is ``x`` (RMSNorm) or ``Sub(x, ReduceMean(x))`` whose mean is read
only by that Sub (LayerNorm). A named norm in another form is left as it is, with the reason in
``kept``.

Requires: a graphsurgeon graph with constants as initializers (after ``rsqrt_forms.py``).
Ensures: each named norm in one of the forms reads ``x*s`` (the new Mul listed in ``derived``,
the ReduceMean in ``rewritten`` with k), every other node as it was; the caller cleans up and
sorts the graph.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Set, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.frontend.canonical_forms import Names, Rewrites
from mrvl_convert.frontend.residual_range import (STREAM_HEADROOM, Stream, constant_of,
                                                  find_stream, scale_stream)

#: The largest k taken: 2**-100 already flushes any float16 input to 0.
MAX_EXPONENT = 100


@dataclass
class _Norm:
    """One norm's pieces: the tensor scaled, the nodes reading it, the eps Add."""

    x: gs.Tensor
    readers: List[Tuple[gs.Node, int]]  # (node, input index) reading x, rewired to x*s
    eps_add: gs.Node
    eps_index: int


def squared_input(mean: gs.Node) -> Optional[gs.Tensor]:
    """The tensor a ReduceMean averages the squares of (``Pow(d, 2)`` or ``Mul(d, d)``), or
    None: the chooser measures it, the rewrite scales what it is computed from."""
    if mean.op != "ReduceMean" or not mean.inputs or not mean.inputs[0].inputs:
        return None
    square = mean.inputs[0].inputs[0]
    if square.op == "Mul" and len(square.inputs) == 2 and square.inputs[0] is square.inputs[1]:
        return square.inputs[0]
    if square.op == "Pow" and len(square.inputs) == 2 and _scalar(square.inputs[1]) == 2.0:
        return square.inputs[0]
    return None


def scale_norms(graph: gs.Graph, scales: Mapping[str, int], done: Rewrites) -> bool:
    """Scale each norm ``scales`` names (its ReduceMean of squares -> k) by ``2**-k``; True
    when one was."""
    if not scales:
        return False
    names, before = Names(graph), len(done.rewritten)
    outputs = {t.name for t in graph.outputs}
    norms, why_not = _norms(graph, outputs)
    handled: Set[str] = set()
    for key, k in sorted(scales.items()):
        if key in handled:
            continue
        norm = norms.get(key)
        if norm is None or not 0 < k <= MAX_EXPONENT:
            why = why_not.get(key, "no such node") if norm is None else "k out of range"
            done.kept[key] = f"norm range scale 2**-{k} not applied: {why}"
            continue
        # the whole residual stream the norm reads, when it is one; else the norm alone
        stream = find_stream(key, norms, outputs)
        if stream is None or not stream.branches:
            _apply(graph, norm, key, k, done, names)
            continue
        handled.update(stream.norms)
        _scale_stream_and_norms(graph, stream, norms, scales, done, names)
    return len(done.rewritten) > before


def _scale_stream_and_norms(graph: gs.Graph, stream: Stream, norms: Dict[str, _Norm],
                            scales: Mapping[str, int], done: Rewrites, names: Names) -> None:
    """The stream by what holds it (``residual_range.py``), then each of its norms by the rest
    of its own k."""
    k_stream = max(scales.get(n, 0) for n in stream.norms) - STREAM_HEADROOM
    if k_stream > 0:
        scale_stream(graph, stream, norms, k_stream, done, names)
    for name in stream.norms:
        if scales.get(name, 0) > max(k_stream, 0):
            _apply(graph, norms[name], name, scales[name] - max(k_stream, 0), done, names)


def _norms(graph: gs.Graph, outputs: Set[str]) -> Tuple[Dict[str, _Norm], Dict[str, str]]:
    """Every norm of the graph in a form, by its ReduceMean of squares; why each other
    ReduceMean is none."""
    norms: Dict[str, _Norm] = {}
    why_not: Dict[str, str] = {}
    for mean in [n for n in graph.nodes if n.op == "ReduceMean"]:
        norm, why = _norm(mean)
        if norm is not None and _inner_outputs(mean, norm, outputs):
            norm, why = None, "a value inside it is a model output"
        if norm is None:
            why_not[mean.name] = why
        else:
            norms[mean.name] = norm
    return norms, why_not


def _scalar(tensor: gs.Tensor) -> Optional[float]:
    """A one-value constant: an initializer, or (in a model as loaded, which the chooser reads)
    a Constant node's output."""
    value = constant_of(tensor)
    return None if value is None or value.size != 1 else float(value.reshape(-1)[0])


def _only_reader(tensor: gs.Tensor, op: str) -> Optional[gs.Node]:
    readers = list(tensor.outputs)
    return readers[0] if len(readers) == 1 and readers[0].op == op else None


def _inner_outputs(mean: gs.Node, norm: _Norm, outputs: Set[str]) -> bool:
    """Whether a tensor whose value the scale changes (the squares, their mean, the root, the
    inverse; a LayerNorm's centring mean) is a model output."""
    add = norm.eps_add
    changed = [mean.inputs[0], mean.outputs[0], add.outputs[0]]
    changed += [t for r in add.outputs[0].outputs for t in r.outputs]
    changed += [t for r in add.outputs[0].outputs for n in r.outputs[0].outputs
                if n.op in ("Reciprocal", "Div") for t in n.outputs]
    changed += [t for n, _ in norm.readers if n.op in ("ReduceMean", "Sub") for t in n.outputs]
    return any(t.name in outputs for t in changed)


def _norm(mean: gs.Node) -> Tuple[Optional[_Norm], str]:
    """The norm around ``mean`` (module docstring's forms), or None and why not."""
    d = squared_input(mean)
    if d is None:
        return None, "it does not average Pow(d, 2) or Mul(d, d)"
    square = mean.inputs[0].inputs[0]
    add = _only_reader(mean.outputs[0], "Add")
    if len(mean.inputs[0].outputs) != 1 or add is None:
        return None, "its squares or its mean have other readers than the norm"
    eps_index = next((i for i, t in enumerate(add.inputs) if constant_of(t) is not None
                      and np.issubdtype(constant_of(t).dtype, np.floating)), None)
    sqrt = _only_reader(add.outputs[0], "Sqrt")
    if eps_index is None or sqrt is None:
        return None, "its mean is not read only by an Add of a float constant and a Sqrt"
    readers = _products(sqrt.outputs[0], d)
    if readers is None:
        return None, "its root is read by something other than d / root or d * (1 / root)"
    readers = [(square, i) for i, t in enumerate(square.inputs) if t is d] + readers
    return _centred(d, readers, add, eps_index)


def _products(root: gs.Tensor, d: gs.Tensor) -> Optional[List[Tuple[gs.Node, int]]]:
    """The (node, index) slots where the norm's output reads ``d``: ``Div(d, root)``, or a Mul
    of ``d`` and ``Reciprocal(root)``/``Div(1, root)``; None when another reader exists."""
    slots: List[Tuple[gs.Node, int]] = []
    for reader in root.outputs:
        if reader.op == "Div" and reader.inputs[0] is d and reader.inputs[1] is root:
            slots.append((reader, 0))
            continue
        inverse = reader.op == "Reciprocal" or (
            reader.op == "Div" and reader.inputs[1] is root and _scalar(reader.inputs[0]) == 1.0)
        if not inverse or not reader.outputs[0].outputs:
            return None
        for mul in reader.outputs[0].outputs:
            if mul.op != "Mul" or len(mul.inputs) != 2 or d not in mul.inputs \
                    or reader.outputs[0] not in mul.inputs:
                return None
            slots.append((mul, list(mul.inputs).index(d)))
    return slots or None


def _centred(d: gs.Tensor, readers: List[Tuple[gs.Node, int]], add: gs.Node,
             eps_index: int) -> Tuple[Optional[_Norm], str]:
    """A LayerNorm's ``d = Sub(x, ReduceMean(x))`` is scaled through its ``x`` (then ``d`` and
    every reader of it scale with it); any other ``d`` is scaled itself."""
    producer = d.inputs[0] if d.inputs else None
    if producer is None or producer.op != "Sub":
        return _Norm(d, readers, add, eps_index), ""
    x, centre = producer.inputs
    mean = centre.inputs[0] if centre.inputs else None
    if mean is None or mean.op != "ReduceMean" or mean.inputs[0] is not x:
        return _Norm(d, readers, add, eps_index), ""
    if len(centre.outputs) != 1:
        return None, "its centring mean has other readers than the Sub"
    if not {id(n) for n in d.outputs} <= {id(n) for n, _ in readers}:
        return None, "its centred input has other readers than the norm"
    return _Norm(x, [(producer, 0), (mean, 0)], add, eps_index), ""


def _apply(graph: gs.Graph, norm: _Norm, key: str, k: int, done: Rewrites,
           names: Names) -> None:
    dtype = np.dtype(norm.x.dtype) if norm.x.dtype is not None else np.dtype(np.float32)
    scale = gs.Constant(names.fresh(f"{key}_range_scale"), np.array(2.0 ** -k, dtype))
    scaled = gs.Variable(names.fresh(f"{key}_range_scaled"), dtype=norm.x.dtype,
                         shape=norm.x.shape)
    mul = gs.Node("Mul", names.fresh(f"{key}_range_scale"), inputs=[norm.x, scale],
                  outputs=[scaled])
    graph.nodes.append(mul)
    for node, index in norm.readers:
        node.inputs[index] = scaled
    eps = norm.eps_add.inputs[norm.eps_index]
    value = constant_of(eps)
    # exact: eps times a power of two (a new constant: another norm may share eps)
    norm.eps_add.inputs[norm.eps_index] = gs.Constant(
        names.fresh(f"{eps.name}_range"), np.asarray(value * value.dtype.type(4.0 ** -k)))
    done.derived[mul.name] = key
    said = (f"norm input scaled by 2**-{k} and eps by 2**-{2 * k}, so its squares stay inside "
            "fp16's range: exact in float32 barring underflow (frontend/norm_range.py)")
    done.rewritten[key] = f"{done.rewritten[key]}; then its {said}" if key in done.rewritten \
        else said
