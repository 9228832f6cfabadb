"""Bilinear upsampling by integer factors as nearest upsampling, a depthwise Conv and an edge Mul.

Requires: a graph whose activations' shapes are static (canonicalize runs this after the shapes
that depended on folded values, e.g. a Resize's ``sizes`` from a ``Shape``, are known).
Ensures: every ``Resize`` (opset >= 11, mode ``linear``) of a 4-D float32 ``[N, C, H, W]``
tensor that scales H and W up by integers ``sh``, ``sw`` (not both 1), batch and channels kept,
in coordinate mode ``half_pixel``, ``pytorch_half_pixel`` or ``asymmetric``, becomes

    U = Resize(x, nearest, asymmetric, floor)       U[i, j] = x[i // sh, j // sw]
    V = Conv(U, K, group=C, zero pads P)            K = kh (x) kw, the same for every channel
    y = Mul(V, R)                                   R = 1 / Conv(ones, K, pads P)  [1, 1, H', W']

(the Resize keeps its name; the Conv and the Mul are ``derived`` from it). Each is a form the
layer set has: Resize2D (exact), a depthwise Conv2D, Mul2D by a constant. Any other Resize is
as it was, with the reason in ``kept`` when it is a linear one.

Why this form. A linear interpolation by an integer factor ``s`` is nearest upsampling followed
by a box filter along the axis: for ``half_pixel`` with ``s`` odd, ``kh = ones(s) / s``
centred; ``s`` even, ``kh = [1, 2, .., 2, 1] / (2 s)`` (``s + 1`` taps) centred; for
``asymmetric``, ``kh = ones(s) / s`` over ``U[i .. i + s - 1]``. (Output ``i = s m + r`` reads
``in[m]`` and its neighbour with the interpolation weights; counting the copies of each in the
window gives them.) ``pytorch_half_pixel`` is ``half_pixel`` whenever the output is longer than
1, which an upscale is. At the edges onnxruntime clamps the coordinate: the window reaches
outside ``U`` only where every inside element of it is a copy of the edge pixel (the window is
at most ``s`` long and the edge block of ``U`` is ``s`` copies), so the clamped value is the
zero-padded window sum divided by the kernel weight inside, ``R``; the product kernel makes this
hold per axis, corners included. So the form is exact in real arithmetic. It costs ``kh * kw``
multiply-adds per output and channel (<= 25 at factor 4), against ``C`` times more for a
transposed convolution, which the layer set has only as a dense one (a grouped ConvTranspose
becomes block-diagonal). ``align_corners`` maps output ``i`` to ``i (H - 1) / (s H - 1)``, not
a shift-invariant filter of ``U``: no Conv form, it stays (reason in ``kept``), as do other
modes, non-integer factors, downscaling and non-4-D tensors.

Bound. Both forms compute a convex combination of the same inputs with the same real weights;
onnxruntime's Resize rounds about 3 times per output, this form rounds each weight of ``K`` and
``R`` once and sums ``kh * kw`` products: in float32 the two differ by at most
``(2 kh kw + 8) u max|x|`` over the output's window (u = 2**-24), so a CPU stage cut from the
rewritten graph is within that of the original (``tests/frontend/test_linear_resize.py`` runs
both on onnxruntime). On the accelerator the fp16 rounding of x, K, R, V and y adds about
``5 * 2**-11 max|x|``.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import attr, const_value, is_const, static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites, _set_inputs

_HALF_PIXEL = ("half_pixel", "pytorch_half_pixel")
_MODES = _HALF_PIXEL + ("asymmetric",)
Axis = Tuple[np.ndarray, int, int]  # taps, pad before, pad after


def rewrite_linear_resizes(graph: gs.Graph, opset: int, done: Rewrites) -> bool:
    """Rewrite each linear Resize that the form takes, in place; True when one was (the caller
    cleans up and sorts the graph)."""
    names, before = Names(graph), len(done.rewritten)
    for node in list(graph.nodes):
        if node.op != "Resize" or not node.outputs or attr(node, "mode", "nearest") != "linear":
            continue
        found = _factors(node, opset)
        if isinstance(found, str):
            done.kept[node.name] = f"linear Resize stays as it is: {found}"
        else:
            _rewrite(graph, node, found, done, names)
    return len(done.rewritten) != before


def _factors(node: gs.Node, opset: int) -> Union[str, Tuple[int, int, str]]:
    """(sh, sw, coordinate mode), or why the form does not compute this Resize."""
    if opset < 11:
        return f"opset {opset}'s Resize has no coordinate_transformation_mode"
    x, y = node.inputs[0], node.outputs[0]
    src, dst = static_shape(x), static_shape(y)
    if src is None or dst is None or len(src) != 4 or len(dst) != 4:
        return f"the form takes 4-D tensors; this Resize maps {src} to {dst}"
    if is_const(x) or x.dtype is None or np.dtype(x.dtype) != np.float32:
        return f"the input is not a float32 activation ({x.dtype})"
    if src[:2] != dst[:2] or 0 in src or dst[2] % src[2] or dst[3] % src[3] \
            or dst[2:] == src[2:]:
        return f"{src} -> {dst} is not an integer upscale of H and W only"
    factors = (dst[2] // src[2], dst[3] // src[3])
    coord = str(attr(node, "coordinate_transformation_mode", "half_pixel"))
    if coord not in _MODES:
        return f"coordinate_transformation_mode {coord!r} is not a fixed filter of the " \
               f"nearest upsampling (only {', '.join(_MODES)})"
    if str(attr(node, "keep_aspect_ratio_policy", "stretch")) != "stretch" \
            or attr(node, "axes", None) is not None:
        return "the Resize has axes or a keep_aspect_ratio_policy"
    issue = _scales_issue(node, factors)
    return issue if issue else (factors[0], factors[1], coord)


def _scales_issue(node: gs.Node, factors: Tuple[int, int]) -> Optional[str]:
    """The coordinate transform uses the given scales, not the shapes' ratio: they must agree."""
    scales = node.inputs[2] if len(node.inputs) > 2 else None
    if scales is None or not scales.name:
        return None
    if not is_const(scales):
        return f"the scales ({scales.name}) are computed at run time"
    values = np.asarray(const_value(scales), np.float64)
    if values.size == 0:
        return None
    if values.tolist() != [1.0, 1.0, float(factors[0]), float(factors[1])]:
        return f"scales {values.tolist()} are not the integer factors {list(factors)}"
    return None


