"""Models as torch.onnx's dynamo exporter (torch >= 2.5, ``dynamo=True``) writes them, built by
hand (seeded random weights): opset 18, dynamic input dims named ``s0``/``s1``, a run-time size
read as ``sym_size_int`` (``Shape(x, start=d, end=d+1) -> Squeeze``), ``torch.arange`` as
``node_arange`` = ``Range(0, sym_size_int, 1)``, and constants as ``Constant`` nodes.

- ``dynamo_bert``: an encoder of BERT-Tiny's width (hidden 128, 2 heads, FFN 512), 1 or 2
  layers: word embedding Gather, position ids from ``node_arange`` over the input's length
  (``Range -> Unsqueeze -> Gather``), the LayerNormalization op, additive mask, attention whose
  head split reshapes to a target Concat-ed from the ``sym_size_int`` values, Erf GELU FFN;
  ``int8=True``: every linear weight weight-only int8, as ``torch.ao``'s weight-only
  quantization exports it (``Cast(int8 weight, to=FLOAT) -> Mul(scale) -> Transpose -> MatMul``).
"""
from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DYNAMO_OPSET = 18
BERT_VOCAB = 50
BERT_TOKENS = 16


class Dynamo:
    """Nodes named as the dynamo exporter names them (``node_<op>_<n>``, ``val_<n>``)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: List[onnx.NodeProto] = []
        self.inits: List[onnx.TensorProto] = []
        self.inputs: List[onnx.ValueInfoProto] = []
        self._n = 0

    def _name(self, stem: str) -> str:
        self._n += 1
        return f"{stem}_{self._n}"

    def op(self, op_type: str, inputs: Sequence[str], name: str = "", **attrs) -> str:
        name = name or self._name(f"node_{op_type}")
        out = name.replace("node_", "val_", 1) if name.startswith("node_") else f"{name}_out"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=name, **attrs))
        return out

    def constant(self, value) -> str:
        """A ``Constant`` node, as dynamo writes small constants."""
        name = self._name("val_const")
        self.nodes.append(helper.make_node("Constant", [], [name], name=f"node_{name}",
                                           value=numpy_helper.from_array(np.asarray(value))))
        return name

    def init(self, array: np.ndarray, stem: str = "p") -> str:
        name = self._name(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def sym_size(self, tensor: str, axis: int) -> str:
        """``torch.ops.aten.sym_size.int(x, axis)``: a 0-d int64 of one input dim."""
        shape = self.op("Shape", [tensor], start=axis, end=axis + 1)
        return self.op("Squeeze", [shape], name=self._name("node_sym_size_int"))

    def unsqueezed(self, scalar: str) -> str:
        return self.op("Unsqueeze", [scalar, self.constant(np.array([0], np.int64))])

    def view(self, x: str, parts: Sequence) -> str:
        pieces = [self.unsqueezed(p) if isinstance(p, str) else
                  self.constant(np.array([p], np.int64)) for p in parts]
        return self.op("Reshape", [x, self.op("Concat", pieces, axis=0)])

    def weight(self, fout: int, fin: int, int8: bool) -> str:
        """A torch Linear weight [fout, fin] transposed for MatMul; weight-only int8 as
        ``Cast -> Mul(per-channel scale)`` when ``int8``."""
        w = (self.rng.standard_normal((fout, fin)) * fin ** -0.5).astype(np.float32)
        if int8:
            scale = (np.abs(w).max(axis=1, keepdims=True) / 127).astype(np.float32)
            q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
            cast = self.op("Cast", [self.init(q, "w_int8")], to=TensorProto.FLOAT)
            w_name = self.op("Mul", [cast, self.init(scale, "w_scale")])
        else:
            w_name = self.init(w, "w")
        return self.op("Transpose", [w_name], perm=[1, 0])

    def linear(self, x: str, fin: int, fout: int, int8: bool) -> str:
        y = self.op("MatMul", [x, self.weight(fout, fin, int8)])
        bias = (self.rng.standard_normal(fout) * 0.05).astype(np.float32)
        return self.op("Add", [y, self.init(bias, "b")])

    def layer_norm(self, x: str, channels: int) -> str:
        gamma = (1 + 0.1 * self.rng.standard_normal(channels)).astype(np.float32)
        beta = (0.1 * self.rng.standard_normal(channels)).astype(np.float32)
        return self.op("LayerNormalization", [x, self.init(gamma, "ln_w"),
                                              self.init(beta, "ln_b")], axis=-1, epsilon=1e-12)

    def gelu(self, x: str) -> str:
        e = self.op("Erf", [self.op("Div", [x, self.constant(np.array(1.4142135, np.float32))])])
        y = self.op("Mul", [x, self.op("Add", [e, self.constant(np.array(1.0, np.float32))])])
        return self.op("Mul", [y, self.constant(np.array(0.5, np.float32))])

    def model(self, outputs: Dict[str, Sequence], name: str) -> onnx.ModelProto:
        outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, list(s))
                for o, s in outputs.items()]
        graph = helper.make_graph(self.nodes, name, self.inputs, outs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", DYNAMO_OPSET)],
                                  ir_version=10, producer_name="pytorch",
                                  producer_version="2.5.0")
        onnx.checker.check_model(model)
        return model


def _attention(d: Dynamo, x: str, mask: str, batch: str, length: str, channels: int,
               heads: int, int8: bool) -> str:
    depth = channels // heads

    def heads_of(t: str) -> str:
        return d.op("Transpose", [d.view(t, [batch, length, heads, depth])], perm=[0, 2, 1, 3])

    q, k, v = (heads_of(d.linear(x, channels, channels, int8)) for _ in range(3))
    scores = d.op("MatMul", [q, d.op("Transpose", [k], perm=[0, 1, 3, 2])])
    scores = d.op("Div", [scores, d.constant(np.array(np.sqrt(depth), np.float32))])
    weights = d.op("Softmax", [d.op("Add", [scores, mask])], axis=-1)
    out = d.op("Transpose", [d.op("MatMul", [weights, v])], perm=[0, 2, 1, 3])
    return d.linear(d.view(out, [batch, length, channels]), channels, channels, int8)


def dynamo_bert(seed: int = 0, layers: int = 1, channels: int = 128, heads: int = 2,
                int8: bool = True, mask_value: float = -10000.0) -> onnx.ModelProto:
    """``mask_value``: the extended attention mask's scale, -10000 (older transformers) or
    ``np.finfo(np.float32).min`` (current ones)."""
    d = Dynamo(seed)
    for name in ("input_ids", "attention_mask"):
        d.inputs.append(helper.make_tensor_value_info(name, TensorProto.INT64, ["s0", "s1"]))
    batch, length = d.sym_size("input_ids", 0), d.sym_size("input_ids", 1)
    positions = d.op("Range", [d.constant(np.array(0, np.int64)), length,
                               d.constant(np.array(1, np.int64))], name="node_arange")
    positions = d.unsqueezed(positions)
    words = d.init((d.rng.standard_normal((BERT_VOCAB, channels)) * 0.5).astype(np.float32),
                   "word_embeddings")
    places = d.init((d.rng.standard_normal((512, channels)) * 0.5).astype(np.float32),
                    "position_embeddings")
    x = d.op("Add", [d.op("Gather", [words, "input_ids"], axis=0),
                     d.op("Gather", [places, positions], axis=0)])
    x = d.layer_norm(x, channels)
    mask = d.op("Unsqueeze", ["attention_mask", d.constant(np.array([1, 2], np.int64))])
    mask = d.op("Sub", [d.constant(np.array(1.0, np.float32)),
                        d.op("Cast", [mask], to=TensorProto.FLOAT)])
    mask = d.op("Mul", [mask, d.constant(np.array(mask_value, np.float32))])
    for _ in range(layers):
        x = d.layer_norm(d.op("Add", [x, _attention(d, x, mask, batch, length, channels, heads,
                                                     int8)]), channels)
        hidden = d.gelu(d.linear(x, channels, 4 * channels, int8))
        x = d.layer_norm(d.op("Add", [x, d.linear(hidden, 4 * channels, channels, int8)]),
                         channels)
    x = d.op("Identity", [x], name="last_hidden_state_id")
    d.nodes[-1].output[0] = "last_hidden_state"
    return d.model({"last_hidden_state": ["s0", "s1", channels]}, "dynamo_bert")


def bert_shapes(tokens: int = BERT_TOKENS) -> Dict[str, List[int]]:
    return {"input_ids": [1, tokens], "attention_mask": [1, tokens]}


def bert_feeds(seed: int = 0, tokens: int = BERT_TOKENS) -> Dict[str, np.ndarray]:
    """Token ids below the vocabulary, the last quarter of the tokens masked out."""
    rng = np.random.default_rng(seed)
    mask = np.ones((1, tokens), np.int64)
    mask[:, -tokens // 4:] = 0
    return {"input_ids": rng.integers(0, BERT_VOCAB, (1, tokens)).astype(np.int64),
            "attention_mask": mask}
