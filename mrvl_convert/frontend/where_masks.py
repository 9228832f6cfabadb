"""Attention masks written as a Where, made the additive mask the layers take.

Exporters mask attention scores by selecting: ``Where(mask, -inf, scores)`` (torch's
``masked_fill(mask, -inf)``), ``Where(keep, scores, finfo(float32).min)`` (``torch.where`` as
HuggingFace writes it), often followed by ``Where(IsNaN(weights), 0, weights)`` after the Softmax
(a row with every key masked gives NaN there). A Where that reads the scores runs on the CPU in the
middle of every attention block (the layer set has no select), cutting the model once per layer.

- ``Where(cond, C, x)`` / ``Where(cond, x, C)`` with ``C`` a float32 constant at or below -32752
  (``-inf`` and ``finfo.min`` included), ``x`` an activation and every reader a Softmax becomes
  ``Add(x, Where(cond, C', 0))`` (or ``Where(cond, 0, C')``), ``C' = max(C, -32752)``
  (``mask_constants.MASK_FLOOR``: finite in fp16, and a score plus it stays finite). The new
  Where reads only the mask (computed once, before the accelerator's part, or folded to a
  constant when ``cond`` is one), and the Add is the layers' broadcasting Sum2D.
  Bound, as ``mask_constants.py``: for a Softmax row with at least one unmasked position whose
  largest unmasked logit is ``m``, the float32 weights are bit-equal to the original's when every
  masked position's score ``s`` satisfies ``s - m < 32752 - 103.98`` (``exp(s - 32752 - m)``
  underflows to 0 as ``exp(C - m)`` does, and the max is still ``m``): true whenever all scores
  are within [-16300, 16300]; an unmasked score gets ``+ 0``, which changes only a -0 to +0
  (``exp`` of either is 1). A row with EVERY position masked differs: the original gives NaN
  (``-inf``) or uniform weights (``finfo.min``), the rewrite ``softmax(s - 32752)``.
- ``Where(IsNaN(y), c, y)`` with ``y`` a Softmax output read by nothing else, whose input is not
  produced by a node with a non-finite constant (after the rewrite above, an Add of a finite
  mask): the Softmax writes the Where's output itself.
  Exact wherever the Softmax's logits are finite (its weights are then never NaN); it differs only
  where a row's logits hold a NaN or an infinity (the original gives ``c``, the rewrite NaN), and
  on a row with every position masked, as above.

Requires: a graphsurgeon graph with constants as initializers (after folding).
Ensures: the rewrites above where they apply, returning node name -> what changed (a rewritten
Where keeps its name for the Add that replaces it; an IsNaN-Where dropped, and its IsNaN, are
left without inputs or outputs and reported under the Where's name); elsewhere the graph is as it
was. The caller cleans up the graph.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import is_const, static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites
from mrvl_convert.frontend.mask_constants import MASK_FLOOR


def rewrite_where_masks(graph: gs.Graph, done: Rewrites) -> Dict[str, str]:
    """Apply both rewrites to ``graph`` in place; node name -> what changed (also in
    ``done.rewritten``; a dropped guard and its IsNaN in ``done.merged``, with the Softmax)."""
    names, changed = Names(graph), {}
    outputs = {t.name for t in graph.outputs}
    for node in list(graph.nodes):
        if node.op == "Where" and node.outputs and node.outputs[0].name not in outputs:
            if _select_mask(graph, node, names):
                changed[node.name] = ("Where masking the scores became an Add of the mask "
                                      "Where(cond, -32752, 0) (frontend/where_masks.py)")
    for node in list(graph.nodes):
        if node.op == "Where" and node.outputs:
            dropped = _nan_guard(node)
            if dropped is not None:
                softmax, isnan = dropped
                done.merged.update({node.name: softmax.name, isnan.name: softmax.name})
                changed[node.name] = ("Where(IsNaN(softmax), c, softmax) dropped: the Softmax of "
                                      "finite logits is never NaN (frontend/where_masks.py)")
    done.rewritten.update(changed)
    return changed


def _mask_operand(node: gs.Node) -> Optional[Tuple[int, np.ndarray]]:
    """(index 1 or 2, value) of the Where's masking constant, the other operand an activation."""
    for index, other in ((1, 2), (2, 1)):
        const, act = node.inputs[index], node.inputs[other]
        if not is_const(const) or is_const(act):
            continue
        value = np.asarray(const.values)
        if value.dtype == np.float32 and value.size and bool((value <= MASK_FLOOR).all()):
            return index, value
    return None


def _select_mask(graph: gs.Graph, node: gs.Node, names: Names) -> bool:
    found = _mask_operand(node)
    out = node.outputs[0]
    if found is None or not out.outputs or any(r.op != "Softmax" for r in out.outputs):
        return False
    index, value = found
    cond, x = node.inputs[0], node.inputs[3 - index]
    floor = np.asarray(np.maximum(value, np.float32(MASK_FLOOR)), np.float32)
    zero = np.zeros((), np.float32)
    picks = (floor, zero) if index == 1 else (zero, floor)
    if is_const(cond):
        mask: gs.Tensor = gs.Constant(names.fresh(f"{node.name}_additive"),
                                      np.where(np.asarray(cond.values), *picks).astype(np.float32))
    else:
        shape = static_shape(cond)
        shape = list(np.broadcast_shapes(tuple(shape), floor.shape)) if shape else None
        mask = gs.Variable(names.fresh(f"{node.name}_additive"), dtype=np.float32,
                           shape=shape)
        select = gs.Node("Where", names.fresh(f"{node.name}_mask"), inputs=[
            cond, gs.Constant(names.fresh(f"{node.name}_if_true"), picks[0]),
            gs.Constant(names.fresh(f"{node.name}_if_false"), picks[1])], outputs=[mask])
        graph.nodes.append(select)
    node.op = "Add"
    node.attrs.clear()
    node.inputs.clear()
    node.inputs.extend([x, mask])
    return True


def _nan_guard(node: gs.Node) -> Optional[Tuple[gs.Node, gs.Node]]:
    """(the Softmax now writing the guard's output, the IsNaN dropped), or None when the guard
    stays."""
    cond, a, b = node.inputs
    if len(cond.inputs) != 1 or cond.inputs[0].op != "IsNaN":
        return None
    isnan, y = cond.inputs[0], cond.inputs[0].inputs[0]
    if not (is_const(a) and b is y) and not (is_const(b) and a is y):
        return None
    if len(y.inputs) != 1 or y.inputs[0].op != "Softmax" or _non_finite_source(y.inputs[0]) \
            or any(r is not node and r is not isnan for r in y.outputs) or len(cond.outputs) != 1:
        return None
    softmax, out = y.inputs[0], node.outputs[0]
    for dropped in (node, isnan):  # the Softmax writes the guard's output itself
        dropped.inputs.clear()
        dropped.outputs.clear()
    softmax.outputs[0] = out
    return softmax, isnan


def _non_finite_source(softmax: gs.Node) -> bool:
    """True when the Softmax's logits come from a node with a non-finite constant (a -inf mask
    left as it was): its rows can then be NaN on ordinary inputs."""
    logits = softmax.inputs[0]
    if len(logits.inputs) != 1:
        return False
    return any(is_const(t) and np.issubdtype(np.asarray(t.values).dtype, np.floating)
               and not np.isfinite(np.asarray(t.values)).all() for t in logits.inputs[0].inputs)