def axis_filter(factor: int, coord: str) -> Axis:
    """The 1-D box filter of nearest-upsampled data that interpolates it linearly."""
    if coord == "asymmetric":
        return np.full(factor, 1.0 / factor), 0, factor - 1
    if factor % 2:
        return np.full(factor, 1.0 / factor), factor // 2, factor // 2
    taps = np.full(factor + 1, 1.0 / factor)
    taps[0] = taps[-1] = 0.5 / factor
    return taps, factor // 2, factor // 2


def _edge_scale(taps: np.ndarray, before: int, length: int) -> np.ndarray:
    """1 / (the kernel weight inside the signal) at each output position."""
    inside = np.array([taps[[k for k in range(len(taps)) if 0 <= i + k - before < length]].sum()
                       for i in range(length)])
    return 1.0 / inside


def _rewrite(graph: gs.Graph, node: gs.Node, found: Tuple[int, int, str], done: Rewrites,
             names: Names) -> None:
    sh, sw, coord = found
    x, y = node.inputs[0], node.outputs[0]
    n, c, h, w = static_shape(y)
    (th, h0, h1), (tw, w0, w1) = axis_filter(sh, coord), axis_filter(sw, coord)
    kernel = np.broadcast_to(np.outer(th, tw), (c, 1, len(th), len(tw))).astype(np.float32)
    scale = np.outer(_edge_scale(th, h0, h), _edge_scale(tw, w0, w)).astype(np.float32)
    dtype = np.float32
    upsampled = gs.Variable(names.fresh(f"{y.name}_nearest"), dtype=dtype, shape=[n, c, h, w])
    filtered = gs.Variable(names.fresh(f"{y.name}_filtered"), dtype=dtype, shape=[n, c, h, w])
    node.attrs = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                  "nearest_mode": "floor"}
    _set_inputs(node, [x, gs.Constant(names.fresh(f"{node.name}_roi"), np.zeros(0, dtype)),
                       gs.Constant(names.fresh(f"{node.name}_scales"),
                                   np.array([1, 1, sh, sw], dtype))])
    node.outputs[0] = upsampled
    conv = gs.Node("Conv", names.fresh(f"{node.name}_filter"),
                   attrs={"group": c, "kernel_shape": [len(th), len(tw)],
                          "pads": [h0, w0, h1, w1]},
                   inputs=[upsampled, gs.Constant(names.fresh(f"{node.name}_taps"), kernel)],
                   outputs=[filtered])
    mul = gs.Node("Mul", names.fresh(f"{node.name}_edges"),
                  inputs=[filtered, gs.Constant(names.fresh(f"{node.name}_edge_scale"),
                                                scale.reshape(1, 1, h, w))],
                  outputs=[y])
    graph.nodes.extend([conv, mul])
    done.derived[conv.name] = node.name
    done.derived[mul.name] = node.name
    done.rewritten[node.name] = (
        f"linear Resize ({coord}, factors {sh}x{sw}) became nearest Resize, a depthwise "
        f"{len(th)}x{len(tw)} Conv and a Mul correcting the edges: exact in real arithmetic, "
        f"float32 within (2 kh kw + 8) 2**-24 max|x| of the original")

