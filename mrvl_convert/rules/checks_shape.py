"""Checks of the newer layer set's data-movement kinds (Resize2D, Split, StridedSlice,
transpose, reduce, expand_dims, ...), kept apart from ``checks.py`` and listed in its table.

Same contract as ``checks.py``: None when the node satisfies the check, else the details that
fill the rule's reason.
"""
from __future__ import annotations

from typing import Any, Callable, List, Mapping, Optional

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, const_value, is_const, present, reduce_axes, static_shape
from mrvl_convert.rules.batch_axis import axis0_is_batch

Details = Optional[dict]

# Coordinate modes under which nearest upsampling by an integer factor s puts the source
# coordinate of output i at i // s + (r + 0.5) / s - 0.5, strictly within (-0.5, 0.5) of i // s
# (r = i % s): rounding to the nearest reads i // s; floor and ceil do not (half_pixel, s = 2,
# i = 1: 0.25, ceil reads 1).
_CENTRED = ("half_pixel", "pytorch_half_pixel")
_TO_NEAREST = ("round_prefer_floor", "round_prefer_ceil")


def _resize_mode_issue(node: gs.Node, factors: List[int]) -> Optional[str]:
    mode = str(attr(node, "mode", "nearest"))
    if mode != "nearest":
        return f"mode is {mode!r}; only nearest resizing maps to Resize2D"
    if node.op == "Upsample":
        return None  # Upsample's nearest is floor(i / s)
    coord = str(attr(node, "coordinate_transformation_mode", "half_pixel"))
    rounding = str(attr(node, "nearest_mode", "round_prefer_floor"))
    if coord in _CENTRED and (rounding in _TO_NEAREST or max(factors) == 1):
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
    """A 2-D, 3-D or 4-D Slice with constant starts, ends, axes and steps, all steps positive,
    keeping the batch, or cutting an axis 0 that is no batch (the model's batch is 1,
    ``model_batch``: an LSTM's ``[directions, 1, hidden]`` state sliced per layer). A 3-D token
    tensor [B, T, C] is sliced as the NHWC [B, T, C, 1] it is (``ir/layout.py``), so the
    codegen sees the 4-D tensor it lays out."""
    src = static_shape(node.inputs[0])
    issue = None if src is not None and len(src) == 3 else _rank_2_or_4(node)
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
    if dst is None or (dst[0] != src[0] and model_batch(graph) != 1):
        return {"detail": f"the batch dimension is not kept ({src} -> {dst})"}
    return None


def _one_axis(node: gs.Node, rank: int) -> "tuple[Optional[int], Details]":
    src = static_shape(node.inputs[0])
    if src is None or len(src) != rank:
        return None, {"detail": f"the input is {len(src) if src else 'unknown'}-D, not {rank}-D"}
    axes = reduce_axes(node)
    if axes is None:
        return None, {"detail": "the axes are computed at run time"}
    if len(axes) != 1:
        return None, {"detail": f"it reduces axes {axes}; the layer reduces one axis"}
    return axes[0], None


