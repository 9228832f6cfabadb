"""Transformer models for the partition corpus, written as torch.onnx writes them (seeded random
weights, batch 1, fixed shapes). The widths are the published models' (ViT-Ti, BERT-Tiny, SVTR-T's
first stage); ``benchmarks/bench_transformer_width.py`` runs narrower and wider ones.

- ``vit_tiny``: 3x32x32 image, 4x4 patch-embedding Conv, 64 patch tokens of 192 channels
  (ViT-Ti's width: 3 heads of 64, as timm's ``vit_tiny_patch16_224`` and DeiT-Ti), position
  embedding Add, 4 encoder blocks (decomposed LayerNorm: ReduceMean, Sub, Pow, ReduceMean, Add
  eps, Sqrt, Div, Mul gamma, Add beta; attention with separate Q, K, V linears, head
  split Reshape/Transpose, Q.K^T, Mul by the scale, Softmax, .V, merge; Erf GELU MLP), final
  LayerNorm, head FC. ``pool="token"`` (the default, as timm): a class token Parameter
  expanded to the batch (Shape -> Gather -> Unsqueeze -> Concat -> Expand) and Concat-ed before
  the patch tokens, the head reading token 0 (Gather axis 1); ``pool="mean"``: mean over tokens.
- ``bert_tiny``: one BERT layer of BERT-Tiny's width (hidden 128, 2 heads, FFN 512, as
  ``google/bert_uncased_L-2_H-128_A-2``), 16 tokens, opset 17: int64 ``input_ids`` and
  ``attention_mask``, word and position embedding Gathers, the LayerNormalization op, the additive mask
  ((1 - mask) * -10000 as [B, 1, 1, T]), attention (scores Div by sqrt(depth)), Erf GELU FFN.
- ``svtr_mix``: an SVTR mixing block: depthwise 3x3 Conv (local mixing) on [B, C, H, W],
  flattened to tokens [B, HW, C], LayerNorm, 2-head attention (global mixing), Erf GELU MLP.
- ``c2psa``: YOLO11's C2PSA (ultralytics/nn/modules/block.py): cv1 (Conv-BN-SiLU, BN folded as
  exported), Split, one PSABlock (Attention: qkv 1x1 Conv, view [B, heads, 2 key_dim +
  head_dim, N], Split, q^T k * scale, Softmax, v @ attn^T, positional depthwise Conv ``pe`` on
  v, ``proj`` 1x1 Conv, residual; FFN of two 1x1 Convs, residual), Concat, cv2.

Shape arithmetic is written Shape -> Gather -> Unsqueeze -> Concat -> Reshape where exporters
write it (``x.shape`` read at run time when tracing).
"""
from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np
import onnx
from onnx import TensorProto

from support.models import Builder

TOKEN_INPUTS = ("input_ids", "attention_mask")
#: Name prefixes of the LayerNorm and GELU nodes (``Tokens.part``).
PIECES = ("ln_", "gelu_")
BERT_VOCAB = 50
BERT_TOKENS = 16


