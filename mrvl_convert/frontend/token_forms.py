"""Exact rewrites of a ViT's class-token idioms into forms the accelerator's layers take.

- ``Concat(axis=1)`` of rank 3 whose leading and/or trailing inputs are constants (the class
  token, DeiT's class and distillation tokens, ``torch.cat((cls.expand(B, -1, -1), x), 1)``
  after shape folding) around one activation ``x [B, T, C]`` becomes

      Unsqueeze(x, 1)                         -> [B, 1, T, C]
      Conv 1x1, weight 1.0, no bias,
           pads [k_lead, 0, k_trail, 0]       -> [B, 1, T + k, C], zero rows for the tokens
      Squeeze(1)                              -> [B, T + k, C]
      Add [1 or B, T + k, C]                  the tokens in their rows, -0.0 in x's rows

  The newer codegen's Concat takes activations on the channel axis only; these are layers it
  takes. NCHW ``[B, 1, T, C]`` is NHWC ``[B, T, C, 1]``, the same bytes as the token tensor
  (``ir/layout.py``), so no layout_transform is needed around the Conv (``layers/reshape.py``
  writes the Unsqueeze's output NHWC when only Conv2D reads it). Exact in float32 and float16
  as numbers: ``x * 1`` is x, one product per output (no sum to round), ``x + -0.0`` is x, a
  padded row is +0 and ``0 + c`` is c; NaN and infinities pass as they are. Only the sign of a
  zero may differ: onnxruntime's Conv accumulates onto +0, so a -0.0 of x (or of a token)
  comes out +0.0, as ``Max(x, 0) -> Relu`` in ``canonical_forms.py`` differs.
- ``Gather(axis=1)`` of a constant scalar index i on rank 3 (the head reading ``x[:, 0]``)
  becomes ``Slice(axis 1, i:i+1)`` then ``Squeeze(1)``; a 1-D index of one element becomes the
  Slice alone. Both copy elements, so they are exact.

As in ``canonical_forms.py``, the rewritten node keeps its name (it computes the same output:
the Add, the Squeeze or the Slice) and is listed in ``rewritten``; the nodes added before it
are listed in ``derived``.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import const_value, is_const, static_shape
from mrvl_convert.frontend.canonical_forms import Names, Rewrites, axes_node, axes_operands
from mrvl_convert.frontend.token_ops import rewrite_token_ops
from mrvl_convert.frontend.variance_form import rewrite_variance


def rewrite_tokens(graph: gs.Graph, opset: int, done: Rewrites) -> bool:
    """Apply both rewrites to ``graph`` in place, after the token ops of ``token_ops.py`` and
    the variance form of ``variance_form.py``, recording them in ``done``; True when one happened (the caller then sorts the graph)."""
    ops = rewrite_token_ops(graph, opset, done)
    ops = rewrite_variance(graph, done) or ops  # after the Expands: it finds the model's x - m
    names, before = Names(graph), len(done.rewritten)
    for node in list(graph.nodes):
        if node.op == "Concat" and node.outputs:
            _concat(graph, node, done, names, opset)
        elif node.op == "Gather" and node.outputs and opset >= 10:
            _gather(graph, node, done, names, opset)
    return len(done.rewritten) > before or ops


def _token_parts(node: gs.Node) -> Optional[Tuple[List[np.ndarray], gs.Tensor,
                                                    List[np.ndarray]]]:
    """(leading constants, the activation, trailing constants) of a Concat on the token axis
    of rank-3 tensors, or None when it is not one."""
    out = static_shape(node.outputs[0])
    if out is None or len(out) != 3 or node.attrs.get("axis") not in (1, -2):
        return None
    acts = [i for i, t in enumerate(node.inputs) if not is_const(t)]
    if len(acts) != 1 or len(node.inputs) < 2:
        return None
    x = node.inputs[acts[0]]
    shape = static_shape(x)
    if shape is None or len(shape) != 3 or shape[0] != out[0]:
        return None
    values = [const_value(t) for t in node.inputs if is_const(t)]
    if any(v.ndim != 3 or not np.issubdtype(v.dtype, np.floating) for v in values):
        return None
    return values[:acts[0]], x, values[acts[0]:]


def _rows(values: Sequence[np.ndarray]) -> int:
    return sum(v.shape[1] for v in values)


def _token_const(lead: List[np.ndarray], x_shape: List[int], trail: List[np.ndarray],
                 dtype: np.dtype) -> np.ndarray:
    """The Add's constant: the tokens in their rows, -0.0 in x's rows (x + -0.0 is x, -0 too).
    One batch row when every batch has the same tokens (the constant broadcasts over B)."""
    batch, tokens, channels = x_shape
    const = np.full((batch, _rows(lead) + tokens + _rows(trail), channels), -0.0, dtype)
    row = 0
    for value in [*lead, None, *trail]:
        size = tokens if value is None else value.shape[1]
        if value is not None:
            const[:, row:row + size] = value
        row += size
    return const[:1] if np.array_equal(const, np.broadcast_to(const[:1], const.shape)) else const


def _concat(graph: gs.Graph, node: gs.Node, done: Rewrites, names: Names, opset: int) -> None:
    parts = _token_parts(node)
    if parts is None:
        return
    lead, x, trail = parts
    if not lead and not trail:
        return
    shape, dtype = static_shape(x), np.dtype(node.outputs[0].dtype or np.float32)
    batch, tokens, channels = shape
    k_lead, k_trail = _rows(lead), _rows(trail)
    base = node.name
    image = gs.Variable(names.fresh(f"{base}_image"), dtype=dtype,
                        shape=[batch, 1, tokens, channels])
    padded = gs.Variable(names.fresh(f"{base}_padded"), dtype=dtype,
                         shape=[batch, 1, tokens + k_lead + k_trail, channels])
    rows = gs.Variable(names.fresh(f"{base}_rows"), dtype=dtype,
                       shape=[batch, tokens + k_lead + k_trail, channels])
    one = gs.Constant(names.fresh(f"{base}_one"), np.ones((1, 1, 1, 1), dtype))
    added = [
        axes_node("Unsqueeze", names.fresh(f"{base}_unsqueeze"), x, image, [1], opset, names),
        gs.Node("Conv", names.fresh(f"{base}_pad_rows"), inputs=[image, one], outputs=[padded],
                attrs={"kernel_shape": [1, 1], "pads": [k_lead, 0, k_trail, 0]}),
        axes_node("Squeeze", names.fresh(f"{base}_squeeze"), padded, rows, [1], opset, names),
    ]
    tokens_const = gs.Constant(names.fresh(f"{base}_tokens"),
                               _token_const(lead, shape, trail, dtype))
    graph.nodes.extend(added)
    for new in added:
        done.derived[new.name] = node.name
    node.op = "Add"
    node.attrs.clear()
    node.inputs.clear()
    node.inputs.extend([rows, tokens_const])
    done.rewritten[node.name] = (
        f"Concat of {k_lead} constant token(s) before and {k_trail} after [B, T, C] became "
        "Unsqueeze, Conv 1x1 of weight 1 padding the token rows, Squeeze, Add of the tokens")


def _gather_index(node: gs.Node) -> Optional[Tuple[int, bool]]:
    """(index normalised to 0..T-1, whether the axis is kept) of a Gather that picks one token
    of a rank-3 activation, or None."""
    data, indices = node.inputs[0], node.inputs[1]
    shape = static_shape(data)
    if is_const(data) or not is_const(indices) or shape is None or len(shape) != 3:
        return None
    if node.attrs.get("axis", 0) not in (1, -2):
        return None
    index = const_value(indices)
    if index.size != 1 or index.ndim > 1 or not np.issubdtype(index.dtype, np.integer):
        return None
    i = int(index.reshape(-1)[0])
    if not -shape[1] <= i < shape[1]:
        return None
    return i % shape[1], index.ndim == 1


def _gather(graph: gs.Graph, node: gs.Node, done: Rewrites, names: Names, opset: int) -> None:
    picked = _gather_index(node)
    if picked is None:
        return
    i, keeps_axis = picked
    data = node.inputs[0]
    batch, _, channels = static_shape(data)

    def ints(suffix: str, value: int) -> gs.Constant:
        return gs.Constant(names.fresh(f"{node.name}_{suffix}"), np.array([value], np.int64))

    bounds = [ints("start", i), ints("end", i + 1), ints("axis", 1)]
    node.attrs.clear()
    node.inputs.clear()
    if keeps_axis:
        node.op = "Slice"
        node.inputs.extend([data, *bounds])
        done.rewritten[node.name] = f"Gather of token {i} on axis 1 became Slice {i}:{i + 1}"
        return
    token = gs.Variable(names.fresh(f"{node.name}_token"), dtype=node.outputs[0].dtype,
                        shape=[batch, 1, channels])
    slice_node = gs.Node("Slice", names.fresh(f"{node.name}_slice"), inputs=[data, *bounds],
                         outputs=[token])
    graph.nodes.append(slice_node)
    done.derived[slice_node.name] = node.name
    extra, attrs = axes_operands([1], opset,
                                 lambda v: gs.Constant(names.fresh(f"{node.name}_axes"), v))
    node.op = "Squeeze"
    node.inputs.extend([token, *extra])
    node.attrs.update(attrs)
    done.rewritten[node.name] = (f"Gather of token {i} on axis 1 became Slice {i}:{i + 1} "
                                 "and Squeeze of axis 1")
