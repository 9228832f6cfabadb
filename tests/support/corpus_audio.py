"""An audio model as Silero-VAD-style exporters write it (seeded random weights): an STFT written
as a Conv front end, then an ``If`` on a scalar sample-rate input choosing the branch for
16 kHz or 8 kHz, with a recurrent state as an input (``state``) and an output (``stateN``).

- the front end: ``input`` [1, 512] -> Unsqueeze to [1, 1, 1, 512] -> Conv (kernel 1x64,
  stride 32: 33 real and 33 imaginary filters) -> power (Slice, Mul, Add) -> Conv 33 -> 64
  (1x3) + Relu;
- ``If(Equal(sr, 16000))``: the 16 kHz branch pools the features (GlobalAveragePool, Flatten),
  a tanh RNN cell on ``state`` [1, 1, 64] makes the new state and a Sigmoid the speech
  probability; the 8 kHz branch does the same with its own weights and writes the state's
  width as ``sr / 125`` (a Reshape whose target reads ``sr``, ``allowzero``): 64 at 8 kHz, 0
  on zeros, where onnxruntime fails on it. Shape inference cannot tell the If's ``stateN``.
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SAMPLES = 512
HIDDEN = 64
SHAPES = {"input": [1, SAMPLES], "state": [1, 1, HIDDEN]}


class _Nodes:
    def __init__(self, rng: np.random.Generator, prefix: str) -> None:
        self.rng, self.prefix = rng, prefix
        self.nodes: List[onnx.NodeProto] = []
        self.inits: List[onnx.TensorProto] = []

    def op(self, op_type: str, inputs, **attrs) -> str:
        name = f"{self.prefix}{op_type}_{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [name], name=name, **attrs))
        return name

    def const(self, value) -> str:
        name = f"{self.prefix}c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, *shape: int) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        return self.const((self.rng.standard_normal(shape) * fan_in ** -0.5).astype(np.float32))

    def ints(self, *values: int) -> str:
        return self.const(np.array(values, np.int64))


def _cell(g: _Nodes, pooled: str, width: int, outputs: List[str],
          reshaped: bool = False) -> onnx.GraphProto:
    """The RNN step on ``pooled`` [1, width]: new state and speech probability."""
    h0 = g.op("Reshape", ["state", g.ints(1, HIDDEN)])
    h = g.op("Tanh", [g.op("Add", [g.op("MatMul", [pooled, g.weight(width, HIDDEN)]),
                                   g.op("MatMul", [h0, g.weight(HIDDEN, HIDDEN)])])])
    new = g.op("Unsqueeze", [h, g.ints(0)])
    if reshaped:  # to [1, 1, sr / 125]: the state's width follows from the sample rate
        width = g.op("Unsqueeze", [g.op("Div", ["sr", g.const(np.int64(125))]), g.ints(0)])
        new = g.op("Reshape", [new, g.op("Concat", [g.ints(1, 1), width], axis=0)],
                   allowzero=1)
    prob = g.op("Sigmoid", [g.op("MatMul", [h, g.weight(HIDDEN, 1)])])
    g.nodes.append(helper.make_node("Identity", [prob], [outputs[0]], name=f"{g.prefix}out"))
    g.nodes.append(helper.make_node("Identity", [new], [outputs[1]], name=f"{g.prefix}state"))
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, dims)
            for o, dims in zip(outputs, (["n", 1], ["one", "n", "hidden"]))]
    return helper.make_graph(g.nodes, f"{g.prefix}branch", [], outs, g.inits)


def _branch_16k(rng: np.random.Generator, features: str) -> onnx.GraphProto:
    g = _Nodes(rng, "b16_")
    pooled = g.op("Flatten", [g.op("GlobalAveragePool", [features])], axis=1)
    return _cell(g, pooled, HIDDEN, ["out_16k", "state_16k"])


def _branch_8k(rng: np.random.Generator, features: str) -> onnx.GraphProto:
    g = _Nodes(rng, "b8_")
    pooled = g.op("Flatten", [g.op("GlobalAveragePool", [features])], axis=1)
    return _cell(g, pooled, HIDDEN, ["out_8k", "state_8k"], reshaped=True)


def audio_vad(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    g = _Nodes(rng, "")
    x = g.op("Unsqueeze", ["input", g.ints(1, 2)])
    spectrum = g.op("Conv", [x, g.weight(66, 1, 1, 64)], kernel_shape=[1, 64], strides=[1, 32])
    real = g.op("Slice", [spectrum, g.ints(0), g.ints(33), g.ints(1)])
    imag = g.op("Slice", [spectrum, g.ints(33), g.ints(66), g.ints(1)])
    power = g.op("Add", [g.op("Mul", [real, real]), g.op("Mul", [imag, imag])])
    features = g.op("Relu", [g.op("Conv", [power, g.weight(HIDDEN, 33, 1, 3),
                                           g.weight(HIDDEN)], kernel_shape=[1, 3],
                                  pads=[0, 1, 0, 1])])
    is_16k = g.op("Equal", ["sr", g.const(np.int64(16000))])
    g.nodes.append(helper.make_node("If", [is_16k], ["output", "stateN"], name="If_sr",
                                    then_branch=_branch_16k(rng, features),
                                    else_branch=_branch_8k(rng, features)))
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", SAMPLES]),
              helper.make_tensor_value_info("state", TensorProto.FLOAT, [1, "batch", HIDDEN]),
              helper.make_tensor_value_info("sr", TensorProto.INT64, [])]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["unk_0", 1]),
               helper.make_tensor_value_info("stateN", TensorProto.FLOAT,
                                             ["unk_1", "unk_2", "unk_3"])]
    graph = helper.make_graph(g.nodes, "audio_vad", inputs, outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def feeds(seed: int = 0, sr: int = 16000) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"input": rng.standard_normal((1, SAMPLES)).astype(np.float32),
            "state": (0.5 * rng.standard_normal((1, 1, HIDDEN))).astype(np.float32),
            "sr": np.array(sr, np.int64)}