class Tokens:
    """A ``Builder`` with the pieces of a transformer, each as exporters write it."""

    def __init__(self, seed: int, opset: int = 13) -> None:
        self.b = Builder(seed, opset=opset)
        self.rng = self.b.rng

    def op(self, op_type: str, inputs: Sequence[str], **attrs) -> str:
        return self.b.op(op_type, inputs, **attrs)

    def part(self, group: str, op_type: str, inputs: Sequence[str], **attrs) -> str:
        """A node of a LayerNorm or GELU, named ``{group}_...`` (``PIECES``), so a test can tell
        the cuts those make from any other."""
        return self.op(op_type, inputs, name=f"{group}_{op_type}_{len(self.b.nodes)}", **attrs)

    def const(self, value) -> str:
        return self.b.const(np.asarray(value))

    def scalar(self, value: float) -> str:
        return self.const(np.array(value, np.float32))

    def weight(self, *shape: int, scale: float) -> str:
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32))

    def dim(self, tensor: str, axis: int) -> str:
        """Shape -> Gather: one dim of ``tensor`` as an int64 scalar."""
        return self.op("Gather", [self.op("Shape", [tensor]), self.const(np.array(axis, np.int64))],
                       axis=0)

    def unsqueezed(self, scalar: str) -> str:
        return self.op("Unsqueeze", [scalar, self.const(np.array([0], np.int64))])

    def reshape(self, tensor: str, parts: Sequence) -> str:
        """Reshape to a target Concat-ed from run-time dims (str: an int64 scalar from ``dim``)
        and constants (int), as torch.onnx writes ``x.view(B, ..., N)``."""
        pieces = [self.unsqueezed(p) if isinstance(p, str) else
                  self.const(np.array([p], np.int64)) for p in parts]
        return self.op("Reshape", [tensor, self.op("Concat", pieces, axis=0)])

    def linear(self, x: str, fin: int, fout: int) -> str:
        """MatMul by a [fin, fout] weight, then the bias Add, as torch exports nn.Linear."""
        y = self.op("MatMul", [x, self.weight(fin, fout, scale=fin ** -0.5)])
        return self.op("Add", [self.weight(fout, scale=0.05), y])

    def layer_norm(self, x: str, channels: int, form: str = "decomposed") -> str:
        gamma = self.const((1 + 0.1 * self.rng.standard_normal(channels)).astype(np.float32))
        beta = self.weight(channels, scale=0.1)
        if form == "op":
            return self.part("ln", "LayerNormalization", [x, gamma, beta], axis=-1,
                             epsilon=1e-5)
        mean = self.part("ln", "ReduceMean", [x], axes=[-1], keepdims=1)
        centred = self.part("ln", "Sub", [x, mean])
        var = self.part("ln", "ReduceMean", [self.part("ln", "Pow", [centred, self.scalar(2.0)])],
                        axes=[-1], keepdims=1)
        std = self.part("ln", "Sqrt", [self.part("ln", "Add", [var, self.scalar(1e-5)])])
        y = self.part("ln", "Mul", [self.part("ln", "Div", [centred, std]), gamma])
        return self.part("ln", "Add", [y, beta])

    def gelu(self, x: str) -> str:
        """torch's exact GELU: x * 0.5 * (1 + erf(x / sqrt(2))) as Div, Erf, Add, Mul, Mul."""
        scaled = self.part("gelu", "Div", [x, self.scalar(1.4142135381698608)])
        e = self.part("gelu", "Erf", [scaled])
        y = self.part("gelu", "Mul", [x, self.part("gelu", "Add", [e, self.scalar(1.0)])])
        return self.part("gelu", "Mul", [y, self.scalar(0.5)])

    def attention(self, x: str, channels: int, heads: int, mask: str = "",
                  divide: bool = False) -> str:
        """Multi-head self-attention on tokens [B, T, C] (without the residual)."""
        depth = channels // heads
        batch, tokens = self.dim(x, 0), self.dim(x, 1)

        def split(t: str, perm: List[int]) -> str:
            return self.op("Transpose", [self.reshape(t, [batch, tokens, heads, depth])],
                           perm=perm)

        q = split(self.linear(x, channels, channels), [0, 2, 1, 3])
        k = split(self.linear(x, channels, channels), [0, 2, 3, 1])
        v = split(self.linear(x, channels, channels), [0, 2, 1, 3])
        scores = self.op("MatMul", [q, k])
        if divide:   # HF BERT: scores / sqrt(depth)
            scores = self.op("Div", [scores, self.scalar(float(np.sqrt(depth)))])
        else:        # timm: q @ k^T * scale
            scores = self.op("Mul", [scores, self.scalar(depth ** -0.5)])
        if mask:
            scores = self.op("Add", [scores, mask])
        weights = self.op("Softmax", [scores], axis=-1)
        out = self.op("Transpose", [self.op("MatMul", [weights, v])], perm=[0, 2, 1, 3])
        out = self.reshape(out, [batch, tokens, channels])
        return self.linear(out, channels, channels)

    def mlp(self, x: str, channels: int, hidden: int) -> str:
        return self.linear(self.gelu(self.linear(x, channels, hidden)), hidden, channels)

    def encoder(self, x: str, channels: int, heads: int, ln: str = "decomposed") -> str:
        """Pre-norm block (ViT, SVTR): x + attn(LN(x)), then x + mlp(LN(x))."""
        x = self.op("Add", [x, self.attention(self.layer_norm(x, channels, ln), channels, heads)])
        return self.op("Add", [x, self.mlp(self.layer_norm(x, channels, ln), channels,
                                           4 * channels)])

    def model(self, output: str, shape: Sequence[int], name: str) -> onnx.ModelProto:
        return self.b.model([output], name=name, shapes={output: list(shape)})


