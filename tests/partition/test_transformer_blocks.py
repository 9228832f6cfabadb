"""Transformer blocks as exporters write them, through the whole converter and against onnxruntime.

- A ViT-like encoder block (patch-embedding Conv, tokens [1, T, C], attention with its head
  split and merge, residuals, a Relu MLP; shape arithmetic written Shape -> Gather -> Unsqueeze
  -> Concat -> Reshape, as torch.onnx writes it) is one Mrvl subgraph with nearly every MAC on
  the accelerator, and no constant operand is read as a batch.
- A BERT-like layer (int64 token ids and attention mask, an embedding Gather, an additive mask,
  a weight stored int8 and turned to float by Cast and Mul) keeps its int64 work on CPU at the
  model's edge, before one Mrvl subgraph.
- Attention alone (Q.K^T, Softmax, .V: products of two activations) is worth the trip.

Every conversion is checked with ``mrvl_convert.compare`` (the original model on onnxruntime
against the hybrid run: Mrvl stages on the fp16 simulator).
"""
from __future__ import annotations

import json
from typing import Dict, List, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert

SHAPE_OPS = ("Shape", "Gather", "Unsqueeze", "Concat")


class _Net:
    """Nodes appended in order, seeded weights, every node named."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: List[onnx.NodeProto] = []
        self.inits: List[onnx.TensorProto] = []
        self.inputs: List[onnx.ValueInfoProto] = []
        self.count = 0

    def const(self, value: np.ndarray) -> str:
        self.count += 1
        name = f"c{self.count}"
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, *shape: int, scale: float = 0.0) -> str:
        scale = scale or shape[0] ** -0.5
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32))

    def op(self, op_type: str, inputs: Sequence[str], name: str = "", **attrs) -> str:
        self.count += 1
        name = name or f"{op_type}_{self.count}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [f"{name}_out"], name=name,
                                           **attrs))
        return f"{name}_out"

    def dim(self, tensor: str, axis: int) -> str:
        """Shape -> Gather -> Unsqueeze: one dim of ``tensor`` as a 1-D int64 tensor."""
        picked = self.op("Gather", [self.op("Shape", [tensor]),
                                    self.const(np.array(axis, np.int64))], axis=0)
        return self.op("Unsqueeze", [picked, self.const(np.array([0], np.int64))])

    def reshape_like(self, tensor: str, like: str, keep: Sequence[int],
                     extra: Sequence[int]) -> str:
        """Reshape ``tensor`` to ``like``'s dims ``keep`` followed by ``extra``, the target shape
        computed from ``like``'s shape at run time, as exporters write it."""
        parts = [self.dim(like, a) for a in keep]
        parts += [self.const(np.array([e], np.int64)) for e in extra]
        return self.op("Reshape", [tensor, self.op("Concat", parts, axis=0)])

    def linear(self, x: str, fin: int, fout: int, weight: str = "") -> str:
        """MatMul by a constant weight, then the bias added first, as torch exports it."""
        y = self.op("MatMul", [x, weight or self.weight(fin, fout)])
        bias = self.const((self.rng.standard_normal(fout) * 0.1).astype(np.float32))
        return self.op("Add", [bias, y])

    def int8_weight(self, fin: int, fout: int) -> str:
        """A weight stored as int8 values, turned to float by Cast and Mul by its scale."""
        values = self.rng.integers(-127, 128, (fin, fout)).astype(np.int8)
        as_float = self.op("Cast", [self.const(values)], name="weight_cast",
                           to=TensorProto.FLOAT)
        return self.op("Mul", [as_float, self.const(np.array(0.01, np.float32))],
                       name="weight_scale")

    def attention(self, x: str, channels: int, heads: int, mask: str = "",
                  query_weight: str = "") -> str:
        depth = channels // heads

        def heads_of(t: str, perm: List[int]) -> str:
            return self.op("Transpose", [self.reshape_like(t, x, [0, 1], [heads, depth])],
                           perm=perm)

        q = heads_of(self.linear(x, channels, channels, query_weight), [0, 2, 1, 3])
        k = heads_of(self.linear(x, channels, channels), [0, 2, 3, 1])
        v = heads_of(self.linear(x, channels, channels), [0, 2, 1, 3])
        scores = self.op("MatMul", [q, k], name="qk")
        scores = self.op("Mul", [scores, self.const(np.array(depth ** -0.5, np.float32))],
                         name="scale")
        if mask:
            scores = self.op("Add", [scores, mask], name="masked")
        weights = self.op("Softmax", [scores], name="softmax", axis=-1)
        out = self.op("Transpose", [self.op("MatMul", [weights, v], name="av")],
                      perm=[0, 2, 1, 3])
        out = self.reshape_like(out, x, [0, 1], [channels])
        return self.op("Add", [x, self.linear(out, channels, channels)], name="residual1")

    def mlp(self, x: str, channels: int, hidden: int) -> str:
        h = self.op("Relu", [self.linear(x, channels, hidden)])
        return self.op("Add", [x, self.linear(h, hidden, channels)], name="residual2")

    def model(self, output: str, shape: Sequence, name: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, self.inputs,
                                  [helper.make_tensor_value_info(output, TensorProto.FLOAT,
                                                                 list(shape))], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                                  ir_version=8)
        onnx.checker.check_model(model)
        return model


