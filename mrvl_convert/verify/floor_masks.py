"""The fp16 floor's mask clamps: an additive attention mask's finfo(float32).min constant
clamped to -32752, as the converter computes it, before ``fp16_floor`` rounds every tensor.

HuggingFace models build the additive mask as ``(1 - mask) * finfo(float32).min`` (or a
Where selecting it). Rounded to fp16, -3.4e38 is -inf: ``0 * -inf`` is NaN at every unmasked
position and the floor is NaN, a form no device computes. The converter clamps that constant to
-32752 (``frontend/mask_constants.py``: fp16 holds it and a score added to it), so the floor
applies the same clamp, chosen by the same test (``only_an_additive_mask``: every path from the
Mul's or Where's output reaches a Softmax through Adds and ops that only move values) and the
same values (``clamped_mask``), and then rounds what the artifact computes.

Bound: mask_constants' own: the float32 Softmax is bit-equal to the unclamped one for every row
with an unmasked position while the scores stay within +-16300; a row with every position
masked differs there (uniform weights unclamped, ``softmax(s - 32752)`` clamped), as the
artifact does.

- requires: a model copy (changed in place); the mask constant an initializer or Constant node;
  the outputs the floor measures;
- ensures: each such Mul's, Where's or Add's (a constant causal mask) float32 constant
  operand with values below -32752 is read as a new initializer with them raised to -32752;
  anything else is left as it is; returns how many operands were clamped.
"""
from __future__ import annotations

from typing import Collection

import onnx
import onnx_graphsurgeon as gs
from onnx import numpy_helper

from mrvl_convert.frontend.mask_constants import (MASK_FLOOR, clamped_mask,
                                                  only_an_additive_mask)
from mrvl_convert.verify.floor_folds import _constants, _fresh


def clamp_floor_masks(copy: onnx.ModelProto, measured: Collection[str]) -> int:
    """Clamp every additive-mask constant of ``copy`` (module docstring) whose masked sums no
    ``measured`` output is; how many. Other graph outputs (a verdict's stage-boundary tensors,
    which the artifact computes from the clamped mask too) are not the floor's."""
    values = _constants(copy.graph)
    if not any(v.size and (v < MASK_FLOOR).any() for v in values.values()):
        return 0  # no model without such a constant pays for the walk below
    view = gs.import_onnx(copy)  # read only: the readers' walk; ``copy`` itself is changed
    outputs = set(measured)
    masks = {n.outputs[0].name for n in view.nodes if n.op in ("Mul", "Where", "Add")
             and only_an_additive_mask(n.outputs[0], outputs, added=n.op == "Add")}
    taken = {t.name for t in copy.graph.initializer}
    count = 0
    for node in copy.graph.node:
        if node.op_type not in ("Mul", "Where", "Add") or node.output[0] not in masks:
            continue
        for k, name in enumerate(node.input):
            clamped = clamped_mask(values[name]) if name in values else None
            if clamped is not None:
                node.input[k] = _fresh(taken, f"{name}__floor_mask")
                copy.graph.initializer.append(numpy_helper.from_array(clamped, node.input[k]))
                count += 1
    return count
