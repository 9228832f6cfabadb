"""``ModelBuilder``: an ONNX graph built node by node, every tensor's shape tracked, so each model
is valid by construction; every public call is recorded (``steps``, JSON-able) so ``from_spec``
(support/strategies/generated.py) replays it. Weights and feeds come from a Generator seeded with
the spec's seed, scaled (~1/sqrt(fan_in)) so activations stay O(1) in float16 (max 65504)."""
from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from support.strategies.geometry import conv_out, pool_out

#: opset -> IR version written with it (onnxruntime 1.31 refuses IR > 13; onnx 1.23 writes 14).
OPSET_IR = {11: 6, 12: 7, 13: 8, 14: 8, 15: 8, 16: 8, 17: 10, 18: 10, 19: 10, 20: 10, 21: 10}

NAME_STYLES = ("plain", "torch", "tf", "odd")


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
