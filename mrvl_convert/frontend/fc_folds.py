"""Constant scales folded into the FC that reads them: fewer layers per transformer block.

- **A pre-norm LayerNorm's scale and shift.** ``y = Add(Mul(n, gamma), beta)`` with gamma and
  beta constant vectors over the last axis (``[C]`` or ``[1, .., C]``), where every consumer of
  y is ``MatMul(y, W)`` by a constant ``W [C, O]`` (with or without a following ``Add(., b)``,
  b constant ``[O]``) or ``Gemm(y, W, b)`` on 2-D: each consumer reads n instead, with
  ``W' = gamma[:, None] * W`` and ``b' = b + beta @ W`` (float64, stored float32); a MatMul
  without a bias Add gets one (listed in ``derived``). The Mul and Add are listed in ``merged``
  with the first FC. The opset-17 ``LayerNormalization`` op the same way: its Scale becomes
  ones and its bias zeros, and ``layers/layer_norm.py`` then emits neither the Mul2D(scale)
  nor the Sum2D(bias) (9 -> 7 layers). A y that feeds anything else (a post-norm block's
  residual Add) is left as it is.
- **A power-of-two attention scale.** ``Mul(MatMul(q, k), c)`` or ``Div(MatMul(q, k), c)`` with
  a scalar constant c where c (or 1/c) is a power of two, and q from ``MatMul(x, Wq) [+ Add
  bq]`` through Reshape / Transpose only, each value on the way read by that one node: Wq and bq
  are scaled by c and the Mul / Div merged into the Q MatMul. torch's SDPA export,
  ``MatMul(Mul(q, s), Mul(k, s))`` with s a power of two, folds each Mul into its own FC.

Bounds, per output element o of an FC, with ``S_o = sum_c |n_c| |gamma_c| |W_co|``,
``T_o = sum_c |beta_c| |W_co|``, C the reduced length and u the unit roundoff (2**-24 in
float32, 2**-11 in fp16):

- The LayerNorm fold is exact in real arithmetic. In float32 it changes rounding only: the
  original and the folded FC are each within ``(C + 3) u (S_o + T_o + |b_o|)`` of the exact
  value, so they differ by at most ``(2 C + 6) u (S_o + T_o + |b_o|)``. In fp16 (one rounding
  per layer, weights held in fp16) the fold removes the roundings of n * gamma and of + beta
  and rounds gamma * W once instead of W: the folded output is within
  ``6 * 2**-11 * (S_o + T_o + |b_o|)`` of the unfolded one (three roundings of S or T removed,
  one added, the biases' and outputs' own roundings), inside the compare tolerance.
- The attention scale is exact in float32 and fp16: multiplying by 2**k commutes with rounding,
  so every product and partial sum of the scaled FC is the unscaled one times 2**k. Exact
  except where a value leaves the normal range: a weight whose scaled value would be subnormal
  or overflow is not folded, but an activation (a score) that was normal before may come out
  subnormal (rounded) or overflow in the scaled FC where the original only reached that range
  after the Mul; with c <= 1 and fp16 scores near 2**-14 this can flush a tiny score.

A value whose meaning a fold changes (the LayerNorm op's output, the scaled Q path) gets a new
name, and the value that now equals the model's (the scores after the scale) takes the old one:
``compare(..., layers=True)`` then judges each layer against the model as rewritten
(``verify/float_form.py``), never against the original's tensor of the same name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import (attr, const_value, is_const, only_reader, present,
                                     static_shape)
from mrvl_convert.frontend.canonical_forms import Names, Rewrites, split_const

_PASS_THROUGH = ("Reshape", "Transpose")


@dataclass
class _Fc:
    """An FC reading one activation: ``node`` is a MatMul or Gemm; ``weight`` is [C, O] as the
    FC applies it; ``bias_node`` is the Add after a MatMul (None for a Gemm or no bias)."""
    node: gs.Node
    weight: np.ndarray
    bias_node: Optional[gs.Node]
    bias: Optional[np.ndarray]


def fold_into_fcs(graph: gs.Graph, done: Rewrites) -> bool:
    """Apply both folds to ``graph`` in place, recording them in ``done``; True when one
    happened (the caller then cleans up and sorts the graph)."""
    names, outputs = Names(graph), {t.name for t in graph.outputs}
    changed = False
    for node in list(graph.nodes):
        if node.op == "Add" and node.outputs:
            changed |= _fold_affine(graph, node, done, names, outputs)
        elif node.op == "LayerNormalization" and node.outputs:
            changed |= _fold_layer_norm_op(graph, node, done, names, outputs)
    for node in list(graph.nodes):
        if node.op in ("Mul", "Div") and node.outputs:
            changed |= _fold_scale(node, done, names, outputs)
    return changed


def _float32(tensor: Optional[gs.Tensor]) -> Optional[np.ndarray]:
    if tensor is None or not is_const(tensor):
        return None
    value = const_value(tensor)
    return value if value.dtype == np.float32 else None


def _split(node: gs.Node):
    """(the activation, the constant's value) of a two-input node with one float32 constant
    that does not broadcast the activation (``canonical_forms.split_const``)."""
    act, _, value = split_const(node)
    return (act, value) if act is not None and value.dtype == np.float32 else None


def _bias_of(out: gs.Tensor, size: int, outputs: set):
    """(the Add, b) when out's only reader adds a constant b of ``size`` over the last axis."""
    add = only_reader(out, outputs)
    parts = _split(add) if add is not None and add.op == "Add" else None
    shape = static_shape(out)
    if parts is None or parts[0] is not out or shape is None:
        return None, None
    b = parts[1]
    if b.size != size or b.shape[-1:] != (size,) or b.ndim > len(shape):
        return None, None
    return add, b


def _fc_reading(tensor: gs.Tensor, node: gs.Node, outputs: set) -> Optional[_Fc]:
    """The FC ``node`` is when it reads ``tensor`` as its activation, else None."""
    if not node.inputs or node.inputs[0] is not tensor or tensor in node.inputs[1:]:
        return None
    weight = _float32(node.inputs[1]) if len(node.inputs) > 1 else None
    if weight is None or weight.ndim != 2 or not node.outputs:
        return None
    if node.op == "MatMul":
        add, b = _bias_of(node.outputs[0], weight.shape[1], outputs)
        return _Fc(node, weight, add, b)
    if node.op != "Gemm" or len(static_shape(tensor) or []) != 2:
        return None
    if attr(node, "transA", 0) or attr(node, "alpha", 1.0) != 1.0 or attr(node, "beta", 1.0) != 1.0:
        return None
    weight = weight.T if attr(node, "transB", 0) else weight
    c = present(node, 2)
    bias = None if c is None else _float32(c)
    if c is not None and (bias is None or bias.size != weight.shape[1]
                          or bias.shape[-1:] != (weight.shape[1],) or bias.ndim > 2):
        return None
    return _Fc(node, weight, None, bias)


def _readers(tensor: gs.Tensor, outputs: set) -> Optional[List[_Fc]]:
    """The FCs reading ``tensor`` when every reader is one, else None."""
    if tensor.name in outputs or not tensor.outputs:
        return None
    fcs = [_fc_reading(tensor, node, outputs) for node in tensor.outputs]
    return None if any(fc is None for fc in fcs) else fcs


def _last_axis_vector(value: np.ndarray, shape: List[int]) -> Optional[np.ndarray]:
    if not shape:   # a 0-D activation has no channel axis to scale
        return None
    channels = shape[-1]
    if value.ndim < 1 or value.ndim > len(shape) or value.shape[-1] != channels:
        return None
    return value.reshape(-1) if value.size == channels else None


def _fold_affine(graph: gs.Graph, add: gs.Node, done: Rewrites, names: Names,
                 outputs: set) -> bool:
    parts = _split(add)
    if parts is None or not parts[0].inputs or parts[0].inputs[0].op != "Mul":
        return False
    m, beta = parts
    mul = m.inputs[0]
    factor = _split(mul)
    shape = static_shape(factor[0]) if factor is not None else None
    if factor is None or shape is None or only_reader(m, outputs) is not add:
        return False
    n, gamma = factor
    gamma, beta = _last_axis_vector(gamma, shape), _last_axis_vector(beta, shape)
    fcs = _readers(add.outputs[0], outputs)
    if gamma is None or beta is None or fcs is None or n.dtype not in (np.float32, None):
        return False
    if any(fc.weight.shape[0] != shape[-1] for fc in fcs):
        return False
    for fc in fcs:
        _apply(graph, fc, n, gamma, beta, done, names)
    for node in (mul, add):
        done.merged[node.name] = fcs[0].node.name
        node.inputs.clear()
        node.outputs.clear()
    return True


def _fold_layer_norm_op(graph: gs.Graph, node: gs.Node, done: Rewrites, names: Names,
                        outputs: set) -> bool:
    shape = static_shape(node.inputs[0])
    if not shape or int(attr(node, "axis", -1)) not in (-1, len(shape) - 1):
        return False
    if any(t.outputs or t.name in outputs for t in node.outputs[1:]):
        return False   # Mean or InvStdDev is used
    gamma = _float32(node.inputs[1]) if len(node.inputs) > 1 else None
    bias_t = present(node, 2)
    beta = np.zeros(shape[-1], np.float32) if bias_t is None else _float32(bias_t)
    if gamma is None or beta is None or gamma.shape != (shape[-1],) or beta.size != shape[-1]:
        return False
    if np.all(gamma == 1) and not np.any(beta):
        return False   # nothing to fold
    fcs = _readers(node.outputs[0], outputs)
    if fcs is None or any(fc.weight.shape[0] != shape[-1] for fc in fcs):
        return False
    for fc in fcs:
        _apply(graph, fc, node.outputs[0], gamma, beta.reshape(-1), done, names)
    normalized = node.outputs[0]   # no longer the model's value: not compared as it
    normalized.name = names.fresh(f"{normalized.name}_normalized")
    ones = gs.Constant(names.fresh(f"{node.name}_scale_ones"), np.ones(shape[-1], np.float32))
    # The bias stays, as zeros: onnxruntime 1.18 aborts (an out-of-range input index in a
    # fusion) creating a session whose LayerNormalization without bias feeds MatMul and Add.
    zeros = gs.Constant(names.fresh(f"{node.name}_bias_zeros"), np.zeros(shape[-1], np.float32))
    x = node.inputs[0]
    node.inputs.clear()
    node.inputs.extend([x, ones, zeros])
    done.rewritten[node.name] = (
        "LayerNormalization's scale and bias folded into the FCs reading it (scale ones, bias "
        f"zeros): {', '.join(fc.node.name for fc in fcs)}")
    return True


def _apply(graph: gs.Graph, fc: _Fc, n: gs.Tensor, gamma: np.ndarray, beta: np.ndarray,
           done: Rewrites, names: Names) -> None:
    """Make ``fc`` read n: W' = gamma[:, None] * W, b' = b + beta @ W, in float64."""
    w64 = fc.weight.astype(np.float64)
    weight = (gamma.astype(np.float64)[:, None] * w64).astype(np.float32)
    shift = beta.astype(np.float64) @ w64
    bias = (shift if fc.bias is None else fc.bias.astype(np.float64).reshape(-1) + shift)
    bias = bias.astype(np.float32)
    node = fc.node
    transposed = node.op == "Gemm" and attr(node, "transB", 0)
    node.inputs[0] = n
    node.inputs[1] = gs.Constant(names.fresh(f"{node.name}_weight_folded"),
                                 weight.T.copy() if transposed else weight)
    _set_bias(graph, fc, bias, done, names)
    note = ("the per-channel scale and shift before it (a pre-norm LayerNorm's) folded into "
            "its weight and bias")
    done.rewritten[node.name] = _joined(done.rewritten.get(node.name), note)


def _set_bias(graph: gs.Graph, fc: _Fc, bias: np.ndarray, done: Rewrites,
              names: Names) -> None:
    node = fc.node
    shape = bias.shape if fc.bias is None else fc.bias.shape
    const = gs.Constant(names.fresh(f"{node.name}_bias_folded"), bias.reshape(shape))
    if node.op == "Gemm":
        if len(node.inputs) > 2:
            node.inputs[2] = const
        else:
            node.inputs.append(const)
    elif fc.bias_node is not None:
        add = fc.bias_node
        add.inputs[[i for i, t in enumerate(add.inputs) if is_const(t)][0]] = const
    else:   # a new Add writes the MatMul's output; the MatMul writes a fresh tensor
        out = node.outputs[0]
        product = gs.Variable(names.fresh(f"{out.name}_product"), dtype=out.dtype,
                              shape=out.shape)
        node.outputs[0] = product
        add = gs.Node("Add", names.fresh(f"{node.name}_bias"), inputs=[product, const],
                      outputs=[out])
        graph.nodes.append(add)
        done.derived[add.name] = node.name


def _joined(before: Optional[str], note: str) -> str:
    return note if not before else f"{before}; {note}"


def _power_of_two(value: np.ndarray) -> Optional[float]:
    """The scalar's value when it is a positive power of two, else None."""
    if value.size != 1:
        return None
    v = float(value.reshape(-1)[0])
    if not np.isfinite(v) or v <= 0:
        return None
    mantissa, _ = np.frexp(v)
    return v if mantissa == 0.5 else None


def _scaled_fc(tensor: gs.Tensor, outputs: set) -> Optional[_Fc]:
    """The MatMul [+ Add] whose output reaches ``tensor`` through Reshape / Transpose only,
    each value on the way read by that one node, else None."""
    while True:
        if tensor.name in outputs or len(tensor.outputs) != 1 or not tensor.inputs:
            return None
        node = tensor.inputs[0]
        if node.op not in _PASS_THROUGH:
            break
        if node.op == "Reshape" and not is_const(node.inputs[1]):
            return None
        tensor = node.inputs[0]
    if node.op == "Add" and _split(node) is not None:
        product = _split(node)[0]
        if not product.inputs or product.inputs[0].op != "MatMul":
            return None
        matmul = product.inputs[0]
        fc = _fc_reading(matmul.inputs[0], matmul, outputs)
        return fc if fc is not None and fc.bias_node is node else None
    if node.op == "MatMul" and not is_const(node.inputs[0]):
        fc = _fc_reading(node.inputs[0], node, outputs)
        return fc if fc is not None and fc.bias_node is None else None
    return None


def _two_activations(node: Optional[gs.Node]) -> bool:
    return (node is not None and node.op == "MatMul" and len(node.inputs) == 2
            and not any(is_const(t) for t in node.inputs))


def _fold_scale(node: gs.Node, done: Rewrites, names: Names, outputs: set) -> bool:
    """Mul / Div of a power-of-two scalar on attention scores, or torch SDPA's Mul of q or k,
    into the FC that computes q (or k)."""
    parts = _split(node)
    if parts is None or (node.op == "Div" and is_const(node.inputs[0])):
        return False
    x, c = parts
    factor = _power_of_two(c)
    shape, out = static_shape(x), node.outputs[0]
    if factor is None or shape is None or c.ndim > len(shape) or out.name in outputs:
        return False
    factor = 1.0 / factor if node.op == "Div" else factor
    producer = x.inputs[0] if x.inputs else None
    if _two_activations(producer) and only_reader(x, outputs) is node:
        fc = _scaled_fc(producer.inputs[0], outputs)      # the scores: Q's FC
    elif node.op == "Mul" and _two_activations(only_reader(out, outputs)):
        fc = _scaled_fc(x, outputs)                       # SDPA: q or k itself
    else:
        return False
    if fc is None or not _rescale(fc, factor, names):
        return False
    # The values from the FC up to x are now scaled: fresh names, so that no comparison with
    # the original model takes them for its own; x is now the Mul's result and takes its name.
    q_end = producer.inputs[0] if _two_activations(producer) else x
    for value in _values_from(fc, q_end):
        if value is not x:
            value.name = names.fresh(f"{value.name}_scaled")
    node.inputs.clear()
    node.outputs.clear()
    x.inputs[0].outputs[0] = out
    done.merged[node.name] = fc.node.name
    note = f"scaled by {factor:g}, the attention scale {node.op} {node.name} folded in"
    done.rewritten[fc.node.name] = _joined(done.rewritten.get(fc.node.name), note)
    return True


def _values_from(fc: _Fc, tensor: gs.Tensor) -> List[gs.Tensor]:
    """``tensor`` and the values before it back to the FC's product (through Reshape /
    Transpose, as ``_scaled_fc`` walked them)."""
    chain = [tensor]
    while chain[-1].inputs[0] is not fc.node and chain[-1].inputs[0] is not fc.bias_node:
        chain.append(chain[-1].inputs[0].inputs[0])
    if fc.bias_node is not None:
        chain.append(fc.node.outputs[0])
    return chain


def _rescale(fc: _Fc, factor: float, names: Names) -> bool:
    """Scale the FC's weight and bias by ``factor``; False (nothing changed) when a scaled
    value would not be exact (subnormal or overflow)."""
    scaled = [(fc.weight * np.float32(factor)).astype(np.float32)]
    if fc.bias is not None:
        scaled.append((fc.bias * np.float32(factor)).astype(np.float32))
    originals = [fc.weight] + ([fc.bias] if fc.bias is not None else [])
    for new, old in zip(scaled, originals):
        if not np.array_equal(new / np.float32(factor), old) or not np.all(np.isfinite(new)):
            return False
        if np.any((new != 0) & (np.abs(new) < np.finfo(np.float32).tiny)):
            return False
    node = fc.node
    node.inputs[1] = gs.Constant(names.fresh(f"{node.name}_weight_scaled"), scaled[0])
    if fc.bias_node is not None:
        add = fc.bias_node
        index = [i for i, t in enumerate(add.inputs) if is_const(t)][0]
        add.inputs[index] = gs.Constant(names.fresh(f"{add.name}_bias_scaled"), scaled[1])
    return True
