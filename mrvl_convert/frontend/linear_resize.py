"""Linear upsampling on the accelerator: nearest upsampling, a depthwise Conv and an edge Mul.

Requires: a graph whose activations' shapes are static (canonicalize runs this after the shapes
that depended on folded values, e.g. a Resize's ``sizes`` from a ``Shape``, are known).
Ensures: every linear ``Resize`` (opset >= 11) or ``Upsample`` (opset 7-9, asymmetric) of a 4-D
float32 ``[N, C, H, W]`` activation, batch and channels kept, in coordinate mode
``half_pixel``, ``pytorch_half_pixel``, ``asymmetric`` or ``align_corners``, no ``axes``,
``keep_aspect_ratio_policy`` or ``antialias``, outside an int8 (QDQ) region (there the QDQ
model's steps are the reference, which float layers would not reproduce), is rewritten (the
node keeps its name, added nodes are ``derived`` from it, ``rewritten`` says into what):

- where each axis scales by an integer ``k`` (align_corners: from ``n`` to ``(n - 1) k + 1``
  samples), the given scales, if any, are those integers, and this form costs no more
  multiply-adds than the matrix form (``kh kw H' W'`` against ``H W' (W + H')``), into

      U = nearest upsampling by (kh, kw)          U[i, j] = x[i // kh, j // kw]
      V = Conv(U, K, group=C, zero pads P)        K = th (x) tw, the same for every channel
      y = Mul(V, R)                               R = 1 / Conv(ones, K, pads P)  [1, 1, H', W']

  (no Mul where R is 1: align_corners). Each is a form the layer set has: Resize2D (exact), a
  depthwise Conv2D, Mul2D by a constant (batch 1 only: a larger batch that needs the Mul takes
  the matrix form);
- otherwise (non-integer factors, align_corners to ``k n`` samples, a shrink) into MatMuls by
  the interpolation matrices (``resize_matrices.py``, its own docstring and bound); a matrix
  of more than ``pad_forms.MAX_SELECTION`` elements in strips of bounded blocks
  (``resize_strips.py``, same bound).

Any other linear Resize is as it was, with the reason in ``kept``; nearest and cubic ones are
not this module's.

Why this form. A linear interpolation by an integer factor ``k`` is nearest upsampling followed
by a box filter along the axis: for ``half_pixel`` with ``k`` odd, ``t = ones(k) / k`` centred;
``k`` even, ``t = [1, 2, .., 2, 1] / (2 k)`` (``k + 1`` taps) centred; for ``asymmetric``,
``t = ones(k) / k`` over ``U[i .. i + k - 1]``; ``align_corners`` from ``n`` to
``(n - 1) k + 1`` is ``asymmetric`` by ``k`` without its last ``k - 1`` samples (no padding).
(Output ``i = k m + r`` reads ``in[m]`` and its neighbour with the interpolation weights;
counting the copies of each in the window gives them.) ``pytorch_half_pixel`` is
``half_pixel`` whenever the output is longer than 1, which an upscale is. At the edges
onnxruntime clamps the coordinate: the window reaches outside ``U`` only where every inside
element of it is a copy of the edge pixel (the window is at most ``k + 1`` long, reaching at
most ``k / 2`` out, and the edge block of ``U`` is ``k`` copies), so the clamped value is the
zero-padded window sum divided by the kernel weight inside, ``R``; the product kernel makes this
hold per axis, corners included. So the form is exact in real arithmetic. It costs
``kh kw`` multiply-adds per output and channel (<= 25 at factor 4), against ``C`` times more for
a transposed convolution, which the layer set has only as a dense one (a grouped ConvTranspose
becomes block-diagonal), and against about ``H + W / 2`` for the matrix form, kept for what
this one does not take.

Bound. Both compute a convex combination of the same inputs with the same real weights;
onnxruntime's Resize rounds about 3 times per output, this form rounds each weight of ``K`` and
``R`` once and sums ``kh kw`` products: for finite inputs the two differ in float32 by at most
``(2 kh kw + 8) u max|x|`` over the output's window (u = 2**-24), so a CPU stage cut from the
rewritten graph is within that of the original (``tests/frontend/test_linear_resize.py`` and
``tests/system/test_fuzz_resize.py`` run both on onnxruntime). (An infinite input differs more:
onnxruntime multiplies it by a zero weight, to NaN, where the window here does not read it.) On
the accelerator the fp16 rounding of x, K, R, V and y adds about ``5 * 2**-11 max|x|``.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import (attr, const_value, float_activation_issue, is_const,
                                     static_shape)
from mrvl_convert.frontend.canonical_forms import Names, Rewrites, _set_inputs
from mrvl_convert.frontend.pad_forms import MAX_SELECTION
from mrvl_convert.frontend.resize_matrices import rewrite_as_matmuls
from mrvl_convert.frontend.resize_strips import axis_weights, needs_strips, rewrite_strips, \
    strip_issue

_MODES = ("half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners")
Axis = Tuple[int, np.ndarray, int, int]  # factor, taps, pad before, pad after


def rewrite_linear_resizes(graph: gs.Graph, opset: int, done: Rewrites) -> bool:
    """Rewrite each linear Resize (or Upsample) that a form takes, in place; True when one
    was (the caller cleans up and sorts the graph)."""
    names, before = Names(graph), len(done.rewritten)
    for node in list(graph.nodes):
        if node.op not in ("Resize", "Upsample") or not node.outputs \
                or attr(node, "mode", "nearest") not in ("linear", "bilinear"):
            continue
        issue = _issue(node, opset)
        filters = None if issue else _filters(node)
        scales = _scales(node) if issue is None and filters is None else None
        weights = axis_weights(node, _coord(node), scales) if isinstance(scales, tuple) else []
        sizes = static_shape(node.inputs[0])[2:] if weights else []
        long = bool(weights) and needs_strips(weights, sizes)  # resize_strips.py bounds it
        issue = issue or (strip_issue(weights, sizes, opset) if long else None)
        if issue or isinstance(scales, str):
            done.kept[node.name] = f"linear {node.op} stays as it is: {issue or scales}"
        elif filters is not None:
            _rewrite(graph, node, filters, done, names, opset)
        elif long:
            _rewrite_long(graph, node, weights, done, names, opset)
        else:
            rewrite_as_matmuls(graph, node, _coord(node), scales, done, names)
    return len(done.rewritten) != before


def _rewrite_long(graph: gs.Graph, node: gs.Node, weights, done: Rewrites, names: Names,
                  opset: int) -> None:
    sizes = [static_shape(t)[2:] for t in (node.inputs[0], node.outputs[0])]
    op, coord = node.op, _coord(node)  # before the node becomes the last layer
    what = rewrite_strips(graph, node, weights, done, names, opset)
    done.rewritten[node.name] = (
        f"linear {op} ({coord}, {sizes[0]} -> {sizes[1]}) became {what}: its "
        f"interpolation matrices in strips of at most {int(np.sqrt(MAX_SELECTION))} outputs; "
        f"float32 within 8 2**-24 max|x| of the original for finite inputs")


def _coord(node: gs.Node) -> str:
    return "asymmetric" if node.op == "Upsample" else \
        str(attr(node, "coordinate_transformation_mode", "half_pixel"))


def _issue(node: gs.Node, opset: int) -> Optional[str]:
    """Why neither form computes this node, or None."""
    if node.op == "Resize" and opset < 11:
        return f"opset {opset}'s Resize has no coordinate_transformation_mode"
    x, y = node.inputs[0], node.outputs[0]
    src, dst = static_shape(x), static_shape(y)
    if src is None or dst is None or len(src) != 4 or len(dst) != 4:
        return f"the forms take 4-D tensors; this {node.op} maps {src} to {dst}"
    not_float = float_activation_issue(x, y)
    if not_float:
        return not_float
    if _coord(node) not in _MODES:
        return f"coordinate_transformation_mode {_coord(node)!r} is not one of " \
               f"{', '.join(_MODES)}"
    if src[:2] != dst[:2] or 0 in src or 0 in dst:
        return f"{src} -> {dst} changes the batch or the channels"
    if str(attr(node, "keep_aspect_ratio_policy", "stretch")) != "stretch" \
            or attr(node, "axes", None) is not None or int(attr(node, "antialias", 0)):
        return "the Resize has axes, a keep_aspect_ratio_policy or antialias"
    return None


def _filters(node: gs.Node) -> Optional[Tuple[Axis, Axis, str]]:
    """The nearest-and-box-filter form's filter of H and of W, or None where it has none."""
    src, dst, coord = static_shape(node.inputs[0]), static_shape(node.outputs[0]), _coord(node)
    height, width = axis_filter(src[2], dst[2], coord), axis_filter(src[3], dst[3], coord)
    if height is None or width is None or dst[2:] == src[2:]:
        return None
    box = len(height[1]) * len(width[1]) * dst[2] * dst[3]
    if box > src[2] * dst[3] * (src[3] + dst[2]):
        return None  # the matrices cost fewer multiply-adds (a large factor on a small input)
    if src[0] > 1 and not _no_edges(height, src[2], dst[2]) or \
            src[0] > 1 and not _no_edges(width, src[3], dst[3]):
        return None  # the edge Mul: the layer set's Mul2D takes batch 1 only
    given = _given_scales(node)
    if coord != "align_corners" and given is not None and given.size \
            and given.tolist() != [1.0, 1.0, float(height[0]), float(width[0])]:
        return None  # the transform uses the given scales, not the shapes' ratio
    return height, width, coord


