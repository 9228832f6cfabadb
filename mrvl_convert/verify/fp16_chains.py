"""Two fp16 layers' source nodes as the artifact computes them, for verify's rounded reference
(``kept_fp16.py``): a composite lowered to a chain of layers, each rounded to fp16, where the
model writes one formula.

- ``mrvl.sqrt_div`` (a decomposed LayerNorm's ``d / sqrt(v)``): Rsqrt then Mul2D
  (``layers/layer_norm.py``): ``fp16(d * fp16(1 / sqrt(v)))``, not ``fp16(d / sqrt(v))``.
- ``mrvl.gelu_erf`` (``0.5 * x * (1 + erf(x / sqrt 2))``, its 0.5 inside the composite): the
  tanh approximation as five layers (``layers/gelu.py``): ``s = fp16(x * x)``, ``s = fp16(s *
  fp16(2 c k))``, ``s = fp16(s + fp16(2 k))``, ``g = fp16(sigmoid(x * s))``, ``y = x * g``
  (rounded as the group's result), ``k = sqrt(2/pi)``, ``c = 0.044715``; with the model's
  ``h = 0.5 * x`` a layer of its own before the gate, ``g = fp16(sigmoid(h * s))`` and ``s``
  by ``4 c k`` and ``4 k``. ``mrvl.gelu_tanh_form`` (its ``x**3`` a Pow) is the same chain.
- ``mrvl.layer_norm`` (the opset-17 LayerNormalization op over the last axis): nine layers
  (``layers/layer_norm.py``): ReduceMean, Sub, Mul2D(d, d), ReduceMean, Sum2D(+fp16(eps)),
  Rsqrt, Mul2D(d, r), Mul2D(gamma) unless all ones, Sum2D(beta) unless absent or zeros.
- ``mrvl.elu`` (no exponential layer): ten layers (``layers/_elu.py``): ``r = Relu(x)``, ``m =
  x - r``, ``t = tanh(m * 0.5)``, ``d = -t + 1``, ``q = d ** -1``, ``y = r + (t q) fp16(2
  alpha)``, each rounded.

- ``ReduceMean`` over an image's channels (a LayerNorm's mean, written over axis 1 of NCHW): the
  layer reduces the last axis of NHWC (``layers/reduce.py``), and onnxruntime sums a contiguous
  axis in another order than a strided one: a float32 sum one step apart lands on the
  neighbouring fp16 value now and then (LEADER's fp16 LayerNorms: 26 of 65536 means, each then
  one int8 step after the LayerNorm, and its atan2 head turned that into a FAIL). The reference
  reduces the same NHWC tensor the same way (as rows of channels, ``mean_as_laid_out``): as
  the graph engine runs the layer (verify's default); the layer-by-layer engine's ``np.mean``
  sums in numpy's order and can still be a neighbour on a near-tie (3 of those 65536).

In an int8 model those layers sit between int8 layers: a reference that computed the formula
in float32 would differ from the artifact by fp16 roundings and by the approximation, and each
such difference near a quantization boundary is an int8 step after it.

Contract. Requires: a group's nodes with their inputs and result already rounded
(``kept_fp16._round_group``). Ensures: the group's nodes replaced by the chain (their result's
name kept); any other group unchanged.
"""
from __future__ import annotations

import math
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

_K = math.sqrt(2.0 / math.pi)
_C = 0.044715
_SUFFIX = "__as_written"


def chains_as_written(graph: onnx.GraphProto, members: List[onnx.NodeProto],
                      cast_pair: Callable[[onnx.GraphProto, str, str], str],
                      opset: int = 17) -> None:
    """Rewrite ``members`` (one fp16 layer's nodes) as the chain the artifact computes, where
    it is one of those in the module docstring (``opset``: the model's, for ReduceMean)."""
    ops = sorted(n.op_type for n in members)
    if ops == ["LayerNormalization"]:
        _layer_norm(graph, members[0], cast_pair, opset)
    elif ops == ["Div", "Sqrt"]:
        _rsqrt(graph, members, cast_pair)
    elif ops == ["Elu"]:
        _elu(graph, members[0], cast_pair)
    elif ops == ["Add", "Div", "Erf", "Mul", "Mul"] or ops == ["Add", "Erf", "Mul", "Mul", "Mul"]:
        _gelu(graph, members, cast_pair)
    elif ops == ["Add", "Div", "Erf", "Mul"] or ops == ["Add", "Erf", "Mul", "Mul"]:
        _gelu(graph, members, cast_pair)  # its 0.5 * x a layer of its own, before the gate
    elif ops[:2] == ["Add", "Add"] and ops[-2:] == ["Pow", "Tanh"] and ops.count("Mul") in (3, 4):
        _gelu(graph, members, cast_pair)  # mrvl.gelu_tanh_form, x**3 as Pow: the same chain


