"""Random transformer blocks for the pipeline properties: rank-3 token tensors [1, T, C],
attention with 1-4 heads, LayerNorm as the op or decomposed, GELU in its Erf and tanh forms or
as the Gelu op, residuals or none, pre- or post-norm, shape arithmetic constant or as exporters
write it (Shape -> Gather -> Unsqueeze -> Concat), tokens given or made by a patch-embedding Conv,
0-2 constant class tokens prepended (ViT, DeiT), every token or token 0 alone as the output;
the dynamo exporter's spellings (``sym_size_int`` as Shape(start, end) -> Squeeze, position ids
from Range over it, weight-only int8 ``Cast -> Mul`` linear weights).
Issue 38's exporter spellings: flax's LayerNorm as jax2tf writes it (``ln="flax"``: the
variance as ``E[x^2] - E[x]^2``, the mean ``Expand``-ed to the token shape before its Sub),
jax2tf's one-hot of int ids (``embed="onehot"``: ``Equal`` against a constant range, ``Cast``,
a Dense), and a tail on the time axis of ``[1, C, T]`` (``tail``: ``ReduceSum``,
``ReduceMax``, ``GlobalMaxPool``, or torch's ``BatchNorm1d`` between two Transposes) or a
BatchNorm1d on the patch stem's ``[1, C, L]`` before the token Transpose (``stem_bn``).

``transformer_models()`` draws a spec (a flat JSON-able dict); ``transformer_from_spec(spec)``
builds the model and feeds from it alone, so a falsifying example hypothesis prints
(``TransformerModel`` prints as that call) can be pasted into an ``@example`` as it is.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np
import onnx
from hypothesis import strategies as st

from support.corpus_transformer import Tokens
from support.strategies.generated import GeneratedModel
from support.strategies.model_builder import OPSET_IR

LN_FORMS = ("op", "decomposed", "flax", "none")
GELU_FORMS = ("erf", "tanh", "op", "relu")
TAILS = ("none", "none", "reduce_sum", "reduce_max", "global_max", "bn1d")
VOCAB = 32        # one-hot ids in [0, VOCAB)
ONEHOT = "onehot"  # the name prefix of the one-hot edge's nodes (int ops, CPU like a Gather)


class TransformerModel(GeneratedModel):
    rebuilt_by = "transformer_from_spec"


class _Block(Tokens):
    """``Tokens`` with the forms a spec picks: the opset's ReduceMean, GELU in three forms,
    constant or run-time reshape targets."""

    def __init__(self, spec: dict) -> None:
        super().__init__(spec["seed"], opset=spec["opset"])
        self.spec = spec
        self.sizes: Dict[int, int] = {}   # axis -> size, for constant reshape targets

    def mean_last(self, x: str, group: str) -> str:
        if self.spec["opset"] >= 18:   # axes became an input in opset 18
            return self.part(group, "ReduceMean", [x, self.const(np.array([-1], np.int64))],
                             keepdims=1)
        return self.part(group, "ReduceMean", [x], axes=[-1], keepdims=1)

    def layer_norm(self, x: str, channels: int, form: str = "decomposed") -> str:
        form = self.spec["ln"]
        if form == "none":
            return x
        if form == "op":
            return super().layer_norm(x, channels, "op")
        if form == "flax":
            return self.flax_layer_norm(x, channels)
        gamma = self.const((1 + 0.1 * self.rng.standard_normal(channels)).astype(np.float32))
        centred = self.part("ln", "Sub", [x, self.mean_last(x, "ln")])
        squared = self.part("ln", "Pow", [centred, self.scalar(2.0)])
        std = self.part("ln", "Sqrt", [self.part("ln", "Add", [self.mean_last(squared, "ln"),
                                                                self.scalar(1e-5)])])
        y = self.part("ln", "Mul", [self.part("ln", "Div", [centred, std]), gamma])
        return self.part("ln", "Add", [y, self.weight(channels, scale=0.1)])

    def flax_layer_norm(self, x: str, channels: int) -> str:
        """flax.linen.LayerNorm through jax2tf: var = E[x*x] - E[x]*E[x], and the mean broadcast
        to x's constant shape (Expand) before the Sub."""
        mean = self.mean_last(x, "ln")
        square_mean = self.mean_last(self.part("ln", "Mul", [x, x]), "ln")
        var = self.part("ln", "Sub", [square_mean, self.part("ln", "Mul", [mean, mean])])
        shape = self.const(np.array([1, self.sizes[1], channels], np.int64))
        centred = self.part("ln", "Sub", [x, self.part("ln", "Expand", [mean, shape])])
        std = self.part("ln", "Sqrt", [self.part("ln", "Add", [var, self.scalar(1e-6)])])
        gamma = self.const((1 + 0.1 * self.rng.standard_normal(channels)).astype(np.float32))
        y = self.part("ln", "Mul", [self.part("ln", "Div", [centred, std]), gamma])
        return self.part("ln", "Add", [y, self.weight(channels, scale=0.1)])

    def reduce_last(self, op: str, x: str, keepdims: int) -> str:
        """ReduceSum / ReduceMax over the last axis: axes an input from opset 13 (ReduceSum)
        or 18 (ReduceMax), an attribute before."""
        if op == "ReduceSum" or self.spec["opset"] >= 18:
            return self.op(op, [x, self.const(np.array([-1], np.int64))], keepdims=keepdims)
        return self.op(op, [x], axes=[-1], keepdims=keepdims)

    def batch_norm_1d(self, x: str, channels: int) -> str:
        """torch.nn.BatchNorm1d (inference) on [N, C, L]."""
        rng = self.rng
        return self.op("BatchNormalization", [
            x, self.const((1 + 0.1 * rng.standard_normal(channels)).astype(np.float32)),
            self.const((0.1 * rng.standard_normal(channels)).astype(np.float32)),
            self.const((0.1 * rng.standard_normal(channels)).astype(np.float32)),
            self.const((0.5 + rng.random(channels)).astype(np.float32))], epsilon=1e-5)

    def one_hot_embed(self, ids: str, channels: int) -> str:
        """jax.nn.one_hot(ids, VOCAB) @ table as jax2tf writes it: Unsqueeze the int ids, Equal
        against a constant range, Cast to float, a Dense without bias."""
        column = self.op("Unsqueeze", [ids, self.const(np.array([-1], np.int64))],
                         name=f"{ONEHOT}_unsqueeze")
        hot = self.op("Equal", [column, self.const(np.arange(VOCAB, dtype=np.int32))],
                      name=f"{ONEHOT}_equal")
        hot = self.op("Cast", [hot], name=f"{ONEHOT}_cast", to=onnx.TensorProto.FLOAT)
        return self.op("MatMul", [hot, self.weight(VOCAB, channels, scale=1.0)])

    def gelu(self, x: str) -> str:
        form = self.spec["gelu"]
        if form == "erf":
            return super().gelu(x)
        if form == "op":
            return self.part("gelu", "Gelu", [x])
        if form == "relu":
            return self.op("Relu", [x])
        # tanh form: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
        cube = self.part("gelu", "Pow", [x, self.scalar(3.0)])
        inner = self.part("gelu", "Add", [x, self.part("gelu", "Mul", [cube,
                                                                       self.scalar(0.044715)])])
        t = self.part("gelu", "Tanh", [self.part("gelu", "Mul", [inner, self.scalar(
            float(np.sqrt(2 / np.pi)))])])
        y = self.part("gelu", "Mul", [x, self.part("gelu", "Add", [t, self.scalar(1.0)])])
        return self.part("gelu", "Mul", [y, self.scalar(0.5)])

    def linear(self, x: str, fin: int, fout: int) -> str:
        """With ``int8_weights``: the weight weight-only int8 per output channel, as torch.ao
        exports it (``Cast(int8) -> Mul(scale)``)."""
        if not self.spec.get("int8_weights"):
            return super().linear(x, fin, fout)
        w = (self.rng.standard_normal((fin, fout)) * fin ** -0.5).astype(np.float32)
        scale = (np.abs(w).max(axis=0) / 127 + 1e-8).astype(np.float32)
        q = self.const(np.clip(np.round(w / scale), -127, 127).astype(np.int8))
        w = self.op("Mul", [self.op("Cast", [q], to=onnx.TensorProto.FLOAT), self.const(scale)])
        return self.op("Add", [self.weight(fout, scale=0.05), self.op("MatMul", [x, w])])

    def positions(self, x: str, tokens: int, channels: int) -> str:
        """``x + pos_embed[torch.arange(x.shape[1])]`` as the dynamo exporter writes it:
        ``node_arange`` = Range(0, sym_size_int, 1) -> Gather of the table."""
        table = self.weight(tokens + 3, channels, scale=0.1)
        count = self.dim(x, 1)
        count = count if isinstance(count, str) else self.const(np.array(count, np.int64))
        steps = self.op("Range", [self.const(np.array(0, np.int64)), count,
                                  self.const(np.array(1, np.int64))])
        return self.op("Add", [x, self.op("Gather", [table, steps], axis=0)])

    def reshape(self, tensor: str, parts: Sequence) -> str:
        if self.spec["shape_arithmetic"]:
            return super().reshape(tensor, parts)
        return self.op("Reshape", [tensor, self.const(np.array(list(parts), np.int64))])

    def dim(self, tensor: str, axis: int):
        """A run-time dim (exporter form) or, without shape arithmetic, the constant one."""
        if self.spec["shape_arithmetic"] and self.spec.get("dynamo"):   # sym_size_int
            shape = self.op("Shape", [tensor], start=axis, end=axis + 1)
            return self.op("Squeeze", [shape, self.const(np.array([0], np.int64))])
        if self.spec["shape_arithmetic"]:
            return super().dim(tensor, axis)
        return 1 if axis == 0 else self.sizes[axis]

    def class_tokens(self, x: str, count: int, channels: int) -> str:
        """torch.cat((tokens.expand(B, -1, -1), x), dim=1): ViT's class token, or DeiT's class
        and distillation tokens."""
        tokens = self.weight(1, count, channels, scale=0.5)
        if self.spec["shape_arithmetic"]:
            size = self.op("Concat", [self.unsqueezed(super().dim(x, 0)),
                                      self.const(np.array([count, channels], np.int64))], axis=0)
            tokens = self.op("Expand", [tokens, size])
        return self.op("Concat", [tokens, x], axis=1)

    def finish(self, output: str, shape: Sequence[int]) -> onnx.ModelProto:
        return self.b.model([output], name="transformer", shapes={output: list(shape)},
                            ir_version=OPSET_IR[self.spec["opset"]])


