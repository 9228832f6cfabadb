"""Per-step heads after an unrolled recurrent cell: its time-major outputs as views of ONE
batch-1 tensor, so the head's layers run at batch 1 over T rows.

``recurrent_unroll.py`` joins a batch-1 cell's step states into one ``[1, T D k, 1, 1]`` tensor
and lays it out as ONNX's ``Y`` ``[T, D, 1, k]``. Models then view ``Y`` (a Transpose of the
unit batch axis, a Reshape to ``[T, 1, D k]`` or ``[T, D k]``, a Squeeze) and run a per-step
head (MatMul, Add, Softmax) on a tensor whose axis 0 is the T steps. The layer set and the
codegen take axis 0 as the batch: with T above the device's maximum batch (8) the head's layers
were compiled at batch T and the model did not fit one device (an EEG LSTM over 30 steps, a
CRNN over an image's columns).

Rewrite: from the joined tensor of each unrolled cell's ``Y`` (``sources``) the chain of views
(``Reshape``, ``Flatten``, ``Squeeze``, ``Unsqueeze``, ``Identity``, a ``Transpose`` that moves
only axes of size 1) is followed to every tensor X that another op reads or that is a graph
output. X is then made from the joined tensor directly: ``Squeeze(0)`` of ``Reshape(joined,
[1] + shape(X))`` when its axis 0 is above 1 (``sequence_lift.py``, which runs after, seeds on
that Squeeze and computes X's per-step readers on ``[1, T, ...]``: one layer at batch 1 over T
rows), ``Reshape(joined, shape(X))`` when its axis 0 is 1 (a next cell's ``[1, T, I]``
sequence). The views between go when nothing else reads them. A Gemm reading a lifted X
(``A B + C``, constant B and C, alpha and beta 1: a CRNN's ``[T, C]`` classifier) becomes a
MatMul by B (``B^T`` for ``transB``, a constant) and an Add of C, which ``sequence_lift.py``
lifts with X (no Gemm takes ``[1, T, C]``). In a QDQ model the Gemm reads X through a
QuantizeLinear and a DequantizeLinear, its B and C dequantized constants (int8, int32): it
becomes a MatMul by a DequantizeLinear of its own of the int8 B (``B^T`` for ``transB``: one
scale, the same values) and an Add of the dequantized C, which ``sequence_lift.py`` lifts through
the Q/DQ pair and ``mrvl.qnn_fc_tokens`` takes as one int8 FC with its bias (``rules/qnn_bias.py``).
A QDQ head's int8 MatMul reading X ``[T, 1, C]`` (a CRNN's) is first moved onto a ``[T, C]``
view of X by ``int8_step_rows.py`` (lifted it would be 4-D, which no int8 FC takes).

Requires: ``sources`` batch-1 float tensors of static shape in ``graph``, the graph sorted.
Ensures: every X above (rank at most 3 when its axis 0 is above 1; a larger one keeps its
chain) has the same name, shape and values; the graph stays sorted; each added node is in
``done.derived`` with the node that made X before.

Exact (pure layout): each view keeps the elements' memory order (a Transpose that moves only
axes of size 1 does), so X is the joined tensor reshaped to X's shape, element for element; no
value is computed. The one bound is the Gemm's: onnxruntime's Gemm adds C into its accumulator
(by blocks of K), the MatMul and Add add it last; two float32 sums of the same K + 1 terms are
at most ``2 K u sum |terms|`` apart (u = 2**-24), ``tests/frontend/test_step_heads.py`` runs
both on onnxruntime.
"""
from __future__ import annotations

from typing import Callable, Iterator, List, Sequence

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, is_const, static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites, axes_node
from mrvl_convert.frontend.int8_step_rows import flatten_int8_heads

_VIEWS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose"})
_MAX_RANK = 3  # sequence_lift.py lifts tensors of rank 3 at most (their views 4)


