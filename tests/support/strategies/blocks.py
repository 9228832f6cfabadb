"""The building blocks ``cnn_models`` draws: convolutions, pools, activations, branches, joins,
squeeze-excite, CPU-only ops and classifier heads, each added to a ``ModelBuilder``."""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
from hypothesis import strategies as st

from support.strategies.geometry import _ceil_ambiguous
from support.strategies.model_builder import ModelBuilder


def _conv_params(draw, b: ModelBuilder, x: str, *, same: bool = False,
                 out_ch: Optional[int] = None, stride: Optional[int] = None) -> dict:
    """Draw valid Conv parameters for x. same=True: odd kernel, 'same' pads (output spatial size
    depends only on the stride), plain or depthwise groups only if out_ch allows."""
    _, c, h, w = b.shape(x)
    variants = ["plain", "plain", "pointwise", "depthwise", "grouped"]
    variant = draw(st.sampled_from(variants), label="conv variant")
    groups = 1
    if variant == "depthwise" and (out_ch is None or out_ch % c == 0):
        groups = c
    elif variant == "grouped":
        divs = [g for g in range(2, c) if c % g == 0 and (out_ch is None or out_ch % g == 0)]
        if divs:
            groups = draw(st.sampled_from(divs), label="groups")
    if out_ch is None:
        if groups == c and variant == "depthwise":
            out_ch = c * draw(st.sampled_from([1, 2] if 2 * c <= 16 else [1]), label="dw mult")
        else:
            out_ch = groups * draw(st.integers(1, max(1, 16 // groups)), label="out/groups")
    if variant == "pointwise":
        kh = kw = 1
    elif same:
        kh = draw(st.sampled_from([1, 3, 5]), label="kh")
        kw = draw(st.sampled_from([kh, 1, 3, 5]), label="kw")
    else:
        kh = draw(st.integers(1, 5), label="kh")
        kw = draw(st.one_of(st.just(kh), st.integers(1, 5)), label="kw")
    dh = dw = draw(st.sampled_from([1, 1, 2]), label="dilation") if max(kh, kw) > 1 else 1
    if stride is None:
        stride = draw(st.sampled_from([1, 1, 2]), label="stride")
    sh, sw = stride, stride
    if not same and stride == 2 and draw(st.booleans(), label="anisotropic stride"):
        sw = 1
    if same:
        pads = [dh * (kh - 1) // 2, dw * (kw - 1) // 2, dh * (kh - 1) // 2, dw * (kw - 1) // 2]
    else:
        kind = draw(st.sampled_from(["none", "same", "asym", "asym", "auto"]), label="pads kind")
        auto = "NOTSET"
        if kind == "auto":
            auto = draw(st.sampled_from(["SAME_UPPER", "SAME_LOWER", "VALID"]), label="auto_pad")
            pads = [0, 0, 0, 0]
        elif kind == "none":
            pads = [0, 0, 0, 0]
        elif kind == "same":
            pads = [dh * (kh - 1) // 2, dw * (kw - 1) // 2, dh * (kh - 1) // 2, dw * (kw - 1) // 2]
        else:
            pads = [draw(st.integers(0, 2), label="pad") for _ in range(4)]
        # keep it valid: a kernel larger than the padded input falls back to 1 along that axis
        if h + pads[0] + pads[2] < dh * (kh - 1) + 1:
            kh, pads[0], pads[2] = 1, 0, 0
        if w + pads[1] + pads[3] < dw * (kw - 1) + 1:
            kw, pads[1], pads[3] = 1, 0, 0
        if kh == 1 and kw == 1:
            dh = dw = 1
        if auto != "NOTSET":
            if auto != "VALID":  # onnxruntime: no dilation with SAME_UPPER / SAME_LOWER
                dh = dw = 1
            p = dict(out_ch=int(out_ch), kernel=[kh, kw], strides=[sh, sw], dilations=[dh, dw],
                     groups=int(groups), bias=draw(st.booleans(), label="bias"), auto_pad=auto)
            return p
    return dict(out_ch=int(out_ch), kernel=[kh, kw], strides=[sh, sw], pads=pads,
                dilations=[dh, dw], groups=int(groups), bias=draw(st.booleans(), label="bias"))


def _activation(draw, b: ModelBuilder, x: str, allow_cpu: bool) -> str:
    opts = ["none", "relu", "relu", "relu6", "clip", "max0", "min_relu6"] + \
        (["leaky"] if allow_cpu else [])
    act = draw(st.sampled_from(opts), label="activation")
    if act == "relu":
        return b.unary(x, "Relu")
    if act == "relu6":
        return b.clip(x, 0.0, 6.0)
    if act == "max0":  # Relu as Max(x, 0)
        return b.minmax_const(x, "Max", 0.0, const_first=draw(st.booleans(), label="0 first"))
    if act == "min_relu6":  # Relu6 as Min(Relu(x), 6)
        return b.minmax_const(b.unary(x, "Relu"), "Min", 6.0,
                              const_first=draw(st.booleans(), label="6 first"))
    if act == "clip":
        lo, hi = draw(st.sampled_from([(-1.0, 1.0), (0.0, None), (None, 2.0), (0.0, 1.0),
                                       (0.0, float("inf"))]), label="clip bounds")
        return b.clip(x, lo, hi)
    if act == "leaky":
        return b.unary(x, "LeakyRelu")
    return x


def _conv_block(draw, b: ModelBuilder, x: str, allow_cpu: bool, *, same: bool = False,
                out_ch: Optional[int] = None, stride: Optional[int] = None) -> str:
    y = b.conv(x, **_conv_params(draw, b, x, same=same, out_ch=out_ch, stride=stride))
    if draw(st.booleans(), label="bn after conv"):
        y = b.batchnorm(y)
    return _activation(draw, b, y, allow_cpu)


def _pool_params(draw, b: ModelBuilder, x: str, kind: str) -> dict:
    _, _, h, w = b.shape(x)
    kh = draw(st.integers(1, 3), label="pool kh")
    kw = draw(st.one_of(st.just(kh), st.integers(1, 3)), label="pool kw")
    s = draw(st.integers(1, 2), label="pool stride")
    if draw(st.booleans(), label="pool pads"):
        pads = [draw(st.integers(0, k - 1), label="pool pad") for k in (kh, kw, kh, kw)]
    else:
        pads = [0, 0, 0, 0]
    if h + pads[0] + pads[2] < kh:
        kh, pads[0], pads[2] = 1, 0, 0
    if w + pads[1] + pads[3] < kw:
        kw, pads[1], pads[3] = 1, 0, 0
    d = 1
    if kind == "max" and max(kh, kw) > 1:
        d = draw(st.sampled_from([1, 1, 1, 2]), label="pool dilation")
        if h + pads[0] + pads[2] < d * (kh - 1) + 1 or w + pads[1] + pads[3] < d * (kw - 1) + 1:
            d = 1
    ceil = int(draw(st.sampled_from([0, 0, 1]), label="ceil_mode"))
    if (_ceil_ambiguous(h, kh, s, pads[0], pads[2], d)
            or _ceil_ambiguous(w, kw, s, pads[1], pads[3], d)):
        ceil = 0
    p = dict(kernel=[kh, kw], strides=[s, s], pads=pads, ceil_mode=ceil)
    if d != 1:
        p["dilations"] = [d, d]
    if kind == "avg":
        p["count_include_pad"] = int(draw(st.booleans(), label="count_include_pad"))
    return p


def _pool_block(draw, b: ModelBuilder, x: str) -> str:
    kind = draw(st.sampled_from(["max", "avg"]), label="pool kind")
    p = _pool_params(draw, b, x, kind)
    return b.maxpool(x, **p) if kind == "max" else b.avgpool(x, **p)


def _same_branch(draw, b: ModelBuilder, x: str, allow_cpu: bool, out_ch: Optional[int],
                 stride: int) -> str:
    """A branch whose output spatial size is ((H-1)//stride+1, (W-1)//stride+1)."""
    c = b.shape(x)[1]
    kinds = ["conv", "conv"]
    if out_ch in (None, c):
        kinds += ["maxpool", "avgpool"] + (["identity"] if stride == 1 else [])
    kind = draw(st.sampled_from(kinds), label="branch kind")
    if kind == "identity":
        return x
    if kind == "maxpool":
        return b.maxpool(x, [3, 3], [stride, stride], [1, 1, 1, 1])
    if kind == "avgpool":
        return b.avgpool(x, [3, 3], [stride, stride], [1, 1, 1, 1],
                         count_include_pad=int(draw(st.booleans(), label="count_include_pad")))
    y = _conv_block(draw, b, x, allow_cpu, same=True, out_ch=out_ch, stride=stride)
    if draw(st.booleans(), label="second conv in branch"):
        y = _conv_block(draw, b, y, allow_cpu, same=True, out_ch=b.shape(y)[1], stride=1)
        if out_ch is not None and b.shape(y)[1] != out_ch:  # pragma: no cover - same=True keeps it
            raise AssertionError
    return y


def _const_shape(draw, shp: Sequence[int]) -> List[int]:
    n, c, h, w = shp
    kind = draw(st.sampled_from(["per_channel", "per_channel3", "scalar", "one", "full", "spatial"]),
                label="const operand shape")
    return {"per_channel": [1, c, 1, 1], "per_channel3": [c, 1, 1], "scalar": [], "one": [1],
            "full": [1, c, h, w], "spatial": [1, 1, h, w]}[kind]


def _cpu_op(draw, b: ModelBuilder, x: str) -> str:
    _, c, h, w = b.shape(x)
    ops = ["Sigmoid", "Tanh", "LeakyRelu", "Softmax", "Elu", "Abs", "HardSigmoid", "mul_const",
           "Neg", "matmul4d", "transpose_hw", "dynamic_conv"]
    if h <= 8 and w <= 8:
        ops += ["resize2x", "resize2x"]
    op = draw(st.sampled_from(ops), label="cpu op")
    if op == "matmul4d":  # MatMul over W: rank-4, not an FC
        return b.matmul(x, w)
    if op == "transpose_hw":  # not an NCHW<->NHWC layout change
        return b.transpose(x, [0, 1, 3, 2]) if h == w else b.unary(x, "Neg")
    if op == "dynamic_conv":  # weights from a graph input: not constant, stays on CPU
        k = draw(st.sampled_from([1, 3]), label="dynamic conv kernel")
        return b.conv_dynamic(x, b.input([c, c, k, k], scale=round(1 / np.sqrt(c * k * k), 4),
                                         batched=False))
    if op == "resize2x":
        return b.resize2x(x)
    if op == "mul_const":
        return b.binary_const(x, "Mul", _const_shape(draw, b.shape(x)),
                              const_first=draw(st.booleans(), label="const first"))
    return b.unary(x, op)


def _se_block(draw, b: ModelBuilder, x: str) -> str:
    c = b.shape(x)[1]
    s = b.global_pool(x, "avg")
    r = max(1, c // 2)
    s = b.conv(s, r, [1, 1], bias=True)
    s = b.unary(s, "Relu")
    s = b.conv(s, c, [1, 1], bias=True)
    s = b.unary(s, "Sigmoid")
    return b.mul(x, s)


def _to_2d(draw, b: ModelBuilder, x: str) -> str:
    shp = b.shape(x)
    opts = ["flatten", "reshape"] + (["squeeze"] if shp[2] == 1 and shp[3] == 1 else [])
    how = draw(st.sampled_from(opts), label="to 2-D")
    if how == "flatten":
        return b.flatten(x, draw(st.sampled_from([1, 1, 1, 1, 2]), label="flatten axis"))
    if how == "squeeze":
        return b.squeeze(x, draw(st.sampled_from([[2, 3], [3, 2], [-1, -2]]), label="squeeze axes"))
    target = draw(st.sampled_from([[shp[0], -1], [0, -1], [shp[0], int(np.prod(shp[1:]))]]),
                  label="reshape target")
    return b.reshape(x, target)


def _fc(draw, b: ModelBuilder, x: str, allow_cpu: bool) -> str:
    out_f = draw(st.integers(1, 16), label="fc out")
    how = draw(st.sampled_from(["gemm", "gemm", "matmul_add", "matmul"]), label="fc kind")
    if how == "gemm":
        y = b.gemm(x, out_f, trans_b=int(draw(st.integers(0, 1), label="transB")),
                   bias=draw(st.booleans(), label="bias"),
                   alpha=draw(st.sampled_from([1.0, 1.0, 1.0, 0.5]), label="alpha"),
                   bias_2d=draw(st.booleans(), label="bias 2d"))
    else:
        y = b.matmul(x, out_f)
        if how == "matmul_add":
            y = b.binary_const(y, "Add", draw(st.sampled_from([[out_f], [1, out_f]]), label="bias"),
                               const_first=draw(st.booleans(), label="const first"))
    opts = ["none", "relu"] + (["Sigmoid", "Softmax", "Tanh"] if allow_cpu else [])
    act = draw(st.sampled_from(opts), label="fc activation")
    if act == "relu":
        return b.unary(y, "Relu")
    if act != "none":
        return b.unary(y, act)
    return y


BLOCK_KINDS = ["conv", "pad_conv", "pool", "bn", "act", "add_const", "residual", "branch_add",
               "branch_concat", "se", "cpu_op", "join_input", "tap", "identity", "broadcast_add",
               "fc_unflatten", "normalise"]


def _add_spelling(draw, b: ModelBuilder, xs: Sequence[str]) -> str:
    """Two or three same-shape tensors added: a chain of Add, or one Sum (older exporters)."""
    if draw(st.booleans(), label="Sum, not Add"):
        return b.sum(xs)
    y = xs[0]
    for t in xs[1:]:
        y = b.add(y, t)
    return y
