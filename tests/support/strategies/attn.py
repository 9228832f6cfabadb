"""Attention blocks as other exporters write them (issue 45 finding 6): the masks written
``Where(IsNaN(softmax), 0, softmax)`` after a ``Where(mask, -inf, scores)``, ``Where(mask,
scores, finfo.min)`` (torch.where as HuggingFace writes it) or ``Where(mask, finfo.min, 0)``
added to the scores, and the heads folded into the batch axis (``[heads, T, d]`` BatchMatMuls of
a batch-1 input, as a MiniLM export has them) or kept in their own axis ``[1, heads, T, d]``.

``attn_from_spec(spec)`` builds the model and its feeds from a flat spec alone (a falsifying
example prints as that call); ``attention_models()`` draws one. The key mask is an input
(``mask``, float 0/1, ``[1, T]``); feeds leave at least one key unmasked, so no Softmax row is
entirely masked (where the rewrites' bound excludes it).
"""
from __future__ import annotations

from typing import Dict

import numpy as np
import onnx
from hypothesis import strategies as st

from support.models import Builder
from support.strategies.generated import GeneratedModel

MASKS = ("isnan_inf", "where_inf", "where_fmin", "additive_where", "none")
FMIN = np.finfo(np.float32).min


class AttnModel(GeneratedModel):
    rebuilt_by = "attn_from_spec"


def _scalar(b: Builder, value: float) -> str:
    return b.const(np.array(value, np.float32))


def _split_heads(b: Builder, x: str, spec: dict, name: str, keys: bool = False) -> str:
    """[1, T, C] -> [H, T, d] (heads in the batch axis) or [1, H, T, d]; keys transposed."""
    t, h, d = spec["tokens"], spec["heads"], spec["dim"]
    y = b.op("Reshape", [x, b.const(np.array([1, t, h, d], np.int64))], name=f"{name}_split")
    perm = [0, 2, 3, 1] if keys else [0, 2, 1, 3]
    y = b.op("Transpose", [y], name=f"{name}_heads", perm=perm)
    if spec["heads_in_batch"]:
        shape = [h, d, t] if keys else [h, t, d]
        y = b.op("Reshape", [y, b.const(np.array(shape, np.int64))], name=f"{name}_fold")
    return y


def _masked_weights(b: Builder, scores: str, spec: dict) -> str:
    """The Softmax weights of ``scores`` with the keys whose mask is 0 masked out."""
    form, t = spec["mask"], spec["tokens"]
    if form == "none":
        return b.op("Softmax", [scores], name="softmax", axis=-1)
    keep = b.op("Cast", [b.op("Reshape", [b.input("mask", [1, t]), b.const(
        np.array([1, 1, t] if spec["heads_in_batch"] else [1, 1, 1, t], np.int64))],
        name="mask_view")], name="mask_bool", to=onnx.TensorProto.BOOL)
    drop = b.op("Not", [keep], name="mask_not")
    if form == "additive_where":
        add = b.op("Where", [drop, _scalar(b, float(FMIN)), _scalar(b, 0.0)], name="mask_add")
        return b.op("Softmax", [b.op("Add", [scores, add], name="masked")], name="softmax",
                    axis=-1)
    if form == "where_fmin":
        masked = b.op("Where", [keep, scores, _scalar(b, float(FMIN))], name="masked")
        return b.op("Softmax", [masked], name="softmax", axis=-1)
    masked = b.op("Where", [drop, _scalar(b, float("-inf")), scores], name="masked")
    weights = b.op("Softmax", [masked], name="softmax", axis=-1)
    if form == "isnan_inf":
        nan = b.op("IsNaN", [weights], name="nan")
        weights = b.op("Where", [nan, _scalar(b, 0.0), weights], name="nan_zero")
    return weights