def lift_step_heads(graph: gs.Graph, sources: Sequence[gs.Tensor], opset: int,
                    done: Rewrites) -> bool:
    """Remake each tensor the views of ``sources`` lead to from its source (see the module
    docstring); True when one was (the caller cleans up)."""
    names, changed = Names(graph), False
    outputs = {t.name for t in graph.outputs}
    for source in sources:
        for target in list(_viewed(source, outputs)):  # an int8 head on [T, 1, C] reads [T, C]
            changed |= flatten_int8_heads(graph, target, names, done) is not None
        for target in list(_viewed(source, outputs)):
            changed |= _remake(graph, source, target, opset, names, done)
    return changed


def is_view(node: gs.Node) -> bool:
    """The node only reshapes: its output holds its input's elements in the same order."""
    if node.op not in _VIEWS or not node.outputs or static_shape(node.outputs[0]) is None:
        return False
    if node.op == "Transpose":
        shape = static_shape(node.inputs[0])
        perm = attr(node, "perm")
        if shape is None or perm is None:
            return False
        moved = [int(p) for p in perm if shape[int(p)] != 1]
        return moved == sorted(moved)
    return node.op != "Reshape" or is_const(node.inputs[1])


def _viewed(source: gs.Tensor, outputs: set) -> Iterator[gs.Tensor]:
    """The tensors reached from ``source`` through views only that something else reads (or
    that are graph outputs), each once."""
    frontier, seen = [source], {source.name}
    while frontier:
        tensor = frontier.pop()
        if tensor is not source and (tensor.name in outputs or
                                     any(not is_view(r) for r in tensor.outputs)):
            yield tensor
        for reader in tensor.outputs:
            out = reader.outputs[0] if is_view(reader) else None
            if out is not None and out.name not in seen:
                seen.add(out.name)
                frontier.append(out)


def _remake(graph: gs.Graph, source: gs.Tensor, target: gs.Tensor, opset: int, names: Names,
            done: Rewrites) -> bool:
    shape = static_shape(target)
    if not shape or len(target.inputs) != 1:
        return False
    lifted = shape[0] != 1
    if lifted and len(shape) > _MAX_RANK:
        return False
    maker = target.inputs[0]
    if maker.inputs and maker.inputs[0] is source and not lifted:
        return False  # already one Reshape of the source
    added = _nodes(source, shape, lifted, opset, names, maker.name)
    maker.outputs[0] = gs.Variable(names.fresh(f"{target.name}_before"), target.dtype, shape)
    _rebind(added[-1], target)
    at = next(i for i, n in enumerate(graph.nodes) if n is maker)
    graph.nodes[at:at] = added
    for node in added:
        done.derived[node.name] = maker.name
    for gemm in [r for r in target.outputs if lifted and _plain_gemm(r)]:
        _gemm_as_matmul(graph, gemm, names, done)
    for gemm in (_int8_gemms(target) if lifted else []):
        _int8_weight_as_matmul(graph, gemm, names, done)
        _gemm_as_matmul(graph, gemm, names, done)
    return True


def _dequantized_const(tensor: gs.Tensor) -> bool:
    """``tensor`` is a DequantizeLinear of a constant with one scale and zero point."""
    maker = tensor.inputs[0] if len(tensor.inputs) == 1 else None
    return maker is not None and maker.op == "DequantizeLinear" and all(
        is_const(t) for t in maker.inputs if t.name) and all(
        np.asarray(t.values).size == 1 for t in maker.inputs[1:] if t.name)


def _int8_gemms(target: gs.Tensor) -> List[gs.Node]:
    """The Gemms reading ``target`` through a QuantizeLinear and a DequantizeLinear (a QDQ
    model's per-step head) whose weight and bias are dequantized constants."""
    found = []
    for quant in [r for r in target.outputs if r.op == "QuantizeLinear"]:
        for dequant in [r for r in quant.outputs[0].outputs if r.op == "DequantizeLinear"]:
            found += [g for g in dequant.outputs[0].outputs if _plain_gemm(g, _dequantized_const)]
    return found


