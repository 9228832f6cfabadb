"""Attention-mask constants beyond float16's range, clamped so the fp16 mask and its Add hold them.

Current HuggingFace transformers build the additive attention mask as
``(1 - mask) * finfo(float32).min`` or ``masked_fill(inverted, finfo(float32).min)`` (a Where;
older ones: ``* -10000``); a traced PyTorch decoder adds its causal mask, a constant of 0 and
-inf, to the scores directly (an Add of a constant, g2p-id's tiny-pron). The fp16 accelerator
cannot hold -3.4e38 nor -inf, so the Mul's (the Where's, the Add's) constant is clamped to
-32752 when its output is only an additive mask (an Add's: only masked scores): every path
from it reaches a Softmax through Adds (at least one, the mask an addend of each) and the ops that
only move or select its values (Slice, Unsqueeze, Squeeze, Reshape, Expand, Transpose, a Cast to
float32): T5 slices its mask and adds it to the position bias once, then to every layer's scores. Not to -65504 (fp16's lowest finite): the fp16 Add
``s - 65504`` overflows to -inf for any score ``s <= -16``, which the simulator refuses as a
range error; ``s - 32752`` stays finite in fp16 for every fp16 ``s >= -32752``.

Bound: for a Softmax row with at least one unmasked position whose largest unmasked logit is
``m``, the float32 result is bit-equal to the original's when every masked position's score
``s`` satisfies ``s - m < 32752 - 103.98`` (then ``exp(s - 32752 - m)`` underflows to 0 in
float32, below half the smallest subnormal, as ``exp(s + finfo.min - m)`` does, and the max is
still ``m``): true whenever all scores are within [-16300, 16300] (a score here is the sum of every other
addend on the way: T5's position bias plus its attention scores). A row with EVERY position
masked differs: the original gives uniform weights (all its logits are ``finfo.min``), the
clamped one ``softmax(s - 32752)``, the float32 sum rounding the scores to steps of 2**-9 (a
``-10000`` mask gives ``softmax(s - 10000)`` likewise; in fp16 ``s - 32752`` rounds to steps of
16, so such a row's weights go to its largest scores; unclamped, fp16's -inf mask gives
``exp(-inf - -inf)``, NaN, for the whole row; a -inf constant mask gives NaN in float32 too,
where the clamped one gives finite weights; a causal mask always leaves the diagonal). The
fp16 run on the accelerator is compared with the original by ``mrvl_convert.compare`` like
any other.

Requires: a graphsurgeon graph with constants as initializers (after folding).
Ensures: each such Mul's, Where's or Add's float32 constant operand is a new constant with
values below -32752 replaced by -32752 (other values untouched); returns node name -> what
changed, for the report.
"""
from __future__ import annotations

from typing import Dict, Optional, Set

import numpy as np
import onnx_graphsurgeon as gs

#: Half fp16's lowest finite (-65504), so a masked score plus it stays finite in fp16.
MASK_FLOOR = -32752.0


def clamp_mask_constants(graph: gs.Graph) -> Dict[str, str]:
    """Clamp the out-of-range constant of every additive-mask Mul or Where; node -> reason."""
    changed: Dict[str, str] = {}
    outputs = {t.name for t in graph.outputs}
    for node in list(graph.nodes):
        # an Add of a constant mask (PyTorch's causal mask, folded): its output already is the
        # masked scores, so only the way on to the Softmax is checked
        if node.op not in ("Mul", "Where", "Add") or not only_an_additive_mask(
                node.outputs[0], outputs, added=node.op == "Add"):
            continue
        for index, operand in enumerate(node.inputs):
            if not isinstance(operand, gs.Constant):
                continue
            values = operand.values
            clamped = clamped_mask(values)
            if clamped is None:
                continue
            node.inputs[index] = gs.Constant(f"{operand.name}_fp16_lowest", clamped)
            changed[node.name] = (f"attention-mask constant {float(values.min()):.7g} clamped "
                                  f"to -32752 (fp16 holds it and the masked scores added to "
                                  f"it; the Softmax gives the same weights while the scores "
                                  f"stay within +-16300: "
                                  f"frontend/mask_constants.py)")
    return changed


def clamped_mask(values: np.ndarray) -> Optional[np.ndarray]:
    """A float32 mask constant with its values below ``MASK_FLOOR`` raised to it; None when it
    is not float32 or has none below (also the fp16 floor's clamp: ``verify/floor_masks.py``)."""
    if values.dtype != np.float32 or not (values < MASK_FLOOR).any():
        return None
    return np.asarray(np.maximum(values, np.float32(MASK_FLOOR)), np.float32)


#: Ops that only move or select a mask's values on its way to the Adds (a Cast: to float32).
_THROUGH = ("Slice", "Unsqueeze", "Squeeze", "Reshape", "Expand", "Transpose", "Cast")


def only_an_additive_mask(tensor: gs.Tensor, outputs: Set[str], added: bool = False) -> bool:
    """Every path from ``tensor`` reaches a Softmax through the ``_THROUGH`` ops and at least
    one Add (``added``: ``tensor`` is an Add's output already), and nothing else reads it on
    the way."""
    pending, seen = [(tensor, added)], set()
    while pending:
        value, added = pending.pop()
        if (value.name, added) in seen:
            continue
        seen.add((value.name, added))
        if not value.outputs or value.name in outputs:
            return False  # a model output: its value would change
        for reader in value.outputs:
            if reader.op == "Softmax" and added and reader.inputs[0] is value:
                continue
            if reader.op == "Add" or reader.op in _THROUGH and reader.inputs[0] is value \
                    and (reader.op != "Cast" or reader.attrs.get("to") == 1):
                pending.append((reader.outputs[0], added or reader.op == "Add"))
                continue
            return False
    return True
