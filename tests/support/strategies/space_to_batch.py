"""TensorFlow's atrous Conv as tf2onnx writes it: SpaceToBatchND -> Conv -> BatchToSpaceND.

``atrous_model(spec)`` builds one from a plain dict (``SPEC`` holds the defaults):
NHWC input ``x [n, h, w, c]``, TF's own pads (``SAME``: ``(k - 1) b`` split as TF splits it, plus
what makes the padded size a multiple of the block, cropped again at the end), then one of
tf2onnx's spellings of the two data movements:

- ``form="s2d"`` (tf2onnx for a 4-D input and a square block, LEADER's): Pad, Transpose
  ``[3, 0, 1, 2]``, SpaceToDepth, Transpose ``[1, 0, 2, 3]``, Conv, Transpose ``[1, 0, 2, 3]``,
  DepthToSpace, Slice of the crop, the per-channel ops on ``[o, n, H, W]`` (``detour``: the
  first batch swap through rank 5, Unsqueeze/Transpose/Squeeze, as LEADER's raw graph has it);
- ``form="reshape"`` (its generic one, any block ``bh x bw``): Pad, Reshape to rank 6,
  Transpose, Reshape, Transpose to NCHW, Conv, Transpose to NHWC, Reshape to rank 6, Transpose,
  Reshape, Slice, the per-channel ops on NHWC.

``post`` lists the per-channel ops (``bias``, ``bn`` as Mul/Add, ``relu``); ``post_before``
puts them between the Conv and the BatchToSpace instead; ``gelu`` adds a tanh GELU after them
that reads its input three times (so the BatchToSpace's layout stays around it: ``[o, 1, H, W]``
in the first form, as in LEADER). The output is NHWC (``out="nhwc"``) or
NCHW (``"nchw"``, LEADER's next layers). ``spaced_convs()`` draws specs.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

SPEC = {"seed": 0, "n": 1, "h": 13, "w": 11, "c": 3, "o": 4, "group": 1, "block": (2, 2),
        "kernel": 3, "padding": "SAME", "form": "s2d", "detour": False,
        "post": ["bias", "bn", "relu"], "post_before": False, "out": "nhwc", "gelu": False}
U = 2.0 ** -24


def tf_pads(size: int, block: int, kernel: int, padding: str) -> Tuple[int, int, int]:
    """TF's SpaceToBatch pads (start, end) and BatchToSpace crop at the end."""
    total = (kernel - 1) * block if padding == "SAME" else 0
    start = total // 2
    extra = -(size + total) % block
    return start, total - start + extra, extra


class _Graph:
    def __init__(self) -> None:
        self.nodes: List[onnx.NodeProto] = []
        self.inits: List[onnx.TensorProto] = []

    def const(self, name: str, value) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op: str, inputs: List[str], name: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name