def _int8_weight_as_matmul(graph: gs.Graph, gemm: gs.Node, names: Names, done: Rewrites) -> None:
    """The int8 Gemm reads its weight ``[C, O]`` from a DequantizeLinear of its own (the int8
    constant transposed for ``transB``: one scale, so the same values), as an int8 MatMul's."""
    old = gemm.inputs[1].inputs[0]
    values = np.asarray(old.inputs[0].values)
    if attr(gemm, "transB", 0):
        values = np.ascontiguousarray(values.T)
    gemm.attrs["transB"] = 0
    weight = gs.Constant(names.fresh(f"{gemm.name}_int8_B"), values)
    out = gs.Variable(names.fresh(f"{gemm.name}_B"), gemm.inputs[1].dtype, list(values.shape))
    dequant = gs.Node("DequantizeLinear", names.fresh(f"{gemm.name}_B_dequantize"),
                      inputs=[weight] + list(old.inputs[1:]), outputs=[out])
    gemm.inputs[1] = out
    graph.nodes.insert(next(i for i, n in enumerate(graph.nodes) if n is gemm), dequant)
    done.derived[dequant.name] = gemm.name


def _plain_gemm(node: gs.Node, fixed: Callable[[gs.Tensor], bool] = is_const) -> bool:
    """``A B (+ C)`` with ``fixed`` B and C (constants): a per-row FC ``sequence_lift.py``
    lifts once it is a MatMul and an Add (no Gemm takes ``[1, T, C]``)."""
    if node.op != "Gemm" or attr(node, "transA", 0) or float(attr(node, "alpha", 1.0)) != 1.0:
        return False
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2].name else None
    if bias is not None and (float(attr(node, "beta", 1.0)) != 1.0 or not fixed(bias)):
        return False
    return fixed(node.inputs[1]) and static_shape(node.outputs[0]) is not None


def _gemm_as_matmul(graph: gs.Graph, gemm: gs.Node, names: Names, done: Rewrites) -> None:
    """The Gemm's node becomes the MatMul (``B`` transposed as a constant for ``transB``), an
    Add of ``C`` after it writes the Gemm's output."""
    weight = gemm.inputs[1]
    if is_const(weight):
        values = np.asarray(weight.values)
        weight = gs.Constant(names.fresh(f"{gemm.name}_B"), np.ascontiguousarray(
            values.T if attr(gemm, "transB", 0) else values))
    bias = gemm.inputs[2] if len(gemm.inputs) > 2 and gemm.inputs[2].name else None
    out = gemm.outputs[0]
    gemm.op, gemm.attrs = "MatMul", {}
    data = gemm.inputs[0]
    gemm.inputs.clear()
    gemm.inputs.extend([data, weight])
    done.rewritten[gemm.name] = ("a per-step Gemm after an unrolled recurrent cell as a MatMul "
                                 "and an Add, lifted with the steps to [1, T, ...]")
    if bias is None:
        return
    product = gs.Variable(names.fresh(f"{gemm.name}_product"), out.dtype, out.shape)
    gemm.outputs[0] = product
    add = gs.Node("Add", names.fresh(f"{gemm.name}_bias"), inputs=[product, bias], outputs=[out])
    at = next(i for i, n in enumerate(graph.nodes) if n is gemm)
    graph.nodes.insert(at + 1, add)
    done.derived[add.name] = gemm.name


def _nodes(source: gs.Tensor, shape: List[int], lifted: bool, opset: int, names: Names,
           tag: str) -> List[gs.Node]:
    """The Reshape of ``source`` to ``shape`` (lifted: to ``[1] + shape``, then a Squeeze(0)
    to ``shape``, the seed ``sequence_lift.py`` lifts from)."""
    view = [1] + shape if lifted else shape
    out = gs.Variable(names.fresh(f"{tag}_steps"), source.dtype, view)
    target = gs.Constant(names.fresh(f"{tag}_steps_shape"), np.asarray(view, np.int64))
    nodes = [gs.Node("Reshape", names.fresh(f"{tag}_steps"), inputs=[source, target],
                     outputs=[out])]
    if lifted:
        squeezed = gs.Variable(names.fresh(f"{tag}_squeezed"), source.dtype, shape)
        nodes.append(axes_node("Squeeze", names.fresh(f"{tag}_squeeze"), out, squeezed, [0],
                               opset, names))
    return nodes


def _rebind(node: gs.Node, tensor: gs.Tensor) -> None:
    node.outputs.clear()
    node.outputs.append(tensor)