def attn_from_spec(spec: dict) -> AttnModel:
    t, h, d = spec["tokens"], spec["heads"], spec["dim"]
    c = h * d
    b = Builder(seed=spec["seed"], opset=spec["opset"])
    x = b.input("x", [1, t, c])
    q, k, v = (b.op("MatMul", [x, b.weight(c, c)], name=n) for n in ("q", "k", "v"))
    q = b.op("Mul", [q, _scalar(b, 1.0 / np.sqrt(d))], name="q_scale")
    scores = b.op("MatMul", [_split_heads(b, q, spec, "q"), _split_heads(b, k, spec, "k", True)],
                  name="scores")
    weights = _masked_weights(b, scores, spec)
    y = b.op("MatMul", [weights, _split_heads(b, v, spec, "v")], name="context")
    if spec["heads_in_batch"]:
        y = b.op("Reshape", [y, b.const(np.array([1, h, t, d], np.int64))], name="unfold")
    y = b.op("Transpose", [y], name="merge", perm=[0, 2, 1, 3])
    y = b.op("Reshape", [y, b.const(np.array([1, t, c], np.int64))], name="merge_heads")
    out = b.op("MatMul", [y, b.weight(c, c)], name="out")
    model = b.model([b.op("Add", [out, x], name="residual")])
    return AttnModel(model, _feeds(spec), _describe(spec), spec)


def _feeds(spec: dict) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(spec["seed"] + 1)
    t, c = spec["tokens"], spec["heads"] * spec["dim"]
    feeds = {"x": rng.standard_normal((1, t, c)).astype(np.float32)}
    if spec["mask"] != "none":
        mask = (rng.random((1, t)) < 0.7).astype(np.float32)
        mask[0, 0] = 1.0  # one key unmasked: no Softmax row is masked entirely
        feeds["mask"] = mask
    return feeds


def _describe(spec: dict) -> str:
    where = "heads in the batch axis" if spec["heads_in_batch"] else "heads in their own axis"
    return f"attention, {spec['heads']} heads of {spec['dim']}, {spec['tokens']} tokens, " \
           f"{where}, mask {spec['mask']}"


@st.composite
def attention_models(draw) -> AttnModel:
    spec = {"seed": draw(st.integers(0, 2**16)), "opset": draw(st.sampled_from([13, 17])),
            "tokens": draw(st.sampled_from([4, 8, 16])), "heads": draw(st.integers(1, 12)),
            "dim": draw(st.sampled_from([4, 8])), "mask": draw(st.sampled_from(MASKS)),
            "heads_in_batch": draw(st.booleans())}
    return attn_from_spec(spec)


def reduce_sum_from_spec(spec: dict) -> GeneratedModel:
    """An identity FC in front of a ReduceSum over one axis (``spec``: shape, axis (written
    negative when ``negative``), keepdims, seed, and ``expand``: the FC's result multiplied by
    its last-axis mean Expand-ed to its shape first, as jax2tf writes a broadcast)."""
    shape, axis = spec["shape"], spec["axis"]
    b = Builder(seed=spec["seed"], opset=13)
    x = b.op("MatMul", [b.input("x", shape), b.const(np.eye(shape[-1], dtype=np.float32))],
             name="front")
    if spec["expand"]:
        mean = b.op("ReduceMean", [x], name="mean", axes=[-1], keepdims=1)
        wide = b.op("Expand", [mean, b.const(np.array(shape, np.int64))], name="expand")
        x = b.op("Mul", [x, wide], name="masked")
    written = axis - len(shape) if spec["negative"] else axis
    model = b.model([b.op("ReduceSum", [x, b.const(np.array([written], np.int64))], name="pool",
                          keepdims=spec["keepdims"])])
    rng = np.random.default_rng(spec["seed"])
    feeds = {"x": (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, shape))
             .astype(np.float32)}
    return GeneratedModel(model, feeds, f"ReduceSum over axis {axis} of {shape}", spec)


@st.composite
def reduce_sum_models(draw) -> GeneratedModel:
    rank = draw(st.integers(2, 4))
    shape = [1] + [draw(st.integers(1, 6)) for _ in range(rank - 1)]
    spec = {"seed": draw(st.integers(0, 2**16)), "shape": shape,
            "axis": draw(st.integers(1, rank - 1)), "negative": draw(st.booleans()),
            "keepdims": draw(st.integers(0, 1)), "expand": draw(st.booleans())}
    return reduce_sum_from_spec(spec)