def _tokens_in(block: _Block, spec: dict) -> str:
    channels, tokens = spec["heads"] * spec["depth"], spec["tokens"]
    if not spec["patch"]:
        if spec.get("embed") == ONEHOT:
            return block.one_hot_embed(block.b.input("ids", [1, tokens], onnx.TensorProto.INT32),
                                       channels)
        return block.b.input("x", [1, tokens, channels])
    side, patch = spec["side"], spec["patch"]
    x = block.b.input("image", [1, 3, side * patch, side * patch])
    w = block.weight(channels, 3, patch, patch, scale=(3 * patch ** 2) ** -0.5)
    y = block.op("Conv", [x, w, block.weight(channels, scale=0.05)],
                 kernel_shape=[patch, patch], strides=[patch, patch])
    block.sizes = {1: channels}
    y = block.reshape(y, [block.dim(y, 0), block.dim(y, 1), -1])
    if spec.get("stem_bn"):   # SVTR's BatchNorm1d on the stem's [B, C, L], before the Transpose
        y = block.batch_norm_1d(y, channels)
    return block.op("Transpose", [y], perm=[0, 2, 1])


def transformer_from_spec(spec: dict) -> TransformerModel:
    block = _Block(spec)
    channels = spec["heads"] * spec["depth"]
    x = _tokens_in(block, spec)
    tokens = spec["tokens"] + spec.get("cls", 0)
    if spec.get("cls"):
        x = block.class_tokens(x, spec["cls"], channels)
    block.sizes = {1: tokens}
    if spec.get("positions"):
        x = block.positions(x, tokens, channels)
    for _ in range(spec["blocks"]):
        x = _encoder(block, spec, x, channels)
    shape = [1, tokens, channels]
    if spec.get("read") == "token":   # the head's x[:, 0]
        x, shape = block.op("Gather", [x, block.const(np.array(0, np.int64))], axis=1), [1, channels]
    elif spec.get("tail", "none") != "none":
        x, shape = _tail(block, spec, x, channels, tokens)
    model = block.finish(x, shape)
    feeds = _feeds(model, spec["seed"])
    return TransformerModel(model, feeds, _describe(spec), spec)


