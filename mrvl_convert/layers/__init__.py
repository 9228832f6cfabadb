"""The layer catalogue: one module per Marvell layer kind, listed here explicitly.

A kind's module holds everything about it: its attributes and constants (declared once, as the
Nodes-JSON writes them), how a matched composite lowers to it, its simulator kernel, and its
flags. Adding a kind is one new module, one line in ``_KINDS`` and one rule entry (README,
"Adding a layer kind"); tests/layers/test_catalogue.py fails when a schema or a doc lags behind.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from mrvl_convert.layers import concat, conv2d, fc, layout_transform, pool, reshape, squeeze, sum2d
from mrvl_convert.layers.qnn import activations as qnn_activations
from mrvl_convert.layers.qnn import lower as qnn
from mrvl_convert.layers.qnn import requant as qnn_requant
from mrvl_convert.layers import batch_matmul, conv2d_transpose, expand_dims, reduce, resize2d, split
from mrvl_convert.layers import strided_slice, transpose
from mrvl_convert.layers import clip, leaky_relu, mul2d, power, relu, rsqrt, sigmoid, softmax, sub, tanh
from mrvl_convert.layers._kind import (BOTH, FUSED_ACTIVATION, MARVELL, QDQ_ROLES, REQUIRED, UPSTREAM,
                                      Activation, Attr, Const, LayerKind, r4_shape)

# qnn.int8_form: the kind with its int8 attributes and kernel (QDQ models, layers/qnn.py).
_KINDS = (
    qnn.int8_form(conv2d.KIND),
    qnn.int8_form(fc.KIND),
    pool.MAXPOOL,
    qnn.int8_form(pool.AVGPOOL),
    qnn.int8_form(pool.GLOBAL_AVGPOOL),
    pool.GLOBAL_MAXPOOL,
    qnn.int8_form(sum2d.KIND),
    concat.KIND,
    reshape.RESHAPE,
    reshape.BATCH_FLATTEN,
    squeeze.KIND,
    layout_transform.KIND,
    resize2d.KIND,
    split.KIND,
    strided_slice.KIND,
    transpose.KIND,
    qnn.int8_form(reduce.REDUCE_MEAN),
    reduce.REDUCE_MAX,
    qnn.int8_form(conv2d_transpose.KIND),
    batch_matmul.KIND,
    expand_dims.KIND,
    qnn.QUANT,
    qnn_requant.KIND,
    qnn.int8_form(mul2d.KIND),
    qnn.int8_form(sub.KIND),
    relu.KIND,
    leaky_relu.KIND,
    clip.KIND,
    sigmoid.KIND,
    tanh.KIND,
    qnn_activations.QNN_SIGMOID,
    qnn_activations.QNN_TANH,
    softmax.KIND,
    power.KIND,
    rsqrt.KIND,
)

#: layer_name -> LayerKind, read-only.
CATALOGUE: Mapping[str, LayerKind] = MappingProxyType({k.name: k for k in _KINDS})


def layer_kind(name: str) -> LayerKind:
    """The kind of a ``layer_name``; KeyError for a name the catalogue does not hold."""
    return CATALOGUE[name]


__all__ = ["CATALOGUE", "Activation", "Attr", "BOTH", "Const", "FUSED_ACTIVATION",
           "LayerKind", "MARVELL", "QDQ_ROLES", "REQUIRED", "UPSTREAM", "layer_kind", "r4_shape"]
