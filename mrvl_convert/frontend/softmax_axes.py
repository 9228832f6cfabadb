"""A Softmax over an axis followed only by unit axes, made a last-axis Softmax of a view.

Attention pooling over frames writes ``Softmax(scores, axis=1)`` of ``[N, T, 1]`` (smart-turn's
pool over 400 frames); the layers take a Softmax over the features of a 2-D tensor, the last
axis of a 3-D or 4-D one, or the channels of a 4-D one. With only unit axes after the softmax
axis the op normalises the same runs of values whichever of these it is, so it is
``Reshape(Softmax(Reshape(x, shape[:axis + 1]), axis=-1), shape)``.

Requires: a graph whose activations' shapes are static.
Ensures: every float Softmax of a rank >= 2 input on an axis k < rank - 1 whose later axes are
all 1 (but the 4-D channel Softmax ``[N, C, 1, 1]`` on axis 1, which the layers take as it is)
keeps its name and runs on the last axis of ``x`` viewed as ``shape[:k + 1]`` (``[1, shape[0]]``
when k = 0), between two new Reshapes (``derived``), listed in ``rewritten``; its output tensor
is the second Reshape's, so readers and model outputs are unchanged. Exact: the same values
are normalised together in the same order (before opset 13 the op flattens the axes from k on,
which are then that one axis's values too), and a Reshape moves no value.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import softmax_axis, static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites


def rewrite_unit_softmaxes(graph: gs.Graph, opset: int, done: Rewrites) -> bool:
    """Rewrite every such Softmax in place; True when one was (the caller then cleans up and
    sorts the graph)."""
    names, before = Names(graph), len(done.rewritten)
    for node in [n for n in graph.nodes if n.op == "Softmax"]:
        view = _view_shape(node, opset)
        if view is not None:
            _rewrite(graph, node, view, done, names)
    return len(done.rewritten) > before


def _view_shape(node: gs.Node, opset: int) -> Optional[List[int]]:
    """The shape the Softmax runs on as a last-axis one, or None when it is not one to
    rewrite."""
    shape = static_shape(node.inputs[0]) if node.inputs else None
    if not shape or len(shape) < 2 or len(node.outputs) != 1:
        return None
    if node.inputs[0].dtype is None or not np.issubdtype(np.dtype(node.inputs[0].dtype),
                                                         np.floating):
        return None
    axis = softmax_axis(node, len(shape), opset)
    if axis >= len(shape) - 1 or any(d != 1 for d in shape[axis + 1:]):
        return None
    if len(shape) == 4 and axis == 1:  # the channel Softmax the layers take as it is
        return None
    return shape[:axis + 1] if axis else [1, shape[0]]


def _rewrite(graph: gs.Graph, node: gs.Node, view: List[int], done: Rewrites,
             names: Names) -> None:
    x, out = node.inputs[0], node.outputs[0]
    dtype = x.dtype
    flat_in = gs.Variable(names.fresh(f"{x.name}_softmax_view"), dtype=dtype, shape=view)
    flat_out = gs.Variable(names.fresh(f"{out.name}_softmax_view"), dtype=dtype, shape=view)
    before = gs.Node("Reshape", names.fresh(f"{node.name}_view"), inputs=[
        x, gs.Constant(names.fresh(f"{node.name}_view_shape"), np.array(view, np.int64))],
        outputs=[flat_in])
    after = gs.Node("Reshape", names.fresh(f"{node.name}_unview"), inputs=[
        flat_out, gs.Constant(names.fresh(f"{node.name}_unview_shape"),
                              np.array(static_shape(out), np.int64))], outputs=[out])
    node.inputs.clear()
    node.inputs.append(flat_in)
    node.outputs.clear()
    node.outputs.append(flat_out)
    node.attrs["axis"] = len(view) - 1
    graph.nodes.extend([before, after])
    done.derived.update({before.name: node.name, after.name: node.name})
    done.rewritten[node.name] = (f"Softmax over an axis followed by unit axes became a "
                                 f"last-axis Softmax of the {view} view")