def _tail(block: _Block, spec: dict, x: str, channels: int, tokens: int):
    """The tail on the time axis of [1, C, T] (jax2tf's pooling, torch's BatchNorm1d); (output,
    its shape)."""
    time = block.op("Transpose", [x], perm=[0, 2, 1])
    tail, keep = spec["tail"], int(spec.get("keepdims", 1))
    if tail == "bn1d":   # Transpose, BatchNorm1d, Transpose back to tokens
        y = block.batch_norm_1d(time, channels)
        return block.op("Transpose", [y], perm=[0, 2, 1]), [1, tokens, channels]
    if tail == "global_max":
        return block.op("GlobalMaxPool", [time]), [1, channels, 1]
    op = "ReduceSum" if tail == "reduce_sum" else "ReduceMax"
    return block.reduce_last(op, time, keep), [1, channels] + ([1] if keep else [])


def _encoder(block: _Block, spec: dict, x: str, channels: int) -> str:
    def residual(x: str, y: str) -> str:
        return block.op("Add", [x, y]) if spec["residual"] else y

    hidden = channels * spec["mlp_ratio"]
    if spec["pre_norm"]:
        x = residual(x, block.attention(block.layer_norm(x, channels), channels, spec["heads"],
                                        divide=spec["divide"]))
        return residual(x, block.mlp(block.layer_norm(x, channels), channels, hidden))
    x = block.layer_norm(residual(x, block.attention(x, channels, spec["heads"],
                                                     divide=spec["divide"])), channels)
    return block.layer_norm(residual(x, block.mlp(x, channels, hidden)), channels)


