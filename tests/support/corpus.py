"""The partition corpus: real topologies as exporters write them, with seeded random weights.

Used by ``benchmarks/bench_partition.py`` and by the tests. Two kinds of model:

- ``zoo(name)``: one of the 9 "light" zoo models inside the onnx wheel
  (``onnx/backend/test/data/light``). Their weights are constant fills (ConstantOfShape nodes and
  constant initializers); here every weight becomes a seeded random tensor fitting the role its
  consumer gives it (He-scaled conv/FC weights, small biases, BatchNormalization statistics with
  mean ~0 and variance ~1, per-channel scales ~1), so outputs are not degenerate.
- ``built(name)``: small networks written with onnx.helper, each using exporters' spellings that
  canonicalize rewrites: ``mobilenet_v2`` (Relu6 as Clip(0, 6) and as Min(Relu(x), 6)),
  ``densenet_block`` (pre-activation BN -> Relu -> Conv), ``shufflenet_unit`` (grouped 1x1 Conv,
  channel shuffle, Sum), ``paddle_cnn`` (batch stored as -1, Sub/Div preprocessing, Max(x, 0),
  hard-swish, a Reshape to [-1, features]); the transformers of ``corpus_transformer``
  (``vit_tiny``, ``bert_tiny``, ``svtr_mix``, ``c2psa``).

Every model has batch 1 (``paddle_cnn`` once given ``PADDLE_SHAPES``).
"""
from __future__ import annotations

import glob
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from support import corpus_detect
from support import corpus_mobile
from support import corpus_transformer
from support.models import Builder

ZOO = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
       "shufflenet", "squeezenet", "vgg19", "zfnet512")
BUILT = ("mobilenet_v2", "densenet_block", "shufflenet_unit", "paddle_cnn", "yolo_detect",
         "mobilenet_v3_small") + tuple(corpus_transformer.MODELS)
PADDLE_SHAPES = {"image": [1, 3, 32, 32]}
# Ops that pass a weight through unchanged in value: its role is its consumer's.
_PASS_THROUGH = ("Unsqueeze", "Reshape", "Identity", "Squeeze", "Flatten", "Cast")


def zoo_dir() -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def zoo(name: str, seed: int = 0) -> onnx.ModelProto:
    """The light zoo model ``name`` (see ZOO) with seeded random weights, IR 4 or later."""
    model = onnx.load(os.path.join(zoo_dir(), f"light_{name}.onnx"))
    _materialise_fills(model)
    _randomise_weights(model, np.random.default_rng(seed))
    model.ir_version = max(model.ir_version, 4)
    _calibrate_batchnorm(model, feeds(model, seed=seed + 1))
    onnx.checker.check_model(model)
    return model


def zoo_names() -> List[str]:
    found = sorted(os.path.basename(p)[len("light_"):-len(".onnx")]
                   for p in glob.glob(os.path.join(zoo_dir(), "light_*.onnx")))
    return [n for n in found if n in ZOO]