def mean_as_laid_out(graph: onnx.GraphProto, node: onnx.NodeProto,
                     shape: Sequence[int]) -> bool:
    """The rounded ReduceMean ``node`` (axes as an opset < 18 attribute) over the channels of
    an image the layer holds as NHWC ``shape`` reduced as the layer reduces it (module
    docstring), in place; whether it was. The channels are made the last axis of a 2-D
    tensor: a Transpose straight before the ReduceMean, onnxruntime's transpose optimizer would
    fold back into the strided reduction."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if len(node.input) > 1 or [a % 4 for a in attrs.get("axes", [])] != [1]:
        return False
    n, h, w, c = shape
    keep = bool(attrs.get("keepdims", 1))
    base = node.name + _SUFFIX
    graph.initializer.extend([
        numpy_helper.from_array(np.array([-1, c], np.int64), base + "_rows"),
        numpy_helper.from_array(np.array([n, 1, h, w] if keep else [n, h, w], np.int64),
                                base + "_shape")])
    graph.node.extend([
        helper.make_node("Transpose", [node.input[0]], [base + "_nhwc"], name=base + "_nhwc",
                         perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", [base + "_nhwc", base + "_rows"], [base + "_flat"],
                         name=base + "_flat"),
        helper.make_node("Reshape", [base + "_mean", base + "_shape"], [node.output[0]],
                         name=base + "_back")])
    node.input[0], node.output[0] = base + "_flat", base + "_mean"
    del node.attribute[:]
    node.attribute.extend([helper.make_attribute("axes", [1]),
                           helper.make_attribute("keepdims", 1)])
    return True


def _rsqrt(graph: onnx.GraphProto, members: List[onnx.NodeProto], cast_pair) -> None:
    sqrt = next(n for n in members if n.op_type == "Sqrt")
    div = next(n for n in members if n.op_type == "Div")
    if div.input[1] != sqrt.output[0]:
        return
    recip = sqrt.name + _SUFFIX
    graph.node.append(helper.make_node("Reciprocal", [sqrt.output[0]], [recip], name=recip))
    div.op_type = "Mul"
    div.input[1] = cast_pair(graph, recip, recip + "16")


def _gelu(graph: onnx.GraphProto, members: List[onnx.NodeProto], cast_pair) -> None:
    inside = {o for n in members for o in n.output}
    x, key = _gelu_x(members)
    last = [n for n in members if not any(n.output[0] in m.input for m in members)]
    if x is None or len(last) != 1 or x in inside:
        return
    y, base = last[0].output[0], key.name + _SUFFIX
    # the model's own x / 2 (a layer of its own, one node fewer) feeds the sigmoid's product,
    # s doubled
    own_half = len(members) == (4 if key.op_type == "Erf" else 7)
    half = [i for i in last[0].input if i not in inside] if own_half else [None]
    if len(half) != 1 or half[0] == x:
        return
    factor = 2.0 if half[0] is None else 4.0
    consts = [f"{base}_cubic", f"{base}_linear"]
    graph.initializer.extend(
        numpy_helper.from_array(np.array(np.float16(v), np.float32), name)
        for name, v in zip(consts, (factor * _C * _K, factor * _K)))
    names = [f"{base}_{k}" for k in range(5)]
    square = cast_pair(graph, names[0], names[0] + "16")
    scaled = cast_pair(graph, names[1], names[1] + "16")
    summed = cast_pair(graph, names[2], names[2] + "16")
    gate = cast_pair(graph, names[4], names[4] + "16")
    steps = [helper.make_node("Mul", [x, x], [names[0]], name=names[0]),
             helper.make_node("Mul", [square, consts[0]], [names[1]], name=names[1]),
             helper.make_node("Add", [scaled, consts[1]], [names[2]], name=names[2]),
             helper.make_node("Mul", [half[0] or x, summed], [names[3]], name=names[3]),
             helper.make_node("Sigmoid", [names[3]], [names[4]], name=names[4] + "_sigmoid"),
             helper.make_node("Mul", [x, gate], [y], name=names[4] + "_gate")]
    for node in members:
        graph.node.remove(node)
    graph.node.extend(steps)


def _gelu_x(members: List[onnx.NodeProto]) -> Tuple[Optional[str], onnx.NodeProto]:
    """A GELU's x and the node its chain is named after: the input the Erf's scaling reads,
    or the one the Pow cubes (the tanh form)."""
    erf = next((n for n in members if n.op_type == "Erf"), None)
    if erf is None:
        cube = next(n for n in members if n.op_type == "Pow")
        return cube.input[0], cube
    scale = next((n for n in members if erf.input[0] in n.output), None)
    return (None if scale is None else scale.input[0]), erf


def _layer_norm(graph: onnx.GraphProto, node: onnx.NodeProto, cast_pair, opset: int) -> None:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if attrs.get("axis", -1) != -1 or len(node.output) > 1 and any(node.output[1:]):
        return
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer
             if t.name in node.input[1:]}
    base = node.name + _SUFFIX
    eps = f"{base}_eps"
    graph.initializer.append(numpy_helper.from_array(
        np.array(np.float16(attrs.get("epsilon", 1e-5)), np.float32), eps))
    steps: List[onnx.NodeProto] = []

    def step(op: str, inputs: List[str], last: bool = False, rounded: bool = True) -> str:
        name = f"{base}_{len(steps)}"
        kwargs = {}
        if op == "ReduceMean" and opset < 18:
            kwargs = {"axes": [-1], "keepdims": 1}
        elif op == "ReduceMean":
            axes = f"{base}_axes"
            if axes not in {t.name for t in graph.initializer}:
                graph.initializer.append(numpy_helper.from_array(np.array([-1], np.int64), axes))
            inputs = inputs + [axes]
        steps.append(helper.make_node(op, inputs, [node.output[0] if last else name],
                                      name=name, **kwargs))
        if last or not rounded:
            return steps[-1].output[0]
        return cast_pair(graph, name, name + "16")

    gamma = node.input[1]
    beta = node.input[2] if len(node.input) > 2 and node.input[2] else ""
    scaled = gamma in inits and not np.all(inits[gamma] == 1)
    shifted = bool(beta) and not (beta in inits and not np.any(inits[beta]))
    x = node.input[0]
    d = step("Sub", [x, step("ReduceMean", [x])])
    v = step("Add", [step("ReduceMean", [step("Mul", [d, d])]), eps])
    r = step("Reciprocal", [step("Sqrt", [v], rounded=False)])  # Rsqrt: one rounding
    n = step("Mul", [d, r], last=not (scaled or shifted))
    if scaled:
        n = step("Mul", [n, gamma], last=not shifted)
    if shifted:
        step("Add", [n, beta], last=True)
    graph.node.remove(node)
    graph.node.extend(steps)


def _elu(graph: onnx.GraphProto, node: onnx.NodeProto, cast_pair) -> None:
    alpha = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "alpha"),
                 1.0)
    base = node.name + _SUFFIX
    consts = {"half": 0.5, "minus": -1.0, "one": 1.0, "power": -1.0,
              "alpha2": float(np.float16(2.0 * np.float32(alpha)))}
    graph.initializer.extend(numpy_helper.from_array(np.array(v, np.float32), f"{base}_{k}")
                             for k, v in consts.items())
    steps: List[onnx.NodeProto] = []

    def step(op: str, inputs: List[str], last: bool = False) -> str:
        name = f"{base}_{len(steps)}"
        steps.append(helper.make_node(op, inputs, [node.output[0] if last else name], name=name))
        return steps[-1].output[0] if last else cast_pair(graph, name, name + "16")

    x = node.input[0]
    r = step("Relu", [x])
    t = step("Tanh", [step("Mul", [step("Sub", [x, r]), f"{base}_half"])])
    d = step("Add", [step("Mul", [t, f"{base}_minus"]), f"{base}_one"])
    q = step("Pow", [d, f"{base}_power"])
    s = step("Mul", [step("Mul", [t, q]), f"{base}_alpha2"])
    step("Add", [r, s], last=True)
    graph.node.remove(node)
    graph.node.extend(steps)
