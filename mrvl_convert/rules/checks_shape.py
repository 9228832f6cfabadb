"""Checks of the newer layer set's data-movement kinds (Resize2D, Split, StridedSlice,
transpose, reduce, expand_dims, ...), kept apart from ``checks.py`` and listed in its table.

Same contract as ``checks.py``: None when the node satisfies the check, else the details that
fill the rule's reason.
"""
from __future__ import annotations

from typing import Any, List, Mapping, Optional

import numpy as np
import onnx_graphsurgeon as gs

from .._graph import attr, const_value, is_const, present, static_shape

Details = Optional[dict]

# Coordinate modes under which nearest upsampling by an integer factor s reads input index
# i // s for every rounding: the source coordinate is within (-0.5, 0.5) of i // s.
_CENTRED = ("half_pixel", "pytorch_half_pixel")


def _resize_mode_issue(node: gs.Node, factors: List[int]) -> Optional[str]:
    mode = str(attr(node, "mode", "nearest"))
    if mode != "nearest":
        return f"mode is {mode!r}; only nearest resizing maps to Resize2D"
    if node.op == "Upsample":
        return None  # Upsample's nearest is floor(i / s)
    coord = str(attr(node, "coordinate_transformation_mode", "half_pixel"))
    rounding = str(attr(node, "nearest_mode", "round_prefer_floor"))
    if coord in _CENTRED:
        return None
    if coord == "asymmetric":
        # i / s = i // s + r / s: floor always gives i // s; round_prefer_floor only while
        # r / s <= 0.5, i.e. for factors up to 2.
        if rounding == "floor" or (rounding == "round_prefer_floor" and max(factors) <= 2):
            return None
    return (f"coordinate_transformation_mode {coord!r} with nearest_mode {rounding!r} does not "
            f"read in[i // s] at factors {factors}")


def check_resize_nearest(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """4-D, batch and channels kept, H and W scaled up by integers, nearest by ``i // s``."""
    src, dst = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    if src is None or dst is None or len(src) != 4 or len(dst) != 4:
        return {"detail": f"Resize2D takes 4-D tensors; this one maps {src} to {dst}"}
    if src[:2] != dst[:2]:
        return {"detail": f"the batch or channel axis changes ({src} -> {dst})"}
    if 0 in src or dst[2] % src[2] or dst[3] % src[3]:
        return {"detail": f"{src[2:]} -> {dst[2:]} is not an integer upscale"}
    issue = _resize_mode_issue(node, [dst[2] // src[2], dst[3] // src[3]])
    return None if issue is None else {"detail": issue}


def _rank_2_or_4(node: gs.Node) -> Details:
    src = static_shape(node.inputs[0])
    if src is None or len(src) not in (2, 4):
        return {"detail": f"the input is {len(src) if src else 'unknown'}-D; the codegen lays "
                          "out only 2-D (NC) and 4-D (NHWC) tensors here"}
    return None


def check_split_static(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """A 2-D or 4-D Split whose every output has a static shape (the pieces' sizes)."""
    issue = _rank_2_or_4(node)
    if issue:
        return issue
    for tensor in node.outputs:
        if static_shape(tensor) is None:
            return {"detail": f"output {tensor.name} has no static shape"}
    return None


def check_slice_static(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """A 2-D or 4-D Slice with constant starts, ends, axes and steps, all steps positive,
    keeping the batch."""
    issue = _rank_2_or_4(node)
    if issue:
        return issue
    if "starts" in node.attrs:
        return {"detail": "Slice before opset 10 (starts as an attribute) is not handled"}
    for index, name in ((1, "starts"), (2, "ends"), (3, "axes"), (4, "steps")):
        tensor = present(node, index)
        if index < 3 and tensor is None:
            return {"detail": f"{name} is missing"}
        if tensor is not None and not is_const(tensor):
            return {"detail": f"{name} ({tensor.name}) is computed at run time"}
    steps = present(node, 4)
    if steps is not None and np.any(const_value(steps) < 1):
        return {"detail": f"steps {const_value(steps).tolist()} are not all positive"}
    src, dst = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    if dst is None or dst[0] != src[0]:
        return {"detail": f"the batch dimension is not kept ({src} -> {dst})"}
    return None
