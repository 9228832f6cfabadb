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

from typing import List

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
        nchw = gs.Variable(names.fresh(f"{mean.name}_nchw"), dtype=out.dtype,
                           shape=[src[0], src[3], src[1], src[2]])
        pooled = gs.Variable(names.fresh(f"{mean.name}_pooled"), dtype=out.dtype,
                             shape=[src[0], src[3], 1, 1])
        _add(graph, gs.Node("Transpose", names.fresh(f"{mean.name}_to_nchw"),
                            attrs={"perm": [0, 3, 1, 2]}, inputs=[mean.inputs[0]],
                            outputs=[nchw]), mean, done)
        shape = gs.Constant(names.fresh(f"{mean.name}_shape"),
                            np.array(static_shape(out), np.int64))
        _add(graph, gs.Node("Reshape", names.fresh(f"{mean.name}_reshape"),
                            inputs=[pooled, shape], outputs=[out]), mean, done)
        mean.inputs[0] = nchw
        mean.outputs[0] = pooled
        mean.attrs["keepdims"] = 1
        if "axes" in mean.attrs or opset < 18:
            mean.attrs["axes"] = [2, 3]
        else:
            mean.inputs[1] = gs.Constant(names.fresh(f"{mean.name}_axes_hw"),
                                         np.array([2, 3], np.int64))
        done.rewritten[mean.name] += "; a global average pool of its NCHW view"


def _add(graph: gs.Graph, node: gs.Node, served: gs.Node, done: Rewrites) -> None:
    graph.nodes.append(node)
    done.derived[node.name] = served.name

