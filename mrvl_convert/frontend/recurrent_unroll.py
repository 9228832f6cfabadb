"""Recurrent cells (LSTM, GRU, RNN) over a static sequence, unrolled into the layers they are.

No layer of the accelerator's set is a recurrent cell, so a cell stayed on the CPU and cut its
model in two or three (a CRNN's BiLSTM, a voice-activity model's LSTM, a speech model's GRU),
with most of the model's MACs. Over a static sequence length T a cell is FC, Sigmoid, Tanh,
Mul2D, Sum2D, StridedSlice and Concat layers.

Rewrite: the input projection of every step and direction, ``X W^T + Wb (+ Rb)``, is ONE MatMul
of the sequence as tokens ``[N, T, I]`` (``X`` transposed from ``[T, N, I]`` in layout 0; at
batch 1 by Squeeze(1) and Unsqueeze(0), so ``rules/batch_axis.py`` sees that axis 0 is time, not
a batch) by the directions' stacked ``W^T``, plus one Add; it is viewed as
``[N, T * D * G * hidden]`` and each step takes its columns (``recurrent_steps.py``): per step
and direction only ``H R^T`` (one ``[N, hidden] x [hidden, G * hidden]`` MatMul) and the gates,
all on 2-D ``[N, C]`` tensors (no step slices an axis that may be the batch). Y, Y_h and Y_c are
Concats of the steps' states on the channel axis of their ``[N, hidden, 1, 1]`` views, reshaped
(and transposed) to ONNX's shapes; at batch 1, the views the model takes of a time-major Y
are then remade from its joined steps (``step_heads.py``, exact), so a per-step head computes
on ``[1, T, ...]``, not at batch T. The cell's node becomes the projection MatMul
(``rewritten``); every other node is ``derived`` from it, so ``--deny LSTM`` still denies it.
``recurrent_reference.py`` unrolls a QDQ model's cells the same way for verify's int8
reference.

Requires: a cell with constant W, R (and B, P), a float32 sequence of static T; opset
``opset`` (>= 11). Ensures: each cell whose form is one of those below is replaced, the graph
left topologically sorted; any other cell stays, ``kept`` says why: T dynamic or over
``MAX_STEPS`` steps, ``sequence_lens`` not all T, ``activations`` other than the defaults,
``activation_alpha/beta``, ``clip``, ``input_forget=1``, peepholes ``P`` other than zero.
Batch N > 1 unrolls too, but its per-step layers take batch 1 only (Mul2D, Concat), so those
steps run on the CPU in pieces; the cell's ``rewritten`` entry says so (not run in chunks: the
region reads the sequence's axis 0, time, beside its steps' axis 0, the batch).

Bound: exact in real arithmetic. In float32, each gate's pre-activation is the same sum of
``I + hidden + 2`` terms (``X W``, ``H R``, ``Wb``, ``Rb``) in another order (onnxruntime adds
``Wb + Rb`` first, here ``Rb`` joins ``X W + Wb``): it differs by at most ``2 (I + hidden + 1)
u sum|terms|`` (u = 2^-24) per step; the gates, products and state updates are ONNX's formulas
evaluated as onnxruntime does, so only that difference propagates through the steps
(``tests/frontend/test_recurrent_unroll.py`` runs both on onnxruntime for every form).
MACs: the MatMuls count ``T N D G hidden (I + hidden)``, the cell's (``core/macs.py``), less
the first step's ``H R^T`` of a zero initial state (not computed) or a constant one (computed
here, numpy's sum of the same terms, within the bound above).
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, const_value, is_const, present, static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites
from mrvl_convert.frontend.recurrent_steps import GATES, STEPS, Builder, Step, Weights
from mrvl_convert.frontend.step_heads import lift_step_heads

MAX_STEPS = 256  # steps unrolled at most: T * directions steps of about 15 layers each
_DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"],
                        "RNN": ["Tanh"]}


def unroll_recurrent(graph: gs.Graph, done: Rewrites, opset: int) -> bool:
    """Unroll every cell this module takes in place; True when one was (the caller cleans up)."""
    names, changed, joined = Names(graph), False, []
    for node in list(graph.nodes):
        if node.op not in STEPS:
            continue
        why = refusal(node)
        if why is not None:
            done.kept[node.name] = f"{node.op} not unrolled: {why}; it runs on the CPU"
            continue
        joined += _unroll(graph, node, names, done, opset)
        changed = True
    # After every cell: a next cell's sequence is a view of the one before it.
    lift_step_heads(graph, joined, opset, done)
    return changed


def refusal(node: gs.Node) -> Optional[str]:
    """Why this cell is not unrolled, or None."""
    x = static_shape(node.inputs[0])
    if x is None or len(x) != 3:
        return "its sequence's shape is not static"
    if node.inputs[0].dtype is not None and np.dtype(node.inputs[0].dtype) != np.float32:
        return f"its sequence is {np.dtype(node.inputs[0].dtype).name}, not float32"
    steps = x[1] if int(attr(node, "layout", 0)) else x[0]
    if steps > MAX_STEPS:
        return f"its sequence has T={steps} steps, over the {MAX_STEPS} unrolled at most"
    weights = [node.inputs[1], node.inputs[2], present(node, 3), _peepholes(node)]
    if not all(is_const(t) for t in weights if t is not None):
        return "its weights W, R, B or P are not constants"
    return _attribute_refusal(node, steps) or _input_refusal(node, steps)


def _attribute_refusal(node: gs.Node, steps: int) -> Optional[str]:
    directions = 2 if attr(node, "direction", "forward") == "bidirectional" else 1
    given = attr(node, "activations")
    if given is not None and list(given) != _DEFAULT_ACTIVATIONS[node.op] * directions:
        return f"activations {list(given)} are not the defaults"
    for name in ("activation_alpha", "activation_beta", "clip"):
        if attr(node, name) is not None:
            return f"attribute {name} is set"
    if int(attr(node, "input_forget", 0)):
        return "input_forget=1 couples its gates"
    return None


def _input_refusal(node: gs.Node, steps: int) -> Optional[str]:
    lens = present(node, 4)
    if lens is not None and not (is_const(lens) and np.all(const_value(lens) == steps)):
        return f"sequence_lens is given and not a constant {steps} (T) for every sample"
    peep = _peepholes(node)
    if peep is not None and np.any(const_value(peep) != 0):
        return "it has peephole weights P"
    return None


def _peepholes(node: gs.Node) -> Optional[gs.Tensor]:
    return present(node, 7) if node.op == "LSTM" else None


def _unroll(graph: gs.Graph, node: gs.Node, names: Names, done: Rewrites,
            opset: int) -> List[gs.Tensor]:
    """Unrolls ``node``; returns the batch-1 tensor its Y views, if any (``step_heads.py``)."""
    b, cell = Builder(graph, names, node.name, opset), node.op
    layout, direction = int(attr(node, "layout", 0)), attr(node, "direction", "forward")
    w = const_value(node.inputs[1]).astype(np.float32)  # [D, G k, I]
    r = const_value(node.inputs[2]).astype(np.float32)  # [D, G k, k]
    dirs, gk, _ = w.shape
    k = gk // GATES[cell]
    x_shape = static_shape(node.inputs[0])
    steps, rows = (x_shape[1], x_shape[0]) if layout else (x_shape[0], x_shape[1])
    inside = cell == "GRU" and int(attr(node, "linear_before_reset", 0))
    projected, rb = _biases(node, dirs, gk, k, inside)
    outputs = list(node.outputs)
    first = list(zip(_states(b, node, 5, dirs, rows, k, layout),
                     _states(b, node, 6, dirs, rows, k, layout)))
    proj = _projection(b, node, steps, rows, layout, w, projected)
    before = b.added[:-2]  # what the projection reads; its bias Add and Reshape follow it
    ys, finals = [[None] * dirs for _ in range(steps)], []
    for d in range(dirs):
        reverse = direction == "reverse" or d == 1
        h, c = first[d]
        weights = Weights(np.ascontiguousarray(r[d].T), rb[d, 2 * k:] if inside else None)
        for t in (reversed(range(steps)) if reverse else range(steps)):
            x = b.columns(proj, (t * dirs + d) * gk, gk, rows, f"t{t}d{d}_x")
            h, c = STEPS[cell](b, Step(x, h, c, rows, k, f"t{t}d{d}"), weights)
            ys[t][d] = h
        finals.append((h, c))
    joined = _outputs(b, outputs, ys, finals, rows, k, layout)
    _become_projection(node, b, done, steps, dirs, rows)
    _place(graph, node, before, b.added[len(before):])
    return joined


def _biases(node: gs.Node, dirs: int, gk: int, k: int, inside: bool):
    """(the projection's bias ``Wb + Rb`` ``[D, G k]``, ``Rb``): a GRU's ``Rbh`` stays out of
    it when r scales it inside the step (``linear_before_reset``)."""
    bias = present(node, 3)
    if bias is None:
        zeros = np.zeros((dirs, gk), np.float32)
        return zeros, zeros
    wb, rb = np.split(const_value(bias).astype(np.float32), 2, axis=1)
    folded = rb.copy()
    if inside:
        folded[:, 2 * k:] = 0
    return wb + folded, rb


def _place(graph: gs.Graph, node: gs.Node, before: List[gs.Node], after: List[gs.Node]) -> None:
    """The new nodes around the cell's, in order: the graph stays topologically sorted
    (graphsurgeon 0.5.2's toposort reports a false cycle on a tensor read three times from
    nodes it has not sorted yet: every step reads the projection)."""
    at = next(i for i, n in enumerate(graph.nodes) if n is node)
    graph.nodes[at:at + 1] = before + [node] + after


def _projection(b: Builder, node: gs.Node, steps: int, rows: int, layout: int, w: np.ndarray,
                bias: np.ndarray) -> gs.Tensor:
    """``X W^T + bias`` of every step and direction as ``[N, T * D * G * k]``."""
    dirs, gk, width = w.shape
    x = node.inputs[0]
    if not layout:
        x = (b.to_front(x, [1, steps, width], "tokens") if rows == 1 else
             b.op("Transpose", [x], [rows, steps, width], "tokens", {"perm": [1, 0, 2]}))
    stacked = np.concatenate([w[d].T for d in range(dirs)], axis=1)  # [I, D G k]
    node.attrs = {}
    node.op = "MatMul"
    out = gs.Variable(b.names.fresh(f"{node.name}_proj"), np.float32, [rows, steps, dirs * gk])
    node.inputs.clear()
    node.inputs.extend([x, b.const(stacked, "W")])
    node.outputs.clear()
    node.outputs.append(out)
    biased = b.op("Add", [out, b.const(bias.reshape(-1), "B")], [rows, steps, dirs * gk], "bias")
    return b.reshape(biased, [rows, steps * dirs * gk], "steps")


def _states(b: Builder, node: gs.Node, index: int, dirs: int, rows: int, k: int,
            layout: int) -> List:
    """Each direction's initial state ``[N, k]`` from ``[D, N, k]`` (layout 1: ``[N, D, k]``;
    None: zeros). Read before the cell's node becomes the projection."""
    given = present(node, index)  # a GRU's or RNN's inputs end at 5
    if given is None:
        return [None] * dirs
    if is_const(given) and not np.any(const_value(given)):
        return [None] * dirs  # zeros: the products by it are skipped, exactly
    if is_const(given):  # each direction's [N, k] as a constant: no op on a constant
        values = const_value(given).astype(np.float32)
        values = values if layout else values.transpose(1, 0, 2)  # [N, D, k]
        return [b.const(np.ascontiguousarray(values[:, d]), f"init{index}_d{d}")
                for d in range(dirs)]
    if rows == 1 and dirs != 1 and not layout:  # as the sequence: axis 0 is no batch
        given = b.to_front(given, [1, dirs, k], f"init{index}_1")
    elif rows != 1 and dirs != 1 and not layout:
        given = b.op("Transpose", [given], [rows, dirs, k], f"init{index}_t", {"perm": [1, 0, 2]})
    flat = b.reshape(given, [rows, dirs * k], f"init{index}")
    return [flat if dirs == 1 else b.columns(flat, d * k, k, rows, f"init{index}_d{d}")
            for d in range(dirs)]


