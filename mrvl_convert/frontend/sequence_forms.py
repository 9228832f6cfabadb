"""After ``sequence_lift.py``: two forms of the lifted ``[1, T, ...]`` tensors with a layer.

- A Pad of the frames read only by an ``Unsqueeze`` or a ``Transpose`` (madmom pads its
  ``[T, F]`` input, then makes it ``[1, T, F, 1]`` and NCHW for its first Conv) moves after
  it, its pads given the new axis (0) or permuted with the axes: the Conv composite folds a
  Pad that it reads. Exact: padding commutes with inserting a unit axis and with a permutation
  of the axes it pads.
- A ReduceMean over axes 1 and 2 of a 4-D ``[1, T, W, C]`` (a mean over the frames and the
  bins: madmom's key net) is ``Transpose(0, 3, 1, 2)`` (the NCHW view of the NHWC tensor the
  layout already holds), a ReduceMean over H and W keeping them (a global average pool) and a
  Reshape to the mean's shape. Bound: the same mean of n = T W values summed in another
  order, at most ``2 (n - 1) u mean |x|`` apart (u = 2**-24).

Requires: the region's nodes lifted (static shapes on their tensors), opset ``opset``.
Ensures: the graph's outputs keep their names, shapes and values (within the bound above); a
moved Pad or a rewritten mean keeps its name (``rewritten``), an added node is ``derived``
from it.
"""
from __future__ import annotations

from typing import List, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites
from mrvl_convert.frontend.pad_sinking import sink_pad
from mrvl_convert.frontend.sequence_ops import kept_names, reduced_axes


def sink_pads(graph: gs.Graph, pads: List[gs.Node], names: Names, done: Rewrites) -> None:
    """Move each Pad after the Unsqueezes and Transposes that alone read it
    (``pad_sinking.sink_pad``)."""
    outputs = kept_names(graph)
    for pad in pads:
        if sink_pad(pad, outputs, names):
            done.rewritten[pad.name] += "; moved after the Unsqueeze / Transpose reading it"


def means_as_pools(graph: gs.Graph, means: List[gs.Node], opset: int, names: Names,
                   done: Rewrites) -> None:
    """Each mean over axes 1 and 2 of a lifted ``[1, T, W, C]`` as a global average pool."""
    for mean in means:
        src = static_shape(mean.inputs[0])
        if mean.op != "ReduceMean" or src is None or len(src) != 4 \
                or reduced_axes(mean) != [1, 2]:
            continue
        out = mean.outputs[0]
        turn, pooled = mean_of_nchw_view(mean, 1, opset, names, "axes_hw")
        _add(graph, turn, mean, done)
        shape = gs.Constant(names.fresh(f"{mean.name}_shape"),
                            np.array(static_shape(out), np.int64))
        _add(graph, gs.Node("Reshape", names.fresh(f"{mean.name}_reshape"),
                            inputs=[pooled, shape], outputs=[out]), mean, done)
        done.rewritten[mean.name] += "; a global average pool of its NCHW view"


def mean_of_nchw_view(mean: gs.Node, keepdims: int, opset: int, names: Names,
                      tag: str) -> Tuple[gs.Node, gs.Variable]:
    """``mean`` (over H and W of its ``[N, H, W, C]`` input) made a ReduceMean over axes 2 and
    3 of the input's NCHW view (its axes constant named ``tag``), into a new tensor: the
    Transpose to add before it, and that tensor (``[N, C, 1, 1]``, ``[N, C]`` without
    ``keepdims``) for the caller to bring to the mean's old output. Exact: the same values in
    another order, the mean over the same ones."""
    out = mean.outputs[0]
    n, h, w, c = static_shape(mean.inputs[0])
    nchw = gs.Variable(names.fresh(f"{mean.name}_nchw"), dtype=out.dtype, shape=[n, c, h, w])
    pooled = gs.Variable(names.fresh(f"{mean.name}_pooled"), dtype=out.dtype,
                         shape=[n, c, 1, 1] if keepdims else [n, c])
    turn = gs.Node("Transpose", names.fresh(f"{mean.name}_to_nchw"), attrs={"perm": [0, 3, 1, 2]},
                   inputs=[mean.inputs[0]], outputs=[nchw])
    axes = gs.Constant(names.fresh(f"{mean.name}_{tag}"), np.array([2, 3], np.int64))
    mean.attrs = {"keepdims": keepdims} if opset >= 18 else {"keepdims": keepdims, "axes": [2, 3]}
    mean.inputs.clear()
    mean.inputs.extend([nchw, axes] if opset >= 18 else [nchw])
    mean.outputs[0] = pooled
    return turn, pooled


def _add(graph: gs.Graph, node: gs.Node, served: gs.Node, done: Rewrites) -> None:
    graph.nodes.append(node)
    done.derived[node.name] = served.name

