"""A linear Resize as two constant matrices: ``y = A_h . x . A_w^T``, MatMuls along W then H.

Requires: a linear ``Resize`` (or ``Upsample``) of a 4-D float32 ``[N, C, H, W]`` activation to
``[N, C, H', W']`` whose coordinate mode is ``half_pixel``, ``pytorch_half_pixel``,
``asymmetric`` or ``align_corners`` and whose scales (if given) are constants; ``linear_resize.py``
checks this and sends here what its nearest-and-box-filter form does not take (align_corners to
``s n`` samples, non-integer factors, downscaling without antialias).
Ensures: the node is replaced by ``MatMul(x, A_w^T)``, ``Transpose(0, 1, 3, 2)``,
``MatMul(., A_h^T)``, ``Transpose(0, 1, 3, 2)`` (the first MatMul keeps the node's name; the
others are ``derived`` from it). The layer set has each: an FC over the last axis, transposes.

Why. A linear interpolation along one axis is a fixed linear map of that axis, a matrix with two
non-zeros per row, whatever the factor or the mode, so the 2-D one is the product of the two
maps. It costs ``C H W' (W + H')`` multiply-adds against ``C H' W' kh kw`` for the Conv form,
which is why this is the fallback, not the rule.

Bound. The matrices hold onnxruntime's own weights: the source coordinate, its clamp and the
two weights ``|x - x1|``, ``|x - x2|`` computed in float32 by its formulas (scale = the given
scale, or ``float(out) / float(in)`` from sizes). onnxruntime sums the four products of a 2x2
window in one expression; this form interpolates W, rounds, then H: for finite inputs the two
differ by at most ``8 u max|x|`` over the window (u = 2**-24; a zero weight times a finite input
adds an exact 0). An infinite or NaN input makes every output of its row and column NaN here
(0 * inf), where onnxruntime keeps it to its window.

Size. Each matrix has ``size * out`` elements: a long 1-D signal or a large image at a
non-integer factor would make one of gigabytes (44100 samples to 48000: 8 GB float32). Above
``pad_forms.MAX_SELECTION`` elements per matrix ``linear_resize.py`` sends the node to
``resize_strips.py``, which computes the axis in strips of bounded blocks
(``interpolation_block``).
"""
from __future__ import annotations

from typing import Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites, _set_inputs


# per output: its two source samples (low, high) and their weights (w_low, w_high)
Weights = Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def interpolation_weights(size: int, out: int, coord: str, scale: float) -> Weights:
    """Per output, its two source samples and their weights, computed as onnxruntime computes
    them (float32)."""
    f32 = np.float32
    i = np.arange(out, dtype=f32)
    if coord == "align_corners":
        x = np.zeros(out, f32) if out == 1 else i * f32(size - 1) / f32(out - 1)
    elif coord == "asymmetric":
        x = i / f32(scale)
    elif coord == "pytorch_half_pixel" and out == 1:
        x = np.zeros(out, f32)
    else:
        x = (i + f32(0.5)) / f32(scale) - f32(0.5)
    x = np.maximum(f32(0), np.minimum(x, f32(size - 1))).astype(f32)
    low = np.minimum(x.astype(np.int64), size - 1)
    high = np.minimum(low + 1, size - 1)
    w_low = np.abs(x - high.astype(f32)).astype(f32)
    w_high = np.abs(x - low.astype(f32)).astype(f32)
    same = low == high
    w_low[same], w_high[same] = f32(0.5), f32(0.5)
    return low, high, w_low, w_high


def interpolation_block(weights: Weights, rows: Tuple[int, int],
                        columns: Tuple[int, int]) -> np.ndarray:
    """``[j1 - j0, hi - lo]``: rows ``j0..j1`` of the interpolation matrix, columns ``lo..hi``
    (which must hold each of those rows' two samples)."""
    (j0, j1), (lo, hi) = rows, columns
    low, high, w_low, w_high = (w[j0:j1] for w in weights)
    matrix = np.zeros((j1 - j0, hi - lo), np.float32)
    index = np.arange(j1 - j0)
    matrix[index, low - lo] += w_low
    matrix[index, high - lo] += w_high
    return matrix


def interpolation_matrix(size: int, out: int, coord: str, scale: float) -> np.ndarray:
    """``[out, size]``: row i holds the weights of output i's two source samples."""
    return interpolation_block(interpolation_weights(size, out, coord, scale), (0, out),
                               (0, size))


def rewrite_as_matmuls(graph: gs.Graph, node: gs.Node, coord: str,
                       scales: Tuple[float, float], done: Rewrites, names: Names) -> None:
    """Replace ``node`` by the MatMul/Transpose chain (see the module docstring)."""
    x, y = node.inputs[0], node.outputs[0]
    n, c, h, w = static_shape(x)
    out_h, out_w = static_shape(y)[2:]
    a_w = interpolation_matrix(w, out_w, coord, scales[1])
    a_h = interpolation_matrix(h, out_h, coord, scales[0])
    shapes = ([n, c, h, out_w], [n, c, out_w, h], [n, c, out_w, out_h])
    along_w, turned, along_h = (gs.Variable(names.fresh(f"{y.name}_{tag}"), dtype=np.float32,
                                            shape=shape)
                                for tag, shape in zip(("along_w", "turned", "along_h"), shapes))
    op = node.op
    node.op, node.attrs = "MatMul", {}
    _set_inputs(node, [x, gs.Constant(names.fresh(f"{node.name}_a_w"), a_w.T.copy())])
    node.outputs[0] = along_w
    added = [gs.Node("Transpose", names.fresh(f"{node.name}_turn"), attrs={"perm": [0, 1, 3, 2]},
                     inputs=[along_w], outputs=[turned]),
             gs.Node("MatMul", names.fresh(f"{node.name}_along_h"),
                     inputs=[turned, gs.Constant(names.fresh(f"{node.name}_a_h"),
                                                 a_h.T.copy())], outputs=[along_h]),
             gs.Node("Transpose", names.fresh(f"{node.name}_back"), attrs={"perm": [0, 1, 3, 2]},
                     inputs=[along_h], outputs=[y])]
    graph.nodes.extend(added)
    done.derived.update({added_node.name: node.name for added_node in added})
    done.rewritten[node.name] = (
        f"linear {op} ({coord}, {[h, w]} -> {[out_h, out_w]}) became MatMul by its "
        f"interpolation matrix along W, Transpose, MatMul along H, Transpose: float32 within "
        f"8 2**-24 max|x| of the original for finite inputs")