def check_reduce_mean_axis(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """One axis of a 4-D tensor that some order puts at physical axis 1 or 3 (an image's C or
    H in NHWC, or the last axis of a token tensor as it lies), or the last axis of a 3-D token
    tensor (the newer mrvl.py's ``reduce_mean``: 4-D axis 1 or 3, 3-D axis 2), or its token
    axis 1, moved last by a layout_transform first."""
    src = static_shape(node.inputs[0])
    rank = len(src) if src else 0
    axis, issue = _one_axis(node, 3 if rank == 3 else 4)
    if issue:
        return issue
    if rank == 3:  # axis 1 (a mean over tokens): reduced as the last after a transpose
        return None if axis in (1, 2) else {
            "detail": "it reduces the batch axis 0 of a 3-D tensor; the layer reduces the "
                      "last (2), after a transpose axis 1"}
    return None if axis in (1, 2, 3) else {
        "detail": "it reduces the batch axis 0; the layer reduces NHWC axis 1 (H) or 3 (C)"}


def check_reduce_max_axis(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """3-D, one axis."""
    return _one_axis(node, 3)[1]


def check_reduce_global_pool(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """A 4-D ReduceMean over H and W keeping the dims: a global average pool."""
    src = static_shape(node.inputs[0])
    if src is None or len(src) != 4:
        return {"detail": "the input is not 4-D"}
    if reduce_axes(node) != [2, 3] or not int(attr(node, "keepdims", 1)):
        return {"detail": f"axes {reduce_axes(node)} with keepdims "
                          f"{attr(node, 'keepdims', 1)} is not a mean over H and W"}
    return None


def check_transpose_rank(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """3 or 4 axes, with an explicit perm."""
    src = static_shape(node.inputs[0])
    if src is None or len(src) not in (3, 4):
        return {"detail": f"it permutes {len(src) if src else 'unknown'} axes; the layer "
                          "permutes 3 or 4"}
    if "perm" not in node.attrs:
        return {"detail": "no perm (a full reversal): write it out"}
    return None


def check_conv_transpose(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """A 2-D ConvTranspose, constant weight (and bias), explicit pads; groups that divide the
    input channels, as long as the block-diagonal kernel stays bounded."""
    src, weights = static_shape(node.inputs[0]), present(node, 1)
    if src is None or len(src) != 4:
        return {"detail": "only 2-D transposed convolutions (4-D tensors) map"}
    if weights is None or not is_const(weights) or const_value(weights).ndim != 4:
        return {"detail": "the weight is not a constant [I, O, KH, KW]"}
    bias = present(node, 2)
    if bias is not None and not is_const(bias):
        return {"detail": f"the bias ({bias.name}) is not constant"}
    if str(attr(node, "auto_pad", "NOTSET")) != "NOTSET" or "output_shape" in node.attrs:
        return {"detail": "auto_pad or output_shape: write explicit pads"}
    shape = const_value(weights).shape
    if shape[0] != src[1]:
        return {"detail": f"the weight's {shape[0]} input channels do not match the input's "
                          f"{src[1]}"}
    return _transpose_groups(int(attr(node, "group", 1)), shape)


# A grouped ConvTranspose is lowered with a block-diagonal groups-1 kernel (layers/
# conv2d_transpose.py); this bounds the kernel that expansion writes (64 MiB of float32).
MAX_DENSE_TRANSPOSE_KERNEL = 1 << 24


def _transpose_groups(groups: int, shape: tuple) -> Details:
    if groups < 1 or shape[0] % groups:
        return {"detail": f"group={groups} does not divide the {shape[0]} input channels"}
    dense = int(np.prod(shape, dtype=np.int64)) * groups
    if dense > MAX_DENSE_TRANSPOSE_KERNEL:
        return {"detail": f"group={groups}: the block-diagonal groups-1 kernel would hold {dense} "
                          f"values, above {MAX_DENSE_TRANSPOSE_KERNEL}"}
    return None


def check_batch_matmul(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """A MatMul whose first operand is a 3-D or 4-D activation and whose second is an
    activation or a constant of rank 2 to 4."""
    a, b = node.inputs[0], node.inputs[1]
    if is_const(a):
        return {"detail": "the first operand is a constant; the layer takes a constant second"}
    ranks = [len(static_shape(t) or []) for t in (a, b)]
    if ranks[0] not in (3, 4) or not 2 <= ranks[1] <= 4:
        return {"detail": f"operands of rank {ranks[0]} and {ranks[1]}; the layer multiplies a "
                          "3-D or 4-D activation by a 2-D to 4-D operand"}
    return None


def check_ranks_2_to_4(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """Input and output of rank 2 to 4 (the codegen's reshape family)."""
    ranks = [len(static_shape(t) or []) for t in (node.inputs[0], node.outputs[0])]
    if all(2 <= r <= 4 for r in ranks):
        return None
    return {"detail": f"ranks {ranks[0]} -> {ranks[1]}; the layer takes ranks 2 to 4"}


def channel_shuffle_issue(node: gs.Node, after: Callable[[gs.Node], Optional[gs.Node]]
                          ) -> Optional[str]:
    """Why the Reshape ``node``, the Transpose ``after(node)`` and the Reshape after that are not
    a channel shuffle (None: they are). ``after`` finds the next op of the shuffle (the int8 one
    steps over QuantizeLinear -> DequantizeLinear pairs)."""
    src, split = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    if src is None or split is None or len(src) != 4 or len(split) < 5:
        return (f"the first Reshape ({src} -> {split}) does not split the channel axis of a "
                "4-D tensor")
    if split[0] != src[0] or split[-2:] != src[2:] or int(np.prod(split[1:-2])) != src[1]:
        return f"the first Reshape ({src} -> {split}) moves more than the channels"
    transpose = after(node)
    perm = list(attr(transpose, "perm", [])) if transpose is not None \
        and transpose.op == "Transpose" else []
    rank = len(split)
    if not perm or perm[0] != 0 or perm[-2:] != [rank - 2, rank - 1]:
        return f"the Transpose (perm {perm}) moves more than the channel groups"
    merge = after(transpose)
    if merge is None or merge.op != "Reshape" or static_shape(merge.outputs[0]) != src:
        return "the last Reshape does not restore the input shape"
    return None


def model_batch(graph: gs.Graph) -> int:
    """The device's batch: axis 0 of the model's activation inputs of rank 2 or more (the
    largest; 1 when there is none), counting only inputs whose axis 0 the model treats as a
    batch (``batch_axis.axis0_is_batch``: an input every reader first lifts to ``[1, ...]`` is
    one sample, batch 1). A tensor inside the model whose axis 0 is larger holds other axes
    folded into it (attention heads reshaped into axis 0, as a MiniLM export writes
    ``[heads, T, d]``; the frames of a batchless ``[T, F, C]`` between Conv wrappers): the
    device still runs the model's batch."""
    batches = [shape[0] for shape, t in ((static_shape(t), t) for t in graph.inputs
                                         if not is_const(t))
               if shape and len(shape) >= 2 and axis0_is_batch(graph, t)]
    return max(batches, default=1)
