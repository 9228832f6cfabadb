"""Hypothesis strategies that generate random, valid ONNX CNN models.

``cnn_models()`` draws a small CNN (a chain or a DAG whose branches join again), built by
``ModelBuilder`` (support/strategies/model_builder.py), which tracks every tensor's shape so each
model is valid by construction. Every builder call is recorded, so a model is fully described by
a small JSON-able *spec* (``{"opset": .., "seed": .., "steps": [...], "outputs": [...]}``) and
rebuilt, weights and feeds included, by ``from_spec`` (support/strategies/generated.py). The
``repr`` of a ``GeneratedModel`` is that call, so a falsifying example printed by hypothesis can
be pasted into an ``@example(...)`` as it is.
"""
from __future__ import annotations

from typing import List, Sequence

from hypothesis import strategies as st

from support.strategies.blocks import (BLOCK_KINDS, _activation, _add_spelling, _const_shape,
                                       _conv_block, _conv_params, _cpu_op, _fc, _pool_block,
                                       _same_branch, _se_block, _to_2d)
from support.strategies.generated import GeneratedModel, _finish
from support.strategies.model_builder import NAME_STYLES, ModelBuilder


def policies() -> st.SearchStrategy[str]:
    return st.sampled_from(["single", "multi"])


@st.composite
def cnn_models(draw, min_blocks: int = 1, max_blocks: int = 6,
               opsets: Sequence[int] = (11, 13, 17, 19), multi_io: bool = True,
               cpu_ops: bool = True, heads: Sequence[str] = ("none", "gap_fc", "flatten_fc",
                                                              "nhwc_fc", "pool")
               ) -> GeneratedModel:
    """Random valid ONNX CNNs (see the module docstring)."""
    opset = draw(st.sampled_from(list(opsets)), label="opset")
    seed = draw(st.integers(0, 2**31 - 1), label="seed")
    b = ModelBuilder(opset, seed,
                     const_nodes=draw(st.sampled_from([False, False, False, True]),
                                      label="weights as Constant nodes"),
                     names=draw(st.sampled_from(["plain", "plain", "plain"] + list(NAME_STYLES[1:])),
                                label="naming style"))
    n = draw(st.integers(1, 2), label="batch")
    c = draw(st.integers(1, 16), label="channels")
    h = draw(st.integers(4, 16), label="H")
    w = draw(st.one_of(st.just(h), st.integers(4, 16)), label="W")
    x = b.input([n, c, h, w])
    taps: List[str] = []
    kinds = [k for k in BLOCK_KINDS
             if (cpu_ops or k not in ("cpu_op", "se")) and (multi_io or k not in ("join_input", "tap"))]
    for _ in range(draw(st.integers(min_blocks, max_blocks), label="blocks")):
        kind = draw(st.sampled_from(kinds), label="block")
        shp = b.shape(x)
        if kind == "conv":
            x = _conv_block(draw, b, x, cpu_ops)
        elif kind == "pad_conv":
            mode = draw(st.sampled_from(["constant", "constant", "constant", "reflect", "edge"]),
                        label="pad mode")
            ph = [draw(st.integers(0, 2), label="pad") for _ in range(4)]
            if mode == "reflect":  # reflect needs pad < size
                ph = [min(p, shp[2 + i % 2] - 1) for i, p in enumerate(ph)]
            value = draw(st.sampled_from([0.0, 0.0, 0.5]), label="pad value") if mode == "constant" else 0.0
            if mode == "constant" and not cpu_ops:
                value = 0.0
            x = b.pad(x, [0, 0, ph[0], ph[1], 0, 0, ph[2], ph[3]], mode, value)
            p = _conv_params(draw, b, x)
            x = _activation(draw, b, b.conv(x, **p), cpu_ops)
        elif kind == "pool":
            x = _pool_block(draw, b, x)
        elif kind == "bn":
            x = b.batchnorm(x)
        elif kind == "act":
            x = _activation(draw, b, x, cpu_ops)
        elif kind == "add_const":
            x = b.binary_const(x, "Add", _const_shape(draw, shp),
                               const_first=draw(st.booleans(), label="const first"))
        elif kind == "normalise":  # x - mean, x / std: Sub, and Div by 2^k (exact) or not
            x = b.arith_const(x, "Sub", draw(st.sampled_from([0.5, 0.485, -1.0]), label="mean"),
                              _const_shape(draw, shp))
            if cpu_ops:
                x = b.arith_const(x, "Div", draw(st.sampled_from([0.5, 2.0, 0.229, 3.0]),
                                                 label="std"), [])
        elif kind == "residual":
            y = _same_branch(draw, b, x, cpu_ops, out_ch=shp[1], stride=1)
            x = _add_spelling(draw, b, [x, y] if draw(st.booleans(), label="add order") else [y, x])
            x = _activation(draw, b, x, cpu_ops)
        elif kind == "branch_add":
            s = draw(st.sampled_from([1, 1, 2]), label="branch stride")
            oc = draw(st.integers(1, 16), label="branch channels")
            ys = [_same_branch(draw, b, x, cpu_ops, out_ch=oc, stride=s)
                  for _ in range(draw(st.sampled_from([2, 2, 3]), label="branches to add"))]
            ys = list(dict.fromkeys(ys))  # a branch may be x itself, twice
            x = _add_spelling(draw, b, ys) if len(ys) > 1 else ys[0]
        elif kind == "branch_concat":
            s = draw(st.sampled_from([1, 1, 2]), label="branch stride")
            nb = draw(st.integers(2, 3), label="branches")
            ys = []
            for _i in range(nb):
                free = draw(st.booleans(), label="branch keeps channels")
                oc = None if free else draw(st.integers(1, 8), label="branch channels")
                ys.append(_same_branch(draw, b, x, cpu_ops, out_ch=oc or shp[1], stride=s))
            axis = draw(st.sampled_from([1, 1, -3]), label="concat axis")
            x = b.concat(ys, axis)
            if b.shape(x)[1] > 24:  # keep channels small
                x = b.conv(x, 16, [1, 1])
        elif kind == "se":
            x = _se_block(draw, b, x)
        elif kind == "cpu_op":
            x = _cpu_op(draw, b, x)
        elif kind == "join_input":
            if len(b.inputs) >= 3:
                continue
            how = draw(st.sampled_from(["add", "concat", "conv_add"]), label="join how")
            if how == "add":
                xi = b.input(shp)
                x = b.add(x, xi) if draw(st.booleans(), label="add order") else b.add(xi, x)
            elif how == "concat":
                xi = b.input([shp[0], draw(st.integers(1, 8), label="input channels")] + shp[2:])
                x = b.concat([x, xi] if draw(st.booleans(), label="concat order") else [xi, x], 1)
            else:
                xi = b.input([shp[0], draw(st.integers(1, 8), label="input channels")] + shp[2:])
                yi = b.conv(xi, shp[1], [1, 1])
                x = b.add(x, yi)
        elif kind == "broadcast_add":  # x + f(GAP(x)): an Add of activations of unequal shape
            g = b.global_pool(x, draw(st.sampled_from(["avg", "max"]), label="global pool"))
            if draw(st.booleans(), label="conv on pooled"):
                g = b.conv(g, shp[1], [1, 1])
            x = b.add(x, g) if draw(st.booleans(), label="add order") else b.add(g, x)
        elif kind == "fc_unflatten":  # to 2-D, FC, back to 4-D, go on convolving
            if shp[1] * shp[2] * shp[3] > 1024:
                continue
            y = _to_2d(draw, b, x)
            if b.shape(y)[0] != shp[0]:
                continue
            c2 = draw(st.integers(1, 8), label="unflatten channels")
            h2, w2 = draw(st.sampled_from([(1, 1), (2, 2), (4, 4), (2, 3)]), label="unflatten hw")
            y = b.gemm(y, c2 * h2 * w2) if draw(st.booleans(), label="gemm") else b.matmul(y, c2 * h2 * w2)
            if h2 == w2 == 1 and draw(st.booleans(), label="unsqueeze"):
                x = b.unsqueeze(y, [2, 3])
            else:
                x = b.reshape(y, draw(st.sampled_from([[shp[0], c2, h2, w2], [0, c2, h2, w2],
                                                       [-1, c2, h2, w2]]), label="unflatten to"))
        elif kind == "identity":
            x = b.identity(x, draw(st.sampled_from(["Identity", "Dropout"]), label="identity op"))
        elif kind == "tap":
            if x not in b.inputs and x not in taps:
                taps.append(x)
    head = draw(st.sampled_from(list(heads)), label="head")
    if head == "pool":
        x = b.global_pool(x, draw(st.sampled_from(["avg", "max"]), label="global pool"))
    elif head in ("gap_fc", "flatten_fc", "nhwc_fc"):
        if head == "gap_fc":
            x = b.global_pool(x, draw(st.sampled_from(["avg", "max"]), label="global pool"))
        elif head == "nhwc_fc":
            x = b.transpose(x, [0, 2, 3, 1])
        x = _to_2d(draw, b, x)
        for _ in range(draw(st.integers(1, 2), label="fc layers")):
            x = _fc(draw, b, x, cpu_ops)
    if x in b.inputs:  # an input straight to an output: give it at least one node
        x = b.unary(x, "Relu")
    outputs = [x] + [t for t in taps if t != x]
    if len(outputs) > 1 and draw(st.booleans(), label="shuffle outputs"):
        outputs = outputs[1:] + outputs[:1]
    return _finish(b, outputs, draw(st.sampled_from([False, False, False, False, True, "-1"]),
                                    label="dynamic batch dim"))
