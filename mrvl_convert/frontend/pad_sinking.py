"""A Pad moved past the Unsqueeze and Transpose nodes that alone read it, toward its Conv; a
``-inf`` Pad folded into the MaxPool that alone reads it.

Requires: static shapes on the Pad's input and on the readers' outputs; constant pads.
Ensures: while a Pad's output is read by one ``Unsqueeze`` or ``Transpose`` only (and is no
graph output), that node reads the Pad's input instead and the Pad reads its output, its pads
placed on the moved axes (an added unit axis gets none, a transposed axis keeps its own); the
Pad keeps its name, mode and value and writes the tensor the last node wrote, whose name, shape
and values are unchanged. An ``axes`` input is folded into full pads.

Why. Exporters of NHWC and batchless networks pad the tensor they have, then add the batch and
channel axes and transpose into the Conv's NCHW (madmom: ``[T, F] -> Pad -> Unsqueeze ->
Unsqueeze -> Transpose -> Conv``). Moved next to the Conv, the Pad folds into it (no layer at
all); moved anywhere else it is on a tensor of higher rank, which ``pad_forms.py`` maps.

Exact: padding commutes with a permutation of the axes and with adding a unit axis (a unit axis
is padded by nothing), for every mode: each output element is the same input element or the
same constant.

``fold_into_maxpool``: a constant ``-inf`` Pad of H and W (pads >= 0) of a 4-D tensor whose
only reader is a MaxPool (explicit pads, its Indices output unused) is removed and its pads added
to the MaxPool's, where each stays below the window (onnxruntime's limit). Exact: MaxPool's own
padding is ``-inf`` (a padded element never wins a max), and a window that reaches past the
padded input is cut alike in both (ceil_mode). The Pad is ``merged`` into the MaxPool.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Set

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import (attr, const_value, is_const, pad_amounts, pad_value, present,
                                     squeeze_axes, static_shape)
from mrvl_convert.frontend.canonical_forms import Names, Rewrites, _set_inputs

_MOVABLE = ("Unsqueeze", "Transpose")


def full_pads(node: gs.Node, rank: int) -> Optional[List[int]]:
    """The Pad's ``[begin_0 .. begin_r-1, end_0 .. end_r-1]`` over every axis (an ``axes``
    input spread out), or None when the pads or the axes are not constant."""
    pads = pad_amounts(node)
    axes = present(node, 3)
    if pads is None or (axes is not None and not is_const(axes)):
        return None
    if axes is None:
        return pads if len(pads) == 2 * rank else None
    chosen = [int(a) % rank for a in const_value(axes).reshape(-1)]
    if len(pads) != 2 * len(chosen):
        return None
    full = [0] * (2 * rank)
    for k, axis in enumerate(chosen):
        full[axis], full[rank + axis] = pads[k], pads[len(chosen) + k]
    return full


def set_pads(node: gs.Node, pads: Sequence[int], names: Names) -> None:
    """Write ``pads`` (over every axis) as the node spells them: the attribute before opset
    11, the constant input after (an ``axes`` input dropped)."""
    if "pads" in node.attrs:
        node.attrs["pads"] = [int(p) for p in pads]
        return
    inputs = list(node.inputs[:3])
    inputs[1] = gs.Constant(names.fresh(f"{node.name}_pads"), np.array(pads, np.int64))
    _set_inputs(node, inputs)


def _moved(pads: List[int], reader: gs.Node, rank: int) -> Optional[List[int]]:
    """The pads over the reader's output axes, or None when the reader is not a fixed
    unit-axis insertion or permutation."""
    begin, end = pads[:rank], pads[rank:]
    if reader.op == "Transpose":
        perm = [int(p) for p in attr(reader, "perm", list(range(rank))[::-1])]
        if sorted(perm) != list(range(rank)):
            return None
        return [begin[p] for p in perm] + [end[p] for p in perm]
    axes = squeeze_axes(reader)
    out = rank + len(axes or [])
    if not axes or len({a % out for a in axes}) != len(axes):
        return None
    added = {a % out for a in axes}
    kept = iter(range(rank))
    order = [None if i in added else next(kept) for i in range(out)]
    return ([0 if i is None else begin[i] for i in order]
            + [0 if i is None else end[i] for i in order])


def sink_pad(node: gs.Node, outputs: Set[str], names: Names) -> List[str]:
    """Move ``node`` (a Pad) past the Unsqueeze/Transpose nodes that alone read it, in place;
    the names of the nodes it moved past (empty: it stayed)."""
    passed: List[str] = []
    while True:
        out = node.outputs[0]
        reader = out.outputs[0] if len(out.outputs) == 1 else None
        if out.name in outputs or reader is None or reader.op not in _MOVABLE:
            return passed
        src, dst = static_shape(node.inputs[0]), static_shape(reader.outputs[0])
        pads = full_pads(node, len(src)) if src is not None else None
        moved = _moved(pads, reader, len(src)) if pads is not None and dst else None
        if moved is None or len(moved) != 2 * len(dst):
            return passed
        _swap(node, reader, moved, names)
        passed.append(reader.name)


def _swap(pad: gs.Node, reader: gs.Node, pads: List[int], names: Names) -> None:
    """x -> Pad -> p -> reader -> z  becomes  x -> reader -> q -> Pad -> z."""
    x, z = pad.inputs[0], reader.outputs[0]
    begin, end = pads[:len(pads) // 2], pads[len(pads) // 2:]
    inner = gs.Variable(names.fresh(f"{reader.name}_unpadded"), dtype=z.dtype,
                        shape=[n - b - e for n, b, e in zip(static_shape(z), begin, end)])
    reader.inputs[0] = x
    reader.outputs[0] = inner
    pad.inputs[0] = inner
    pad.outputs[0] = z
    set_pads(pad, pads, names)


def fold_into_maxpool(pad: gs.Node, outputs: Set[str], done: Rewrites) -> bool:
    """Fold ``pad`` into the MaxPool reading it (module docstring), in place; True when it
    was."""
    out, src = pad.outputs[0], static_shape(pad.inputs[0])
    pool = out.outputs[0] if len(out.outputs) == 1 else None
    if pool is None or pool.op != "MaxPool" or out.name in outputs or src is None \
            or len(src) != 4 or str(attr(pad, "mode", "constant")) != "constant" \
            or pad_value(pad) != float("-inf") or pool.inputs[0] is not out:
        return False
    pads, kernel = full_pads(pad, 4), [int(k) for k in attr(pool, "kernel_shape", [])]
    if pads is None or any(pads[i] for i in (0, 1, 4, 5)) or min(pads) < 0 \
            or len(kernel) != 2 or str(attr(pool, "auto_pad", "NOTSET")) != "NOTSET" \
            or any(t.outputs or t.name in outputs for t in pool.outputs[1:]):
        return False
    own = [int(p) for p in attr(pool, "pads", [0, 0, 0, 0])]
    merged = [own[0] + pads[2], own[1] + pads[3], own[2] + pads[6], own[3] + pads[7]]
    if any(p >= kernel[i % 2] for i, p in enumerate(merged)):
        return False
    pool.attrs["pads"] = merged
    pool.inputs[0] = pad.inputs[0]
    pad.inputs.clear()
    pad.outputs.clear()
    done.merged[pad.name] = pool.name
    return True
