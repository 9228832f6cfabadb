"""deepfilternet-enc-like networks for the int8 tests (issue 45: enc in int8 as whole as in
fp16): Conv -> Relu, its result also a model output (enc's ``e0``/``c0``), then a depthwise
``[1, 3]`` Conv (stride 2 along F, no bias) and a pointwise Conv -> Relu, laid out as tokens
``[1, T, g, i]`` (Transpose + Reshape) and a grouped linear ``Einsum btgi,gih->btgh`` ->
Reshape ``[1, T, g h]`` -> Relu (-> Add of a constant). Quantized by our recipe, the depthwise Conv reads the
DequantizeLinear that writes the model output (``frontend/qdq.py``) and the Einsum sits between
QDQ pairs (``frontend/einsum_forms.py``; verify's reference rewrites it likewise,
``frontend/recurrent_reference.py``)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.quantize import Quantization


@dataclass(frozen=True)
class EncNet:
    """The sizes of one network: channels = groups * inner (the tokens' last two axes), the
    input ``[1, 2, frames, bins]``, the depthwise Conv halving ``bins``."""
    frames: int = 6
    bins: int = 8
    groups: int = 4
    inner: int = 2
    hidden: int = 3
    tap_output: bool = True  # the first Relu's result is also a model output
    # y = Relu(...) + a constant: quantize_static quantizes the Add, so the Relu after the
    # Einsum feeds a QuantizeLinear (enc's df_fc_emb -> Relu -> combine/Add)
    tail_add: bool = False
    seed: int = 0

    @property
    def channels(self) -> int:
        return self.groups * self.inner

    @property
    def half(self) -> int:  # the depthwise Conv's output width: pads 1, kernel 3, stride 2
        return (self.bins - 1) // 2 + 1


def enc_net(net: EncNet = EncNet()) -> onnx.ModelProto:
    """The network of ``net`` (module docstring); outputs ``y`` [1, T, g h] (and ``e0``)."""
    rng = np.random.default_rng(net.seed)
    c, t = net.channels, net.frames
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1], name="conv0"),
        helper.make_node("Relu", ["c0"], ["e0"], name="relu0"),
        helper.make_node("Conv", ["e0", "wd"], ["d"], group=c, kernel_shape=[1, 3],
                         pads=[0, 1, 0, 1], strides=[1, 2], name="depthwise"),
        helper.make_node("Conv", ["d", "w1", "b1"], ["p"], name="pointwise"),
        helper.make_node("Relu", ["p"], ["r1"], name="relu1"),
        helper.make_node("Transpose", ["r1"], ["tr"], perm=[0, 2, 3, 1], name="to_tokens"),
        helper.make_node("Reshape", ["tr", "grouped"], ["g"], name="group"),
        helper.make_node("Einsum", ["g", "wg"], ["e"], equation="btgi,gih->btgh",
                         name="grouped_linear"),
        helper.make_node("Reshape", ["e", "joined"], ["j"], name="join"),
        helper.make_node("Relu", ["j"], ["y_relu" if net.tail_add else "y"], name="relu2"),
    ]
    if net.tail_add:
        nodes.append(helper.make_node("Add", ["y_relu", "shift"], ["y"], name="tail"))
    inits = {
        "w0": rng.standard_normal((c, 2, 3, 3)) / 4, "b0": 0.1 * rng.standard_normal(c),
        "wd": rng.standard_normal((c, 1, 1, 3)) / 2,
        "w1": rng.standard_normal((c, c, 1, 1)) / np.sqrt(c), "b1": 0.1 * rng.standard_normal(c),
        # tokens [1, T, W, C] -> [1, T, g, W C / g]: the Einsum's i is inner * W
        "grouped": np.array([1, t, net.groups, net.inner * net.half], np.int64),
        "wg": rng.standard_normal((net.groups, net.inner * net.half, net.hidden)) / 2,
        "joined": np.array([1, t, net.groups * net.hidden], np.int64),
        "shift": 0.1 * rng.standard_normal(net.groups * net.hidden),
    }
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                             [1, t, net.groups * net.hidden])]
    if net.tap_output:
        outputs.append(helper.make_tensor_value_info("e0", TensorProto.FLOAT,
                                                     [1, c, t, net.bins]))
    arrays = [numpy_helper.from_array(v if v.dtype == np.int64 else v.astype(np.float32), k)
              for k, v in inits.items()]
    graph = helper.make_graph(
        nodes, "enc_like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, t, net.bins])],
        outputs, arrays)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@st.composite
def enc_nets(draw) -> EncNet:
    return EncNet(frames=draw(st.integers(2, 9)), bins=draw(st.integers(3, 12)),
                  groups=draw(st.integers(1, 5)), inner=draw(st.integers(1, 3)),
                  hidden=draw(st.integers(1, 6)), tap_output=draw(st.booleans()),
                  tail_add=draw(st.booleans()),
                  seed=draw(st.integers(0, 2 ** 16)))


def feeds(net: EncNet, count: int = 3) -> List[Dict[str, np.ndarray]]:
    rng = np.random.default_rng(net.seed + 1)
    return [{"x": rng.standard_normal((1, 2, net.frames, net.bins)).astype(np.float32)}
            for _ in range(count)]


def converted(net: EncNet, out: Path) -> "mrvl_convert.Result":
    """``enc_net(net)`` converted with our int8 recipe on 16 seeded normal samples."""
    rng = np.random.default_rng(net.seed + 2)
    calibration = {"x": rng.standard_normal((16, 2, net.frames, net.bins)).astype(np.float32)}
    return mrvl_convert.convert(enc_net(net), out, quantize=Quantization(calibration))


def verified(result: "mrvl_convert.Result", net: EncNet) -> Any:
    """verify of the int8 artifact against the QDQ model it keeps, on ``feeds(net)``."""
    qdq = result.out_dir / result.manifest["quantization"]["file"]
    return mrvl_convert.compare(qdq, result.out_dir, feeds(net), with_floor=False)


def assert_whole_and_bit_equal(result: "mrvl_convert.Result", net: EncNet) -> None:
    """One Mrvl subgraph, nothing on CPU, the depthwise Conv an int8 layer, and verify against
    the QDQ model PASS with every judged tensor at max_abs 0."""
    placed = {n["name"]: n for n in result.report["nodes"]}
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0), [
        (name, p.get("reason")) for name, p in placed.items() if p["placement"] != "mrvl"]
    assert placed["depthwise"].get("rule") == "mrvl.qnn_conv2d", placed["depthwise"]
    comparison = verified(result, net)
    assert comparison.passed, comparison.summary_line()
    assert all(row.max_abs == 0 for row in comparison.judged_rows), comparison.summary_line()