def atrous_model(spec: Dict) -> Tuple[onnx.ModelProto, Dict[str, np.ndarray]]:
    """The model and a feed for it (see the module)."""
    s = {**SPEC, **spec}
    rng = np.random.default_rng(s["seed"])
    (bh, bw), k, n, c, o = s["block"], s["kernel"], s["n"], s["c"], s["o"]
    (ph0, ph1, crop_h), (pw0, pw1, crop_w) = (tf_pads(s[a], b, k, s["padding"])
                                             for a, b in (("h", bh), ("w", bw)))
    hp, wp = (s["h"] + ph0 + ph1) // bh, (s["w"] + pw0 + pw1) // bw
    g = _Graph()
    t = g.op("Pad", ["x", g.const("pads", np.array([0, ph0, pw0, 0, 0, ph1, pw1, 0], np.int64))],
             "s2b_pad")
    group = s["group"]
    weight = (rng.standard_normal((o, c // group, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    if s["form"] == "s2d":
        t = g.op("Transpose", [t], "s2b_cnhw", perm=[3, 0, 1, 2])
        t = g.op("SpaceToDepth", [t], "s2b_s2d", blocksize=bh)
        if s["detour"]:  # the batch swap through rank 5 (tf2onnx's Unsqueeze/Squeeze)
            t = g.op("Unsqueeze", [t, g.const("ax0", np.array([0], np.int64))], "s2b_unsq")
            t = g.op("Transpose", [t], "s2b_batch", perm=[0, 2, 1, 3, 4])
            t = g.op("Squeeze", [t, "ax0"], "s2b_sq")
        else:
            t = g.op("Transpose", [t], "s2b_batch", perm=[1, 0, 2, 3])
        t = g.op("Conv", [t, g.const("w", weight)], "atrous_conv", group=group)
    else:
        t = g.op("Reshape", [t, g.const("r1", np.array([n, hp, bh, wp, bw, c], np.int64))],
                 "s2b_r1")
        t = g.op("Transpose", [t], "s2b_t1", perm=[2, 4, 0, 1, 3, 5])
        t = g.op("Reshape", [t, g.const("r2", np.array([bh * bw * n, hp, wp, c], np.int64))],
                 "s2b_r2")
        t = g.op("Transpose", [t], "s2b_nchw", perm=[0, 3, 1, 2])
        t = g.op("Conv", [t, g.const("w", weight)], "atrous_conv", group=group)
    ho, wo = hp - k + 1, wp - k + 1
    if s["post_before"]:  # on the Conv's own output [n b b, o, h, w]
        t = _post(g, t, s["post"], rng, [1, o, 1, 1])
    if s["form"] == "s2d":
        t = g.op("Transpose", [t], "b2s_onhw", perm=[1, 0, 2, 3])
        t = g.op("DepthToSpace", [t], "b2s_d2s", blocksize=bh)
        t = g.op("Slice", [t, g.const("crop_s", np.array([0, 0], np.int64)),
                           g.const("crop_e", np.array([ho * bh - crop_h, wo * bw - crop_w],
                                                      np.int64)),
                           g.const("crop_a", np.array([2, 3], np.int64))], "b2s_crop")
    else:
        t = g.op("Transpose", [t], "b2s_nhwc", perm=[0, 2, 3, 1])
        t = g.op("Reshape", [t, g.const("r3", np.array([bh, bw, n, ho, wo, o], np.int64))],
                 "b2s_r1")
        t = g.op("Transpose", [t], "b2s_t1", perm=[2, 3, 0, 4, 1, 5])
        t = g.op("Reshape", [t, g.const("r4", np.array([n, ho * bh, wo * bw, o], np.int64))],
                 "b2s_r2")
        t = g.op("Slice", [t, g.const("crop_s", np.array([0, 0], np.int64)),
                           g.const("crop_e", np.array([ho * bh - crop_h, wo * bw - crop_w],
                                                      np.int64)),
                           g.const("crop_a", np.array([1, 2], np.int64))], "b2s_crop")
    if not s["post_before"]:
        t = _post(g, t, s["post"], rng, [o, 1, 1, 1] if s["form"] == "s2d" else [o])
    if s["gelu"]:  # tanh GELU reading the result three times (LEADER's attention convs)
        t = _gelu(g, t)
    perm = {("s2d", "nhwc"): [1, 2, 3, 0], ("s2d", "nchw"): [1, 0, 2, 3],
            ("reshape", "nhwc"): None, ("reshape", "nchw"): [0, 3, 1, 2]}[s["form"], s["out"]]
    g.nodes.append(helper.make_node("Transpose" if perm else "Identity", [t], ["y"],
                                    name="to_out", **({"perm": perm} if perm else {})))
    out_h, out_w = ho * bh - crop_h, wo * bw - crop_w
    y_shape = [n, out_h, out_w, o] if s["out"] == "nhwc" else [n, o, out_h, out_w]
    graph = helper.make_graph(
        g.nodes, "atrous", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                          [n, s["h"], s["w"], c])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    x = rng.standard_normal((n, s["h"], s["w"], c)).astype(np.float32)
    return model, {"x": x}


def _post(g: _Graph, t: str, ops: List[str], rng: np.random.Generator, shape: List[int]) -> str:
    for op in ops:
        if op == "bias":
            t = g.op("Add", [t, g.const("bias", rng.standard_normal(shape).astype(np.float32))],
                     "bias_add")
        elif op == "bn":
            scale = rng.uniform(0.5, 1.5, shape).astype(np.float32)
            t = g.op("Mul", [t, g.const("bn_scale", scale)], "bn_mul")
            t = g.op("Add", [t, g.const("bn_shift", rng.standard_normal(shape).astype(
                np.float32))], "bn_add")
        else:
            t = g.op("Relu", [t], "relu")
    return t


def _gelu(g: _Graph, t: str) -> str:
    half = g.op("Mul", [t, g.const("gelu_half", np.array(0.5, np.float32))], "gelu_half_x")
    cube = g.op("Pow", [t, g.const("gelu_three", np.array(3.0, np.float32))], "gelu_cube")
    cube = g.op("Mul", [cube, g.const("gelu_c", np.array(0.044715, np.float32))], "gelu_cube_c")
    inner = g.op("Add", [t, cube], "gelu_inner")
    inner = g.op("Mul", [inner, g.const("gelu_s", np.array(0.7978846, np.float32))], "gelu_scaled")
    tanh = g.op("Tanh", [inner], "gelu_tanh")
    tanh = g.op("Add", [tanh, g.const("gelu_one", np.array(1.0, np.float32))], "gelu_one_plus")
    return g.op("Mul", [half, tanh], "gelu")


def rewrite_bound(model: onnx.ModelProto, x: np.ndarray, reference: np.ndarray) -> float:
    """The module's bound for these outputs: ``2 n u sum |x w|`` of the Conv (n = C kh kw,
    ``sum |x w|`` at most max |x| times an output channel's sum |w|), times the largest
    BatchNormalization scale after it (and GELU's slope), plus one rounding (u |y|) for each
    per-element op."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    weight = np.abs(inits["w"])
    conv = 2 * weight[0].size * U * float(np.abs(x).max()) * float(
        weight.reshape(len(weight), -1).sum(axis=1).max())
    scale = float(np.abs(inits["bn_scale"]).max()) if "bn_scale" in inits else 1.0
    scale *= 1.13 if "gelu_half" in inits else 1.0  # max |GELU'|, 1.129
    posts = sum(n.op_type in ("Add", "Mul", "Relu", "Pow", "Tanh") for n in model.graph.node)
    return conv * scale + posts * U * float(np.abs(reference).max())


@st.composite
def spaced_convs(draw) -> Dict:
    """A spec for ``atrous_model``: any block 1..4 (1 x 1 is no space-to-batch: left alone),
    kernel 1..5, SAME or VALID, odd sizes, either form, plain or depthwise, per-channel ops
    before or after."""
    form = draw(st.sampled_from(["s2d", "reshape"]))
    bh = draw(st.integers(1, 4))
    bw = bh if form == "s2d" else draw(st.integers(1, 4))
    kernel = draw(st.integers(1, 5))
    padding = draw(st.sampled_from(["SAME", "VALID"]))
    low = 1 + (kernel - 1) * max(bh, bw) if padding == "VALID" else 1
    c = draw(st.integers(1, 4))
    depthwise = draw(st.booleans())
    return {"seed": draw(st.integers(0, 2 ** 16)), "n": draw(st.integers(1, 2)),
            "h": draw(st.integers(low, low + 9)), "w": draw(st.integers(low, low + 9)),
            "c": c, "o": c if depthwise else draw(st.integers(1, 4)),
            "group": c if depthwise else 1, "block": (bh, bw),
            "kernel": kernel, "padding": padding, "form": form, "detour": draw(st.booleans()),
            "post": draw(st.lists(st.sampled_from(["bias", "bn", "relu"]), max_size=3,
                                  unique=True)),
            "post_before": draw(st.booleans()), "out": draw(st.sampled_from(["nhwc", "nchw"])),
            "gelu": draw(st.booleans())}