def _given_scales(node: gs.Node) -> Union[None, str, np.ndarray]:
    """The node's scales as given (None when it has none; a str when computed at run time)."""
    if node.op == "Upsample" and "scales" in node.attrs:
        return np.asarray(node.attrs["scales"], np.float32)
    index = 1 if node.op == "Upsample" else 2
    scales = node.inputs[index] if len(node.inputs) > index else None
    if scales is None or not scales.name:
        return None
    if not is_const(scales):
        return f"the scales ({scales.name}) are computed at run time"
    return np.asarray(const_value(scales), np.float32)


def _scales(node: gs.Node) -> Union[str, Tuple[float, float]]:
    """The scales of H and W onnxruntime's coordinate transform uses."""
    given = _given_scales(node)
    if isinstance(given, str):
        return given
    if given is not None and given.size:
        return float(given[2]), float(given[3])
    src, dst = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    return (float(np.float32(dst[2]) / np.float32(src[2])),
            float(np.float32(dst[3]) / np.float32(src[3])))


def axis_filter(size: int, out: int, coord: str) -> Optional[Axis]:
    """(k, taps, pad before, pad after): the nearest upsampling by ``k`` and the 1-D box filter
    of it that interpolates linearly from ``size`` to ``out`` samples; None when there is none."""
    if out == size:
        return 1, np.ones(1), 0, 0
    if out < size:
        return None  # a shrink: the matrix form
    if coord == "align_corners":
        if size < 2 or (out - 1) % (size - 1):
            return None
        k = (out - 1) // (size - 1)  # the last k - 1 of the k * size are cut off (pad -(k-1))
        return k, np.full(k, 1.0 / k), 0, 0
    if out % size:
        return None
    k = out // size
    if coord == "asymmetric":
        return k, np.full(k, 1.0 / k), 0, k - 1
    if k % 2:
        return k, np.full(k, 1.0 / k), k // 2, k // 2
    taps = np.full(k + 1, 1.0 / k)
    taps[0] = taps[-1] = 0.5 / k
    return k, taps, k // 2, k // 2