def vit_block(channels: int = 384, heads: int = 6, image: int = 64, patch: int = 16,
              batch: object = 1) -> onnx.ModelProto:
    """Patch embedding -> tokens [B, T, C] -> + position -> attention -> Relu MLP."""
    net, tokens = _Net(0), (image // patch) ** 2
    net.inputs.append(helper.make_tensor_value_info("image", TensorProto.FLOAT,
                                                    [batch, 3, image, image]))
    y = net.op("Conv", ["image", net.weight(channels, 3, patch, patch, scale=0.05),
                        net.const(np.zeros(channels, np.float32))], name="patch_embed",
               kernel_shape=[patch, patch], strides=[patch, patch])
    y = net.op("Transpose", [net.reshape_like(y, y, [0, 1], [-1])], name="to_tokens",
               perm=[0, 2, 1])
    x = net.op("Add", [y, net.weight(1, tokens, channels, scale=0.1)], name="position")
    x = net.mlp(net.attention(x, channels, heads), channels, 4 * channels)
    return net.model(x, [batch, tokens, channels], "vit_block")


def bert_layer(channels: int = 64, heads: int = 4, tokens: int = 12, vocab: int = 40
               ) -> onnx.ModelProto:
    """int64 ids -> embedding Gather (+ positions by Range) -> attention with an additive mask
    from the int64 attention mask -> Relu MLP; the query weight stored int8 (Cast, Mul)."""
    net = _Net(1)
    for name in ("input_ids", "attention_mask"):
        net.inputs.append(helper.make_tensor_value_info(name, TensorProto.INT64, [1, tokens]))
    words = net.op("Gather", [net.weight(vocab, channels, scale=0.5), "input_ids"],
                   name="word_embeddings", axis=0)
    count = net.op("Gather", [net.op("Shape", ["input_ids"]), net.const(np.array(1, np.int64))],
                   axis=0)
    positions = net.op("Range", [net.const(np.array(0, np.int64)), count,
                                 net.const(np.array(1, np.int64))])
    positions = net.op("Unsqueeze", [positions, net.const(np.array([0], np.int64))])
    x = net.op("Add", [words, net.op("Gather", [net.weight(tokens, channels, scale=0.5),
                                                positions], axis=0)], name="embeddings")
    mask = net.op("Unsqueeze", ["attention_mask", net.const(np.array([1, 2], np.int64))])
    mask = net.op("Sub", [net.const(np.array(1.0, np.float32)),
                          net.op("Cast", [mask], to=TensorProto.FLOAT)])
    mask = net.op("Mul", [mask, net.const(np.array(-10000.0, np.float32))], name="mask")
    query = net.int8_weight(channels, channels)
    x = net.mlp(net.attention(x, channels, heads, mask, query), channels, 2 * channels)
    return net.model(x, [1, tokens, channels], "bert_layer")


def nodes_of(result) -> Dict[str, Dict]:
    return {e["name"]: e for e in result.report["nodes"]}


def layer_kinds(result) -> List[str]:
    kinds = []
    for stage in result.manifest["stages"]:
        if stage["kind"] == "mrvl":
            doc = json.loads((result.out_dir / stage["nodes_json"]).read_text())
            kinds += [n["attrs"]["layer_name"][0] for n in doc["nodes"] if n["op"] == "tvm_op"]
    return kinds


def test_vit_block_is_one_mrvl_subgraph_within_fp16_tolerance(tmp_path):
    model = vit_block()
    result = mrvl_convert.convert(model, tmp_path / "out")
    summary = result.summary
    assert summary["mrvl_subgraphs"] == 1 and summary["cpu_subgraphs"] == 0, summary
    assert summary["mrvl_mac_share"] >= 0.95, summary
    entries = nodes_of(result)
    assert all("batch 384" not in e.get("reason", "") for e in entries.values())
    assert entries["qk"]["rule"] == entries["av"]["rule"] == "mrvl.batch_matmul"
    # The scale 1/8 is folded into Q's FC (frontend/fc_folds.py): it goes where that FC went.
    q_fc = entries["scale"]["merged_into"]
    assert entries[q_fc]["op_type"] == "MatMul"
    assert entries["scale"]["rule"] == entries[q_fc]["rule"]
    assert entries["softmax"]["rule"] == "mrvl.softmax"
    # The shape arithmetic is gone: folded at conversion time, nothing of it left to run.
    assert all(e["placement"] == "removed" for e in entries.values() if e["op_type"] in SHAPE_OPS)
    # Tokens never go to NHWC and back: one layout_transform into the Conv, one out of it for
    # the token Reshape, and K's transpose [0, 2, 3, 1] (an NCHW->NHWC perm, so a relabelling).
    assert layer_kinds(result).count("layout_transform") == 3
    comparison = mrvl_convert.compare(model, result.out_dir)
    assert comparison.passed, comparison.to_dict()


def test_vit_block_with_a_dynamic_batch_folds_once_the_batch_is_given(tmp_path):
    model = vit_block(channels=48, heads=4, image=32, patch=8, batch="N")
    result = mrvl_convert.convert(model, tmp_path / "out", shapes={"image": [1, 3, 32, 32]})
    assert result.summary["mrvl_subgraphs"] == 1 and result.summary["cpu_nodes"] == 0
    stage = next(s for s in result.manifest["stages"] if s["kind"] == "mrvl")
    assert stage["outputs"][0]["shape"] == [1, 16, 48]


def test_bert_layer_keeps_int64_work_on_cpu_at_the_edge(tmp_path):
    model = bert_layer()
    result = mrvl_convert.convert(model, tmp_path / "out")
    assert [s["kind"] for s in result.manifest["stages"]] == ["cpu", "mrvl"]
    entries = nodes_of(result)
    gather = entries["word_embeddings"]
    assert gather["placement"] == "cpu"
    assert "embedding lookup by token ids runs on CPU, before the accelerator stage" in \
        gather["reason"]
    on_cpu = {e["op_type"] for e in entries.values() if e["placement"] == "cpu"}
    assert on_cpu == {"Gather", "Unsqueeze", "Cast"}   # the ids and the mask, int64 first
    # (the mask's 1 - m is Mul2D(m, -1) then Sum2D(+1) on the accelerator: canonical_forms)
    assert entries["masked"]["rule"] == "mrvl.sum2d"          # the mask broadcasts: Sum2D
    # The int8 weight folded into a float one (exactly what onnxruntime computes from it).
    assert entries["weight_cast"]["placement"] == entries["weight_scale"]["placement"] == "removed"
    mask = np.array([[1] * 9 + [0] * 3], np.int64)
    feed = {"input_ids": np.random.default_rng(2).integers(0, 40, (1, 12)).astype(np.int64),
            "attention_mask": mask}
    comparison = mrvl_convert.compare(model, result.out_dir, feed)
    assert comparison.passed, comparison.to_dict()


def test_attention_alone_is_worth_the_trip(tmp_path):
    """Only products of two activations: before BatchMatmul counted as compute, the region had
    "no compute-heavy layer (Conv2D or FC)" and went back to CPU."""
    net = _Net(3)
    for name in ("q", "k", "v"):
        net.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 2, 8, 4]))
    keys = net.op("Transpose", ["k"], name="k_t", perm=[0, 1, 3, 2])
    weights = net.op("Softmax", [net.op("MatMul", ["q", keys], name="qk")], name="softmax",
                     axis=-1)
    model = net.model(net.op("MatMul", [weights, "v"], name="av"), [1, 2, 8, 4], "attention")
    result = mrvl_convert.convert(model, tmp_path / "out")
    entries = nodes_of(result)
    assert [entries[n]["placement"] for n in ("qk", "softmax", "av")] == ["mrvl"] * 3
    assert layer_kinds(result).count("BatchMatmul") == 2
    assert mrvl_convert.compare(model, result.out_dir).passed