def _feeds(model: onnx.ModelProto, seed: int) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed + 1)
    feeds = {}
    for v in model.graph.input:
        shape = [d.dim_value for d in v.type.tensor_type.shape.dim]
        if v.type.tensor_type.elem_type == onnx.TensorProto.INT32:   # one-hot ids
            feeds[v.name] = rng.integers(0, VOCAB, shape).astype(np.int32)
        else:
            feeds[v.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _describe(spec: dict) -> str:
    parts: List[str] = [f"{k}={v}" for k, v in sorted(spec.items())]
    return "transformer: " + ", ".join(parts)


@st.composite
def transformer_models(draw, max_blocks: int = 2) -> TransformerModel:
    """A transformer of 1..max_blocks encoder blocks, every form drawn independently."""
    ln = draw(st.sampled_from(LN_FORMS), label="layer norm")
    gelu = draw(st.sampled_from(GELU_FORMS), label="gelu")
    least = 20 if gelu == "op" else 17 if ln == "op" else 13
    patch = draw(st.sampled_from([0, 0, 2, 4]), label="patch")
    side = draw(st.integers(1, 3), label="side") if patch else 0
    heads = draw(st.integers(1, 4), label="heads")
    spec = {
        "seed": draw(st.integers(0, 2 ** 16), label="seed"),
        "opset": draw(st.sampled_from([o for o in (13, 17, 18, 20) if o >= least]),
                      label="opset"),
        "ln": ln, "gelu": gelu, "patch": patch, "side": side,
        "tokens": side * side if patch else draw(st.integers(2, 12), label="tokens"),
        # >= 8 channels: a LayerNorm over fewer (2 near-equal values) divides by a std that
        # fp16 rounding of its input moves by O(1) of itself: ill-conditioned, not a bug
        "heads": heads,
        "depth": draw(st.sampled_from([d for d in (2, 4, 8, 16) if heads * d >= 8]),
                      label="depth"),
        "blocks": draw(st.integers(1, max_blocks), label="blocks"),
        "mlp_ratio": draw(st.integers(1, 4), label="mlp ratio"),
        "residual": draw(st.booleans(), label="residual"),
        "pre_norm": draw(st.booleans(), label="pre-norm"),
        "divide": draw(st.booleans(), label="scale by Div"),
        "shape_arithmetic": draw(st.booleans(), label="shape arithmetic"),
        "cls": draw(st.sampled_from([0, 0, 1, 2]), label="class tokens"),
        "read": draw(st.sampled_from(["all", "token"]), label="output"),
        "embed": "x" if patch else draw(st.sampled_from(["x", "x", ONEHOT]), label="embed"),
        "stem_bn": bool(patch) and draw(st.booleans(), label="stem BatchNorm1d"),
        "tail": draw(st.sampled_from(TAILS), label="tail"),
        "keepdims": draw(st.sampled_from([0, 1]), label="tail keepdims"),
    }
    # The dynamo exporter's spellings (opset >= 15: Shape's start and end): sym_size_int,
    # arange position ids, weight-only int8 linears.
    if spec["opset"] >= 15:
        spec["dynamo"] = draw(st.booleans(), label="dynamo sym_size_int")
        spec["positions"] = draw(st.booleans(), label="arange position ids")
    spec["int8_weights"] = draw(st.booleans(), label="weight-only int8")
    return transformer_from_spec(spec)