def _no_edges(axis: Axis, size: int, out: int) -> bool:
    k, taps, before, _ = axis
    return bool(np.all(_edge_scale(taps, before, size * k, out) == 1))


def _edge_scale(taps: np.ndarray, before: int, length: int, out: int) -> np.ndarray:
    """1 / (the kernel weight inside the ``length`` samples) at each of the ``out`` outputs."""
    inside = np.array([taps[[k for k in range(len(taps)) if 0 <= i + k - before < length]].sum()
                       for i in range(out)])
    return 1.0 / inside


def _rewrite(graph: gs.Graph, node: gs.Node, found: Tuple[Axis, Axis, str], done: Rewrites,
             names: Names, opset: int) -> None:
    (sh, th, h0, h1), (sw, tw, w0, w1), coord = found
    x, y = node.inputs[0], node.outputs[0]
    n, c, h, w = static_shape(y)
    near = [n, c, static_shape(x)[2] * sh, static_shape(x)[3] * sw]
    kernel = np.broadcast_to(np.outer(th, tw), (c, 1, len(th), len(tw))).astype(np.float32)
    scale = np.outer(_edge_scale(th, h0, near[2], h),
                     _edge_scale(tw, w0, near[3], w)).astype(np.float32)
    upsampled = gs.Variable(names.fresh(f"{y.name}_nearest"), dtype=np.float32, shape=near)
    _nearest(node, (sh, sw), names, opset)
    node.outputs[0] = upsampled
    filtered = y if np.all(scale == 1) else \
        gs.Variable(names.fresh(f"{y.name}_filtered"), dtype=np.float32, shape=[n, c, h, w])
    conv = gs.Node("Conv", names.fresh(f"{node.name}_filter"),
                   attrs={"group": c, "kernel_shape": [len(th), len(tw)],
                          "pads": [h0, w0, h1, w1]},
                   inputs=[upsampled, gs.Constant(names.fresh(f"{node.name}_taps"), kernel)],
                   outputs=[filtered])
    graph.nodes.append(conv)
    done.derived[conv.name] = node.name
    if filtered is not y:  # the edges: a window that reaches outside the upsampled data
        mul = gs.Node("Mul", names.fresh(f"{node.name}_edges"),
                      inputs=[filtered, gs.Constant(names.fresh(f"{node.name}_edge_scale"),
                                                    scale.reshape(1, 1, h, w))],
                      outputs=[y])
        graph.nodes.append(mul)
        done.derived[mul.name] = node.name
    done.rewritten[node.name] = (
        f"linear {node.op} ({coord}, {static_shape(x)[2:]} -> {[h, w]}) became nearest "
        f"upsampling by {sh}x{sw}, a depthwise {len(th)}x{len(tw)} Conv"
        f"{'' if filtered is y else ' and a Mul correcting the edges'}: exact in real "
        f"arithmetic, float32 within (2 kh kw + 8) 2**-24 max|x| of the original")


def _nearest(node: gs.Node, factors: Tuple[int, int], names: Names, opset: int) -> None:
    """The node becomes nearest upsampling ``out[i, j] = x[i // sh, j // sw]``."""
    x = node.inputs[0]
    scales = np.array([1, 1, factors[0], factors[1]], np.float32)
    if node.op == "Upsample" and opset < 9:
        node.attrs = {"mode": "nearest", "scales": scales.tolist()}
        _set_inputs(node, [x])
    elif node.op == "Upsample":  # its nearest is floor(i / s)
        node.attrs = {"mode": "nearest"}
        _set_inputs(node, [x, gs.Constant(names.fresh(f"{node.name}_scales"), scales)])
    else:
        node.attrs = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                      "nearest_mode": "floor"}
        _set_inputs(node, [x, gs.Constant(names.fresh(f"{node.name}_roi"),
                                          np.zeros(0, np.float32)),
                           gs.Constant(names.fresh(f"{node.name}_scales"), scales)])