def _materialise_fills(model: onnx.ModelProto) -> None:
    """ConstantOfShape nodes with a constant shape become initializers of that shape."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    keep = []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = numpy_helper.to_array(inits[node.input[0]]).astype(np.int64).tolist()
            value = next((numpy_helper.to_array(a.t) for a in node.attribute if a.name == "value"),
                         np.zeros(1, np.float32))
            filled = np.full(shape, value.reshape(-1)[0], dtype=value.dtype)
            graph.initializer.append(numpy_helper.from_array(filled, node.output[0]))
        else:
            keep.append(node)
    del graph.node[:]
    graph.node.extend(keep)
    used = {i for n in graph.node for i in n.input}
    kept_inits = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept_inits)
    inputs = [i for i in graph.input if i.name in used or i.name not in inits]
    del graph.input[:]
    graph.input.extend(i for i in inputs if i.name not in {t.name for t in kept_inits})


def _role(model: onnx.ModelProto, name: str) -> Tuple[Optional[onnx.NodeProto], int]:
    """The node (and input index) that finally uses the value of ``name``."""
    consumers = {}
    for node in model.graph.node:
        for k, inp in enumerate(node.input):
            consumers.setdefault(inp, []).append((node, k))
    seen = 0
    while name in consumers and seen < 8:
        node, k = consumers[name][0]
        if node.op_type not in _PASS_THROUGH or k != 0:
            return node, k
        name, seen = node.output[0], seen + 1
    return None, -1


def _random_for(node: Optional[onnx.NodeProto], index: int, shape: Sequence[int],
                rng: np.random.Generator) -> Optional[np.ndarray]:
    op = node.op_type if node is not None else ""
    normal = rng.standard_normal(shape)
    if op == "BatchNormalization":
        return {1: 1 + 0.1 * normal, 2: 0.1 * normal, 3: 0.1 * normal,
                4: 0.5 + rng.random(shape)}.get(index)
    if op in ("Conv", "Gemm", "MatMul") and index == 1 and len(shape) >= 2:
        trans_b = any(a.name == "transB" and a.i for a in node.attribute)
        fan_in = int(np.prod(shape[1:])) if op == "Conv" or trans_b else int(shape[0])
        return normal * np.sqrt(2.0 / max(fan_in, 1))
    if op in ("Conv", "Gemm") and index == 2:
        return 0.05 * normal
    if op == "Mul":
        return 1 + 0.1 * normal
    if op in ("Add", "Sum"):
        return 0.1 * normal
    return None


def _randomise_weights(model: onnx.ModelProto, rng: np.random.Generator) -> None:
    for k, tensor in enumerate(model.graph.initializer):
        if tensor.data_type != TensorProto.FLOAT:
            continue
        node, index = _role(model, tensor.name)
        value = _random_for(node, index, list(tensor.dims), rng)
        if value is not None:
            model.graph.initializer[k].CopyFrom(
                numpy_helper.from_array(value.astype(np.float32), tensor.name))


def _calibrate_batchnorm(model: onnx.ModelProto, feed: Dict[str, np.ndarray]) -> None:
    """BatchNormalization's mean and variance become the statistics of its input on ``feed``,
    measured once with the random statistics in place.

    Random weights with fixed statistics let activations grow block after block (a ResNet-50's
    logits reach 1e4, a ShuffleNet's pass fp16's 65504), so the softmax is one-hot and every
    comparison degenerate. One pass brings the largest activation of both to about 30; further
    passes, measured on the already normalised front, oscillate (a dead channel's variance
    floor multiplies later) and overflow, so there is one."""
    from support.models import run_ort
    bns = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
    if not bns:
        return
    inits = {t.name: k for k, t in enumerate(model.graph.initializer)}
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(helper.make_empty_tensor_value_info(n.input[0]) for n in bns)
    values = run_ort(probe, feed, [n.input[0] for n in bns])
    for node in bns:
        x = values[node.input[0]].astype(np.float64)
        axes = tuple(a for a in range(x.ndim) if a != 1)
        var = x.var(axis=axes)
        var = np.maximum(var, 0.1 * var.mean()) + 1e-5  # dead channels: no 300x gain
        for index, stat in ((3, x.mean(axis=axes)), (4, var)):
            name = node.input[index]
            model.graph.initializer[inits[name]].CopyFrom(
                numpy_helper.from_array(stat.astype(np.float32), name))


# ---- built models ------------------------------------------------------------------------

def built(name: str, seed: int = 0) -> onnx.ModelProto:
    return {"mobilenet_v2": mobilenet_v2, "densenet_block": densenet_block,
            "shufflenet_unit": shufflenet_unit, "paddle_cnn": paddle_cnn,
            "yolo_detect": corpus_detect.yolo_detect,
            "mobilenet_v3_small": corpus_mobile.mobilenet_v3_small,
            **corpus_transformer.MODELS}[name](seed)


#: ``model("example")``: the bundled example, the RFC's CNN (not one of the corpus' ALL)
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "mnist_cnn",
                       "mnist_cnn.onnx")


def model(name: str) -> onnx.ModelProto:
    """The zoo or built model ``name``, or ``example``."""
    if name == "example":
        return onnx.load(EXAMPLE)
    return zoo(name) if name in ZOO else built(name)


def shapes_for(name: str) -> Optional[Dict[str, List[int]]]:
    return PADDLE_SHAPES if name == "paddle_cnn" else None


def _relu6(b: Builder, x: str, spelling: str) -> str:
    if spelling == "clip":
        return b.op("Clip", [x, b.const(np.array(0, np.float32)),
                             b.const(np.array(6, np.float32))])
    return b.op("Min", [b.op("Relu", [x]), b.const(np.array(6, np.float32))])


def _conv_bn(b: Builder, x: str, cin: int, cout: int, k: int, stride: int = 1,
             group: int = 1) -> str:
    y = b.conv(x, cin, cout, k=k, bias=False, strides=[stride, stride], group=group,
               pads=[k // 2] * 4)
    return b.bn(y, cout)


def mobilenet_v2(seed: int = 0) -> onnx.ModelProto:
    """Stem, four inverted residual blocks (expand 1x1, depthwise 3x3, linear project 1x1),
    Relu6 written as Clip(0, 6) or Min(Relu(x), 6), global pool, Reshape, FC."""
    b = Builder(seed, opset=13)
    x = b.input("x", [1, 3, 32, 32])
    y = _relu6(b, _conv_bn(b, x, 3, 16, 3, stride=2), "clip")
    blocks = [(16, 16, 1, "clip"), (16, 24, 2, "min"), (24, 24, 1, "clip"), (24, 32, 2, "min")]
    for cin, cout, stride, spelling in blocks:
        mid = cin * 4
        h = _relu6(b, _conv_bn(b, y, cin, mid, 1), spelling)
        h = _relu6(b, _conv_bn(b, h, mid, mid, 3, stride=stride, group=mid), spelling)
        h = _conv_bn(b, h, mid, cout, 1)
        y = b.op("Add", [y, h]) if (cin, stride) == (cout, 1) else h
    y = _relu6(b, _conv_bn(b, y, 32, 64, 1), "clip")
    y = b.op("GlobalAveragePool", [y])
    y = b.op("Reshape", [y, b.const(np.array([1, 64], np.int64))])
    y = b.gemm(y, 64, 10, transB=1)
    return b.model([y], name="mobilenet_v2")


def densenet_block(seed: int = 0) -> onnx.ModelProto:
    """Stem conv, one dense block of 4 pre-activation layers (BN -> Relu -> Conv1x1 -> BN ->
    Relu -> Conv3x3, concatenated), a transition (BN -> Relu -> Conv1x1 -> AvgPool), head."""
    b = Builder(seed, opset=13)
    x = b.input("x", [1, 3, 32, 32])
    y = b.conv(x, 3, 16, k=3, pads=[1, 1, 1, 1])
    channels, growth = 16, 8
    for _ in range(4):
        h = b.conv(b.op("Relu", [b.bn(y, channels)]), channels, 4 * growth, k=1, bias=False)
        h = b.conv(b.op("Relu", [b.bn(h, 4 * growth)]), 4 * growth, growth, k=3, bias=False,
                   pads=[1, 1, 1, 1])
        y = b.op("Concat", [y, h], axis=1)
        channels += growth
    y = b.conv(b.op("Relu", [b.bn(y, channels)]), channels, 24, k=1, bias=False)
    y = b.op("AveragePool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = b.op("GlobalAveragePool", [b.op("Relu", [b.bn(y, 24)])])
    y = b.gemm(b.op("Flatten", [y], axis=1), 24, 10, transB=1)
    return b.model([y], name="densenet_block")


def _shuffle(b: Builder, x: str, groups: int, channels: int, size: int) -> str:
    y = b.op("Reshape", [x, b.const(np.array([1, groups, channels // groups, size, size],
                                             np.int64))])
    y = b.op("Transpose", [y], perm=[0, 2, 1, 3, 4])
    return b.op("Reshape", [y, b.const(np.array([1, channels, size, size], np.int64))])


def shufflenet_unit(seed: int = 0) -> onnx.ModelProto:
    """Stem, then two ShuffleNet v1 units (grouped 1x1 conv, channel shuffle, depthwise 3x3,
    grouped 1x1 conv, Sum with the shortcut, Relu), head."""
    b = Builder(seed, opset=13)
    x = b.input("x", [1, 3, 16, 16])
    y = b.op("Relu", [_conv_bn(b, x, 3, 24, 3)])
    groups, channels, size = 3, 24, 16
    for _ in range(2):
        h = b.op("Relu", [_conv_bn(b, y, channels, channels, 1, group=groups)])
        h = _shuffle(b, h, groups, channels, size)
        h = _conv_bn(b, h, channels, channels, 3, group=channels)
        h = _conv_bn(b, h, channels, channels, 1, group=groups)
        y = b.op("Relu", [b.op("Sum", [y, h])])
    y = b.op("GlobalAveragePool", [y])
    y = b.gemm(b.op("Flatten", [y], axis=1), channels, 10, transB=1)
    return b.model([y], name="shufflenet_unit")


def paddle_cnn(seed: int = 0) -> onnx.ModelProto:
    """As Paddle writes a small classifier: batch -1 on input and output, normalisation as Sub
    and Div (by 0.5, exact, and by 0.229, not), Relu as Max(x, 0), a hard-swish
    (x * Clip(x + 3, 0, 6) / 6), a Reshape to [-1, features] before the FC."""
    b = Builder(seed, opset=13)
    x = b.input("image", [-1, 3, 32, 32])
    y = b.op("Sub", [x, b.const(np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1))])
    y = b.op("Div", [y, b.const(np.array(0.5, np.float32))])
    y = b.op("Max", [_conv_bn(b, y, 3, 16, 3, stride=2), b.const(np.array(0, np.float32))])
    y = b.op("Div", [y, b.const(np.array(0.229, np.float32))])
    h = _conv_bn(b, y, 16, 32, 3, stride=2)
    gate = b.op("Clip", [b.op("Add", [h, b.const(np.array(3, np.float32))]),
                         b.const(np.array(0, np.float32)), b.const(np.array(6, np.float32))])
    y = b.op("Div", [b.op("Mul", [h, gate]), b.const(np.array(6, np.float32))])
    y = b.op("Max", [_conv_bn(b, y, 32, 32, 3), b.const(np.array(0, np.float32))])
    y = b.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = b.op("Reshape", [y, b.const(np.array([-1, 32 * 4 * 4], np.int64))])
    y = b.gemm(y, 512, 10, transB=1)
    model = b.model([y], name="paddle_cnn")
    model.graph.output[0].type.tensor_type.shape.dim[0].Clear()
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = -1
    return model


def feeds(model: onnx.ModelProto, shapes: Optional[Dict[str, List[int]]] = None,
          seed: int = 0) -> Dict[str, np.ndarray]:
    """One seeded standard-normal input per graph input (``shapes`` fixes dynamic dims); an
    int64 input (token ids, attention mask) gets 0s and 1s, valid as either."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    out = {}
    for value in model.graph.input:
        if value.name in inits:
            continue
        shape = (shapes or {}).get(value.name) or [d.dim_value for d in
                                                   value.type.tensor_type.shape.dim]
        if value.type.tensor_type.elem_type == TensorProto.INT64:
            out[value.name] = rng.integers(0, 2, shape).astype(np.int64)
        else:
            out[value.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def _self_check() -> None:  # pragma: no cover - PYTHONPATH=tests python -m support.corpus
    for name in zoo_names():
        model = zoo(name)
        print(name, len(model.graph.node), "nodes")
    for name in BUILT:
        print(name, len(built(name).graph.node), "nodes")


if __name__ == "__main__":  # pragma: no cover
    _self_check()
