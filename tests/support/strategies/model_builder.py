"""Hypothesis strategies that generate random, valid ONNX CNN models.

``cnn_models()`` draws a small CNN (a chain or a DAG whose branches join again), built by
:class:`ModelBuilder`, which tracks every tensor's shape so each model is valid by construction.
Every builder call is recorded, so a model is fully described by a small JSON-able *spec*
(``{"opset": .., "seed": .., "steps": [...], "outputs": [...]}``) and rebuilt, weights and feeds
included, by :func:`from_spec`. The ``repr`` of a :class:`GeneratedModel` is that call, so a
falsifying example printed by hypothesis can be pasted into an ``@example(...)`` as it is.

Weights and feeds come from a numpy Generator seeded with a drawn seed and are scaled
(~1/sqrt(fan_in)) so activations stay O(1): the Mrvl simulator is float16 (max 65504).
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "OPSET_IR", "GeneratedModel", "ModelBuilder", "from_spec", "cnn_models", "policies",
    "qdq_models", "quantized",
]

#: opset -> IR version written with it (onnxruntime 1.31 refuses IR > 13; onnx 1.23 writes 14).
OPSET_IR = {11: 6, 12: 7, 13: 8, 14: 8, 15: 8, 16: 8, 17: 10, 18: 10, 19: 10, 20: 10, 21: 10}


@dataclass(repr=False)
class GeneratedModel:
    model: onnx.ModelProto
    feeds: Dict[str, np.ndarray]
    description: str
    spec: Optional[dict] = field(default=None)
    #: concrete shapes for inputs with a symbolic batch dim (pass as convert(..., shapes=...))
    shapes: Optional[Dict[str, List[int]]] = field(default=None)

    def __repr__(self) -> str:  # what hypothesis prints for a falsifying example
        if self.spec is not None:
            return f"from_spec({json.dumps(self.spec, separators=(',', ':'))})"
        return f"GeneratedModel(<{self.description!r}>)"

    def __str__(self) -> str:
        return self.description

    def _repr_pretty_(self, p, cycle) -> None:  # hypothesis' pretty printer
        p.text(repr(self))


def _op(fn: Callable) -> Callable:
    """Record a public builder call (JSON-able arguments) so the model can be replayed."""

    @functools.wraps(fn)
    def wrapper(self: "ModelBuilder", *args: Any, **kwargs: Any):
        self.steps.append([fn.__name__, _jsonable(list(args)), _jsonable(dict(kwargs))])
        out = fn(self, *args, **kwargs)
        shown = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
        res = out if isinstance(out, str) else ",".join(out)
        self.lines.append(f"{res} {self.shapes.get(res, '')} = {fn.__name__}({shown})")
        return out

    return wrapper


def _jsonable(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return v


def conv_out(size: int, k: int, s: int, p0: int, p1: int, d: int = 1) -> int:
    return (size + p0 + p1 - d * (k - 1) - 1) // s + 1


def pool_out(size: int, k: int, s: int, p0: int, p1: int, d: int = 1, ceil: bool = False) -> int:
    num = size + p0 + p1 - d * (k - 1) - 1
    if not ceil:
        return num // s + 1
    out = -(-num // s) + 1
    # the last window must start inside the input or the head padding (onnxruntime / PyTorch rule)
    if (out - 1) * s >= size + p0:
        out -= 1
    return out


NAME_STYLES = ("plain", "torch", "tf", "odd")


def _ceil_ambiguous(size: int, k: int, s: int, p0: int, p1: int, d: int = 1) -> bool:
    """onnx shape inference and onnxruntime disagree on ceil_mode when the last window would
    start in the tail padding: such models fail the checker's strict shape inference."""
    num = size + p0 + p1 - d * (k - 1) - 1
    return -(-num // s) + 1 != pool_out(size, k, s, p0, p1, d, True)


class ModelBuilder:
    """Builds an ONNX graph node by node, tracking every tensor's (static) shape.

    Each public method adds one ONNX node (plus its initializers) and returns the output name.
    Tensor and node names are unique and deterministic; weights come from ``self.rng`` in call
    order, so replaying the same calls with the same seed rebuilds the same model.
    """

    def __init__(self, opset: int = 13, seed: int = 0, name: str = "fuzz",
                 const_nodes: bool = False, names: str = "plain") -> None:
        assert names in NAME_STYLES, names
        self.names = names  # naming style of nodes / tensors / inputs / weights
        self.opset = int(opset)
        self.const_nodes = bool(const_nodes)  # weights as Constant nodes, not initializers
        self.seed = int(seed)
        self.name = name
        self.rng = np.random.default_rng(self.seed)
        self.nodes: List[onnx.NodeProto] = []
        self.inits: List[onnx.TensorProto] = []
        self.inputs: List[str] = []
        self.shapes: Dict[str, List[int]] = {}
        self.steps: List[list] = []
        self.lines: List[str] = []
        self.counts: Dict[str, int] = {}
        self.input_scale: Dict[str, float] = {}
        self.batched: List[str] = []
        self.n_tensors = 0

    # ---------------------------------------------------------------- helpers
    def shape(self, t: str) -> List[int]:
        return list(self.shapes[t])

    def _uid(self, prefix: str) -> str:
        """A unique node name for op type ``prefix``."""
        self.counts[prefix] = self.counts.get(prefix, 0) + 1
        k = self.counts[prefix]
        return {"plain": f"{prefix}_{k}", "torch": f"/layers/{prefix.lower()}_{k}/{prefix}",
                "tf": f"model/{prefix.lower()}_{k}/{prefix}",
                "odd": f"nœud {prefix} #{k}"}[self.names]

    def _tensor(self) -> str:
        self.n_tensors += 1
        n = self.n_tensors
        return {"plain": f"t{n}", "torch": f"/layers/t{n}/output_0", "tf": f"model/t{n}:0",
                "odd": f"tenseur {n} é"}[self.names]

    def _const(self, prefix: str, arr: np.ndarray) -> str:
        key = f"{prefix}_c"
        self.counts[key] = self.counts.get(key, 0) + 1
        k = self.counts[key]
        name = {"plain": f"{prefix}_c_{k}", "torch": f"layers.{prefix.lower()}.{k}",
                "tf": f"model/{prefix.lower()}_{k}/ReadVariableOp:0",
                "odd": f"poids {prefix} {k}"}[self.names]
        tensor = numpy_helper.from_array(np.asarray(arr), name)
        if self.const_nodes:
            self.nodes.append(helper.make_node("Constant", [], [name], name=self._uid("Constant"),
                                               value=tensor))
        else:
            self.inits.append(tensor)
        return name

    def _node(self, op: str, inputs: Sequence[str], shape: Sequence[int], **attrs: Any) -> str:
        out = self._tensor()
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=self._uid(op), **attrs))
        self.shapes[out] = [int(s) for s in shape]
        return out

    def _weights(self, shape: Sequence[int], fan_in: int, gain: float = 1.0) -> np.ndarray:
        std = gain / np.sqrt(max(1, fan_in))
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    # ---------------------------------------------------------------- ops
    @_op
    def input(self, shape: Sequence[int], scale: float = 1.0, batched: bool = True) -> str:
        """A graph input; its feed is standard normal times ``scale``. Batched inputs get a
        symbolic batch dim when the model is built with dynamic_batch."""
        i = len(self.inputs)
        name = {"plain": f"in{i}", "torch": f"input.{i + 1}", "tf": f"input_{i + 1}:0",
                "odd": f"entrée {i}"}[self.names]
        self.inputs.append(name)
        self.shapes[name] = [int(s) for s in shape]
        self.input_scale[name] = float(scale)
        if batched:
            self.batched.append(name)
        return name

    @_op
    def conv(self, x: str, out_ch: int, kernel: Sequence[int], strides: Sequence[int] = (1, 1),
             pads: Sequence[int] = (0, 0, 0, 0), dilations: Sequence[int] = (1, 1),
             groups: int = 1, bias: bool = True, auto_pad: str = "NOTSET") -> str:
        """auto_pad SAME_UPPER / SAME_LOWER / VALID replaces pads (then not written)."""
        n, c, h, w = self.shapes[x]
        kh, kw = kernel
        assert c % groups == 0 and out_ch % groups == 0, (c, out_ch, groups)
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            oh, ow = -(-h // strides[0]), -(-w // strides[1])
        else:
            if auto_pad == "VALID":
                pads = (0, 0, 0, 0)
            oh = conv_out(h, kh, strides[0], pads[0], pads[2], dilations[0])
            ow = conv_out(w, kw, strides[1], pads[1], pads[3], dilations[1])
        assert oh >= 1 and ow >= 1, (self.shapes[x], kernel, strides, pads, dilations)
        fan_in = c // groups * kh * kw
        ins = [x, self._const("W", self._weights([out_ch, c // groups, kh, kw], fan_in))]
        if bias:
            ins.append(self._const("B", (self.rng.standard_normal(out_ch) * 0.1).astype(np.float32)))
        attrs: Dict[str, Any] = dict(kernel_shape=list(kernel), strides=list(strides),
                                     dilations=list(dilations), group=int(groups))
        if auto_pad == "NOTSET":
            attrs["pads"] = list(pads)
        else:
            attrs["auto_pad"] = auto_pad
        return self._node("Conv", ins, [n, out_ch, oh, ow], **attrs)

    @_op
    def pad(self, x: str, pads: Sequence[int], mode: str = "constant", value: float = 0.0) -> str:
        """pads in ONNX order for NCHW: [n0, c0, h0, w0, n1, c1, h1, w1]."""
        shp = self.shapes[x]
        out = [s + pads[i] + pads[i + len(shp)] for i, s in enumerate(shp)]
        ins = [x, self._const("pads", np.array(pads, dtype=np.int64))]
        if mode == "constant" and value != 0.0:
            ins.append(self._const("padval", np.array(value, dtype=np.float32)))
        return self._node("Pad", ins, out, mode=mode)

    @_op
    def batchnorm(self, x: str, eps: float = 1e-5) -> str:
        c = self.shapes[x][1]
        r = self.rng
        gamma = r.uniform(0.5, 1.5, c).astype(np.float32)
        beta = (r.standard_normal(c) * 0.2).astype(np.float32)
        mean = (r.standard_normal(c) * 0.2).astype(np.float32)
        var = r.uniform(0.5, 2.0, c).astype(np.float32)
        ins = [x] + [self._const(p, a) for p, a in
                     (("gamma", gamma), ("beta", beta), ("mean", mean), ("var", var))]
        return self._node("BatchNormalization", ins, self.shapes[x], epsilon=float(eps))

    def _pool_shape(self, x, kernel, strides, pads, dilations, ceil_mode):
        n, c, h, w = self.shapes[x]
        for i in range(2):
            assert pads[i] < kernel[i] and pads[i + 2] < kernel[i], (kernel, pads)
        oh = pool_out(h, kernel[0], strides[0], pads[0], pads[2], dilations[0], bool(ceil_mode))
        ow = pool_out(w, kernel[1], strides[1], pads[1], pads[3], dilations[1], bool(ceil_mode))
        assert oh >= 1 and ow >= 1
        return [n, c, oh, ow]

    @_op
    def maxpool(self, x: str, kernel: Sequence[int], strides: Sequence[int] = (1, 1),
                pads: Sequence[int] = (0, 0, 0, 0), dilations: Sequence[int] = (1, 1),
                ceil_mode: int = 0) -> str:
        shp = self._pool_shape(x, kernel, strides, pads, dilations, ceil_mode)
        attrs = dict(kernel_shape=list(kernel), strides=list(strides), pads=list(pads))
        if ceil_mode:
            attrs["ceil_mode"] = 1
        if list(dilations) != [1, 1]:
            attrs["dilations"] = list(dilations)
        return self._node("MaxPool", [x], shp, **attrs)

    @_op
    def avgpool(self, x: str, kernel: Sequence[int], strides: Sequence[int] = (1, 1),
                pads: Sequence[int] = (0, 0, 0, 0), count_include_pad: int = 0,
                ceil_mode: int = 0) -> str:
        shp = self._pool_shape(x, kernel, strides, pads, (1, 1), ceil_mode)
        attrs = dict(kernel_shape=list(kernel), strides=list(strides), pads=list(pads),
                     count_include_pad=int(count_include_pad))
        if ceil_mode:
            attrs["ceil_mode"] = 1
        return self._node("AveragePool", [x], shp, **attrs)

    @_op
    def global_pool(self, x: str, kind: str = "avg") -> str:
        n, c = self.shapes[x][:2]
        op = {"avg": "GlobalAveragePool", "max": "GlobalMaxPool"}[kind]
        return self._node(op, [x], [n, c, 1, 1])

    @_op
    def unary(self, x: str, op: str) -> str:
        """Relu, Sigmoid, Tanh, Abs, Neg, Elu, LeakyRelu, HardSigmoid, Softmax(axis=1)."""
        attrs: Dict[str, Any] = {}
        if op == "LeakyRelu":
            attrs["alpha"] = 0.1
        elif op == "Softmax":
            attrs["axis"] = 1
        return self._node(op, [x], self.shapes[x], **attrs)

    @_op
    def clip(self, x: str, lo: Optional[float] = 0.0, hi: Optional[float] = 6.0) -> str:
        ins = [x, self._const("min", np.array(lo, np.float32)) if lo is not None else ""]
        if hi is not None:
            ins.append(self._const("max", np.array(hi, np.float32)))
        return self._node("Clip", ins, self.shapes[x])

    @_op
    def sum(self, xs: Sequence[str]) -> str:
        """The n-ary Sum older exporters write for residual adds."""
        out = list(np.broadcast_shapes(*(tuple(self.shapes[t]) for t in xs)))
        return self._node("Sum", list(xs), out)

    @_op
    def minmax_const(self, x: str, op: str, value: float, const_first: bool = False) -> str:
        """Max or Min of x and a scalar constant (Max(x, 0) is a Relu, Min(Relu(x), 6) a Relu6)."""
        cname = self._const(op.lower(), np.array(value, np.float32))
        return self._node(op, [cname, x] if const_first else [x, cname], self.shapes[x])

    @_op
    def arith_const(self, x: str, op: str, value: float, cshape: Sequence[int] = ()) -> str:
        """Sub or Div of x by a constant filled with ``value`` (the normalisation exporters
        write: x - mean, x / std)."""
        cname = self._const(op.lower(), np.full(cshape, value, np.float32))
        out = list(np.broadcast_shapes(tuple(self.shapes[x]), tuple(cshape)))
        return self._node(op, [x, cname], out)

    @_op
    def add(self, a: str, b: str) -> str:
        out = list(np.broadcast_shapes(tuple(self.shapes[a]), tuple(self.shapes[b])))
        return self._node("Add", [a, b], out)

    @_op
    def binary_const(self, x: str, op: str, cshape: Sequence[int], const_first: bool = False) -> str:
        """Add/Mul/Sub of x and a constant of shape cshape (numpy-broadcastable to x)."""
        if op == "Mul":
            arr = self.rng.uniform(0.5, 1.5, cshape).astype(np.float32)
        else:
            arr = (self.rng.standard_normal(cshape) * 0.3).astype(np.float32)
        cname = self._const(op.lower(), arr)
        out = list(np.broadcast_shapes(tuple(self.shapes[x]), tuple(cshape)))
        return self._node(op, [cname, x] if const_first else [x, cname], out)

    @_op
    def mul(self, a: str, b: str) -> str:
        out = list(np.broadcast_shapes(tuple(self.shapes[a]), tuple(self.shapes[b])))
        return self._node("Mul", [a, b], out)

    @_op
    def concat(self, xs: Sequence[str], axis: int = 1) -> str:
        shp = self.shapes[xs[0]]
        ax = axis % len(shp)
        out = list(shp)
        out[ax] = sum(self.shapes[t][ax] for t in xs)
        return self._node("Concat", list(xs), out, axis=int(axis))

    @_op
    def resize2x(self, x: str) -> str:
        n, c, h, w = self.shapes[x]
        roi = self._const("roi", np.zeros(0, np.float32)) if self.opset < 13 else ""
        scales = self._const("scales", np.array([1, 1, 2, 2], np.float32))
        return self._node("Resize", [x, roi, scales], [n, c, 2 * h, 2 * w], mode="nearest",
                          coordinate_transformation_mode="asymmetric", nearest_mode="floor")

    @_op
    def transpose(self, x: str, perm: Sequence[int]) -> str:
        shp = self.shapes[x]
        return self._node("Transpose", [x], [shp[p] for p in perm], perm=list(perm))

    @_op
    def flatten(self, x: str, axis: int = 1) -> str:
        shp = self.shapes[x]
        return self._node("Flatten", [x], [int(np.prod(shp[:axis])), int(np.prod(shp[axis:]))],
                          axis=int(axis))

    @_op
    def identity(self, x: str, op: str = "Identity") -> str:
        """Identity, or Dropout in inference mode (both removed by canonicalization)."""
        if op == "Dropout" and self.opset < 12:
            return self._node("Dropout", [x], self.shapes[x], ratio=0.25)
        return self._node(op, [x], self.shapes[x])

    @_op
    def reshape(self, x: str, target: Sequence[int]) -> str:
        """target may hold one -1 and 0s (copy the input dim)."""
        shp = self.shapes[x]
        out = [shp[i] if t == 0 else t for i, t in enumerate(target)]
        if -1 in out:
            known = int(np.prod([d for d in out if d != -1]))
            out[out.index(-1)] = int(np.prod(shp)) // known
        assert int(np.prod(out)) == int(np.prod(shp))
        return self._node("Reshape", [x, self._const("shape", np.array(target, np.int64))], out)

    @_op
    def squeeze(self, x: str, axes: Sequence[int]) -> str:
        shp = self.shapes[x]
        norm = [a % len(shp) for a in axes]
        assert all(shp[a] == 1 for a in norm)
        out = [d for i, d in enumerate(shp) if i not in norm]
        if self.opset >= 13:
            return self._node("Squeeze", [x, self._const("axes", np.array(axes, np.int64))], out)
        return self._node("Squeeze", [x], out, axes=list(axes))

    @_op
    def gemm(self, x: str, out_f: int, trans_b: int = 1, bias: bool = True,
             alpha: float = 1.0, beta: float = 1.0, bias_2d: bool = False) -> str:
        n, f = self.shapes[x]
        wt = self._weights([out_f, f], f)
        ins = [x, self._const("W", wt if trans_b else wt.T.copy())]
        if bias:
            b = (self.rng.standard_normal([1, out_f] if bias_2d else [out_f]) * 0.1).astype(np.float32)
            ins.append(self._const("B", b))
        attrs: Dict[str, Any] = {"transB": int(trans_b)}
        if alpha != 1.0:
            attrs["alpha"] = float(alpha)
        if beta != 1.0:
            attrs["beta"] = float(beta)
        return self._node("Gemm", ins, [n, out_f], **attrs)

    @_op
    def unsqueeze(self, x: str, axes: Sequence[int]) -> str:
        out = list(self.shapes[x])
        for a in sorted(a % (len(out) + len(axes)) for a in axes):
            out.insert(a, 1)
        if self.opset >= 13:
            return self._node("Unsqueeze", [x, self._const("axes", np.array(axes, np.int64))], out)
        return self._node("Unsqueeze", [x], out, axes=list(axes))

    @_op
    def conv_dynamic(self, x: str, w: str) -> str:
        """Conv whose weights are a graph input (so not a constant): 'same' 3x3 or 1x1."""
        n, c, h, wd = self.shapes[x]
        o, ci, kh, kw = self.shapes[w]
        assert ci == c and kh == kw and kh % 2 == 1
        p = kh // 2
        return self._node("Conv", [x, w], [n, o, h, wd], kernel_shape=[kh, kw], pads=[p, p, p, p])

    @_op
    def matmul(self, x: str, out_f: int) -> str:
        """x @ W over the last axis (any rank)."""
        *lead, f = self.shapes[x]
        return self._node("MatMul", [x, self._const("W", self._weights([f, out_f], f))],
                          lead + [out_f])

    # ---------------------------------------------------------------- finish
    def build(self, outputs: Sequence[str], dynamic_batch: Any = False) -> onnx.ModelProto:
        """``dynamic_batch``: True gives batched inputs a symbolic batch dim "N"; "-1" writes
        it as Paddle does, ``dim_value: -1``, on the batched inputs and on every output."""
        batch: Any = -1 if dynamic_batch == "-1" else "N"
        inputs = [helper.make_tensor_value_info(
            i, TensorProto.FLOAT,
            [batch] + self.shapes[i][1:] if dynamic_batch and i in self.batched else self.shapes[i])
            for i in self.inputs]
        outs = [helper.make_tensor_value_info(
            o, TensorProto.FLOAT,
            [-1] + self.shapes[o][1:] if dynamic_batch == "-1" else self.shapes[o])
            for o in outputs]
        graph = helper.make_graph(self.nodes, self.name, inputs, outs, initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  ir_version=OPSET_IR[self.opset], producer_name="hypothesis")
        return model

    def feeds(self) -> Dict[str, np.ndarray]:
        rng = np.random.default_rng(self.seed + 1)
        return {i: (rng.standard_normal(self.shapes[i]) * self.input_scale[i]).astype(np.float32)
                for i in self.inputs}


def from_spec(spec: dict) -> GeneratedModel:
    """Rebuild a model (weights and feeds included) from the spec a generated model carries.

    spec: {"opset", "seed", "steps": [[builder method, args, kwargs], ...], "outputs"} and
    optionally "const_nodes" (weights as Constant nodes), "names" (naming style),
    "dynamic_batch" (True: inputs get a symbolic batch dim "N"; "-1": inputs and outputs get
    Paddle's ``dim_value: -1``; GeneratedModel.shapes fixes it)."""
    b = ModelBuilder(spec["opset"], spec["seed"], const_nodes=spec.get("const_nodes", False),
                     names=spec.get("names", "plain"))
    for method, args, kwargs in spec["steps"]:
        getattr(b, method)(*args, **kwargs)
    gm = _finish(b, spec["outputs"], spec.get("dynamic_batch", False))
    return quantized(gm, **spec["quantize"]) if "quantize" in spec else gm


def _finish(b: ModelBuilder, outputs: Sequence[str], dynamic_batch: Any = False) -> GeneratedModel:
    spec = {"opset": b.opset, "seed": b.seed, "steps": b.steps, "outputs": list(outputs)}
    shapes = None
    if dynamic_batch and b.batched:
        spec["dynamic_batch"] = dynamic_batch
        shapes = {i: b.shape(i) for i in b.batched}
    if b.const_nodes:
        spec["const_nodes"] = True
    if b.names != "plain":
        spec["names"] = b.names
    desc = "\n".join([f"opset {b.opset}, seed {b.seed}, {b.names} names"
                      + (", weights as Constant nodes" if b.const_nodes else "")]
                     + b.lines + [f"outputs: {list(outputs)}"]
                     + ([f"dynamic batch dim {'-1' if dynamic_batch == '-1' else 'N'} on "
                         f"{sorted(shapes)}"] if shapes else []))
    return GeneratedModel(b.build(outputs, dynamic_batch if shapes else False), b.feeds(), desc,
                          spec, shapes)


# ==================================================================== strategies


def policies() -> st.SearchStrategy[str]:
    return st.sampled_from(["single", "multi"])


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


# ==================================================================== QDQ (int8) models

def quantized(gm: GeneratedModel, samples: int = 4, method: str = "minmax") -> GeneratedModel:
    """``gm`` quantized with Marvell's recipe (mrvl_convert.quantize.recipe.quantize_int8) on seeded
    calibration data: ``samples`` random batches per input (seed from the spec), plus the
    model's own feeds so they fall inside the calibrated ranges. The spec records it
    (``"quantize"``), so ``from_spec`` rebuilds the QDQ model."""
    import tempfile
    from pathlib import Path

    from mrvl_convert.quantize.recipe import quantize_int8

    rng = np.random.default_rng(gm.spec["seed"] + 2)
    calibration = {name: np.concatenate([feed] + [
        (rng.standard_normal(feed.shape) * float(np.std(feed) or 1.0)).astype(np.float32)
        for _ in range(samples)]) for name, feed in gm.feeds.items()}
    with tempfile.TemporaryDirectory() as tmp:
        onnx.save(gm.model, str(Path(tmp) / "float.onnx"))
        qdq = quantize_int8(Path(tmp) / "float.onnx", Path(tmp) / "int8.onnx", calibration,
                            method=method)
        model = onnx.load(str(qdq))
    spec = {**gm.spec, "quantize": {"samples": samples, "method": method}}
    return GeneratedModel(model, gm.feeds, f"{gm.description}\nquantized: int8 QDQ, "
                          f"{method}, {samples} seeded calibration batches", spec)


@st.composite
def qdq_models(draw, max_blocks: int = 4) -> GeneratedModel:
    """Random CNNs (``cnn_models`` without CPU-only ops, extra inputs or a dynamic batch,
    opset 13+) quantized by ``quantized``: QDQ models as Marvell's recipe writes them."""
    gm = draw(cnn_models(max_blocks=max_blocks, opsets=(13, 17), multi_io=False,
                         cpu_ops=False).filter(lambda g: g.shapes is None))
    from hypothesis import assume

    from mrvl_convert import MrvlConvertError

    method = draw(st.sampled_from(["minmax", "minmax", "percentile"]), label="calibration")
    try:
        return quantized(gm, samples=draw(st.integers(1, 4), label="calibration batches"),
                         method=method)
    except MrvlConvertError:  # quantize_static refuses it (e.g. percentile, nothing to quantize)
        assume(False)
        raise