def _outputs(b: Builder, outputs: List[gs.Tensor], ys, finals, rows: int, k: int,
             layout: int) -> List[gs.Tensor]:
    """Y ``[T, D, N, k]`` (layout 1: ``[N, T, D, k]``), Y_h and Y_c ``[D, N, k]`` (``[N, D, k]``);
    returns Y's joined steps when the batch is 1 (a time-major Y is a view of them)."""
    steps, dirs = len(ys), len(finals)
    wanted = [o if o.name and (o.outputs or o in b.graph.outputs) else None for o in outputs]
    wanted += [None] * (3 - len(wanted))
    joined = []
    if wanted[0] is not None:
        joined.append(_assemble(b, [h for row in ys for h in row], wanted[0],
                                [rows, steps, dirs, k], None if layout else [1, 2, 0, 3], "Y"))
    for j, (out, tag) in enumerate(zip(wanted[1:], ("Y_h", "Y_c"))):
        if out is not None:
            _assemble(b, [f[j] for f in finals], out, [rows, dirs, k],
                      None if layout else [1, 0, 2], tag)
    return joined if rows == 1 else []


def _assemble(b: Builder, parts: List[gs.Tensor], out: gs.Tensor, shape: List[int],
              perm: Optional[List[int]], tag: str) -> gs.Tensor:
    """Concat ``[N, k]`` parts along the channel axis of their ``[N, k, 1, 1]`` views (the
    layer set concatenates 4-D tensors), view as ``shape``, transpose by ``perm`` into ``out``
    (a Reshape when the batch is 1: the transpose moves no element then)."""
    rows, k = shape[0], shape[-1]
    joined = parts[0] if len(parts) == 1 else b.op(
        "Concat", [b.reshape(p, [rows, k, 1, 1], f"{tag}_part") for p in parts],
        [rows, len(parts) * k, 1, 1], f"{tag}_cat", {"axis": 1})
    if perm is None or rows == 1:
        final = [shape[i] for i in perm] if perm else shape
        b.op("Reshape", [joined, b.ints(final, f"{tag}_shape")], final, tag)
    else:
        viewed = b.reshape(joined, shape, f"{tag}_view")
        b.op("Transpose", [viewed], [shape[i] for i in perm], tag, {"perm": perm})
    _rebind(b, out)
    return joined


def _rebind(b: Builder, out: gs.Tensor) -> None:
    """The last added node writes the cell's own output tensor (its name and readers kept)."""
    last = b.added[-1]
    last.outputs.clear()
    last.outputs.append(out)


def _become_projection(node: gs.Node, b: Builder, done: Rewrites, steps: int,
                       dirs: int, rows: int) -> None:
    cell = b.origin
    done.rewritten[cell] = (f"unrolled over its T={steps} steps x {dirs} direction(s): this "
                            f"node is the input projection of every step, one MatMul; the "
                            f"steps' FCs and gates are nodes derived from it") + (
        "" if rows == 1 else
        f"; at batch {rows} its steps' Mul2D and Concat layers, which take batch 1 only, run "
        f"on CPU, the steps in pieces between them (the region reads the sequence's axis 0, "
        f"time, and its steps' axis 0, the batch, so it is not run in chunks): convert at "
        f"batch 1 and run each sample as its own inference")
    for added in b.added:
        if added.outputs and added.outputs[0].outputs or added.outputs[0] in b.graph.outputs:
            done.derived[added.name] = cell  # a node nothing reads is cleaned up, unlisted