def token_blocks(seed: int = 0, blocks: int = 2, tokens: int = 8, channels: int = 32,
                 heads: int = 2) -> onnx.ModelProto:
    """``blocks`` pre-norm encoder blocks (decomposed LayerNorm, attention with Q, K, V and
    output projections, Erf GELU MLP) on a float token input ``tokens`` [1, T, C]."""
    t = Tokens(seed)
    y = t.b.input("tokens", [1, tokens, channels])
    for _ in range(blocks):
        y = t.encoder(y, channels, heads)
    return t.model(y, [1, tokens, channels], f"block{blocks}")


def token_feeds(count: int, seed: int, tokens: int = 8, channels: int = 32
                ) -> List[Dict[str, np.ndarray]]:
    """``count`` seeded standard-normal feeds for ``token_blocks``."""
    rng = np.random.default_rng(seed)
    return [{"tokens": rng.standard_normal((1, tokens, channels)).astype(np.float32)}
            for _ in range(count)]


def vit_tiny(seed: int = 0, channels: int = 192, heads: int = 3, blocks: int = 4,
             pool: str = "token") -> onnx.ModelProto:
    """``pool``: "token", timm's class token (prepended, read back by the head) or "mean"."""
    t, patch, image, classes = Tokens(seed), 4, 32, 10
    tokens = (image // patch) ** 2
    x = t.b.input("image", [1, 3, image, image])
    y = t.op("Conv", [x, t.weight(channels, 3, patch, patch, scale=(3 * patch * patch) ** -0.5),
                      t.weight(channels, scale=0.05)], kernel_shape=[patch, patch],
             strides=[patch, patch])
    y = t.op("Transpose", [t.reshape(y, [t.dim(y, 0), t.dim(y, 1), -1])], perm=[0, 2, 1])
    if pool == "token":   # torch.cat((cls_token.expand(B, -1, -1), x), dim=1)
        size = t.op("Concat", [t.unsqueezed(t.dim(y, 0)), t.const(np.array([1, channels],
                                                                            np.int64))], axis=0)
        cls = t.op("Expand", [t.weight(1, 1, channels, scale=0.5), size])
        y = t.op("Concat", [cls, y], axis=1)
        tokens += 1
    y = t.op("Add", [y, t.weight(1, tokens, channels, scale=0.1)])
    for _ in range(blocks):
        y = t.encoder(y, channels, heads)
    y = t.layer_norm(y, channels)
    if pool == "token":   # x[:, 0]
        y = t.op("Gather", [y, t.const(np.array(0, np.int64))], axis=1)
    else:
        y = t.op("ReduceMean", [y], axes=[1], keepdims=0)
    y = t.op("Gemm", [y, t.weight(classes, channels, scale=channels ** -0.5),
                      t.weight(classes, scale=0.05)], transB=1)
    return t.model(y, [1, classes], "vit_tiny")


def bert_tiny(seed: int = 0, channels: int = 128, heads: int = 2) -> onnx.ModelProto:
    t, tokens = Tokens(seed, opset=17), BERT_TOKENS
    for name in TOKEN_INPUTS:
        t.b.input(name, [1, tokens], TensorProto.INT64)
    words = t.op("Gather", [t.weight(BERT_VOCAB, channels, scale=0.5), "input_ids"], axis=0)
    count = t.dim("input_ids", 1)
    positions = t.op("Range", [t.const(np.array(0, np.int64)), count,
                               t.const(np.array(1, np.int64))])
    positions = t.unsqueezed(positions)
    x = t.op("Add", [words, t.op("Gather", [t.weight(tokens, channels, scale=0.5), positions],
                                 axis=0)])
    x = t.op("Add", [x, t.weight(1, 1, channels, scale=0.5)])   # token type 0's embedding
    x = t.layer_norm(x, channels, "op")
    mask = t.op("Unsqueeze", ["attention_mask", t.const(np.array([1, 2], np.int64))])
    mask = t.op("Sub", [t.scalar(1.0), t.op("Cast", [mask], to=TensorProto.FLOAT)])
    mask = t.op("Mul", [mask, t.scalar(-10000.0)])
    x = t.layer_norm(t.op("Add", [x, t.attention(x, channels, heads, mask, divide=True)]),
                     channels, "op")
    x = t.layer_norm(t.op("Add", [x, t.mlp(x, channels, 4 * channels)]), channels, "op")
    return t.model(x, [1, tokens, channels], "bert_tiny")


def bert_feeds(seed: int = 0) -> Dict[str, np.ndarray]:
    """Token ids below the vocabulary, the last quarter of the tokens masked out."""
    rng = np.random.default_rng(seed)
    mask = np.ones((1, BERT_TOKENS), np.int64)
    mask[:, -BERT_TOKENS // 4:] = 0
    return {"input_ids": rng.integers(0, BERT_VOCAB, (1, BERT_TOKENS)).astype(np.int64),
            "attention_mask": mask}


def svtr_mix(seed: int = 0, channels: int = 64, heads: int = 2) -> onnx.ModelProto:
    t, height, width = Tokens(seed), 8, 16
    x = t.b.input("x", [1, channels, height, width])
    local = t.op("Conv", [x, t.weight(channels, 1, 3, 3, scale=1 / 3),
                          t.weight(channels, scale=0.05)], kernel_shape=[3, 3], pads=[1] * 4,
                 group=channels)
    y = t.op("Transpose", [t.reshape(t.op("Add", [x, local]), [t.dim(x, 0), t.dim(x, 1), -1])],
             perm=[0, 2, 1])
    y = t.layer_norm(t.encoder(y, channels, heads), channels)
    return t.model(y, [1, height * width, channels], "svtr_mix")


def _conv(t: Tokens, x: str, cin: int, cout: int, k: int = 1, group: int = 1,
          act: bool = True) -> str:
    """ultralytics' Conv (Conv2d, BatchNorm2d folded at export, SiLU as Sigmoid and Mul)."""
    fan_in = cin // group * k * k
    y = t.op("Conv", [x, t.weight(cout, cin // group, k, k, scale=(2 / fan_in) ** 0.5 / 1.5),
                      t.weight(cout, scale=0.05)], kernel_shape=[k, k], pads=[k // 2] * 4,
             group=group)
    return t.op("Mul", [y, t.op("Sigmoid", [y])]) if act else y


def _psa_attention(t: Tokens, x: str, dim: int, heads: int) -> str:
    head_dim = dim // heads
    key_dim = head_dim // 2
    batch, height, width = t.dim(x, 0), t.dim(x, 2), t.dim(x, 3)
    n = t.op("Mul", [height, width])
    qkv = _conv(t, x, dim, dim + 2 * key_dim * heads, act=False)
    qkv = t.reshape(qkv, [batch, heads, 2 * key_dim + head_dim, n])
    t.op("Split", [qkv, t.const(np.array([key_dim, key_dim, head_dim], np.int64))],
         name="psa_split", outputs=3, axis=2)
    q, k, v = "psa_split_out", "psa_split_out1", "psa_split_out2"
    attn = t.op("MatMul", [t.op("Transpose", [q], perm=[0, 1, 3, 2]), k])
    attn = t.op("Softmax", [t.op("Mul", [attn, t.scalar(key_dim ** -0.5)])], axis=-1)
    out = t.op("MatMul", [v, t.op("Transpose", [attn], perm=[0, 1, 3, 2])])
    channels = t.dim(x, 1)
    out = t.reshape(out, [batch, channels, height, width])
    pe = _conv(t, t.reshape(v, [batch, channels, height, width]), dim, dim, k=3, group=dim,
               act=False)
    return _conv(t, t.op("Add", [out, pe]), dim, dim, act=False)


def c2psa(seed: int = 0, c1: int = 256, size: int = 8) -> onnx.ModelProto:
    """C2PSA(c1, c1, n=1, e=0.5): c = c1 / 2 channels, c // 64 heads."""
    t, c = Tokens(seed), c1 // 2
    x = t.b.input("x", [1, c1, size, size])
    y = _conv(t, x, c1, 2 * c)
    t.op("Split", [y, t.const(np.array([c, c], np.int64))], name="c2psa_split", outputs=2,
         axis=1)
    a, b = "c2psa_split_out", "c2psa_split_out1"
    b = t.op("Add", [b, _psa_attention(t, b, c, c // 64)])
    b = t.op("Add", [b, _conv(t, _conv(t, b, c, 2 * c), 2 * c, c, act=False)])
    y = _conv(t, t.op("Concat", [a, b], axis=1), 2 * c, c1)
    return t.model(y, [1, c1, size, size], "c2psa")


MODELS = {"vit_tiny": vit_tiny, "bert_tiny": bert_tiny, "svtr_mix": svtr_mix, "c2psa": c2psa}
