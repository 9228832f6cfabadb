"""Small models with a per-step head after a recurrent cell over T steps, as EEG, OCR and audio
models write them: a Conv front end -> Reshape -> Transpose to ``[T, 1, C]`` -> LSTM/GRU/RNN ->
the head on every step's state (``frontend/step_heads.py``)."""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.sequence_lift import lift_sequences
from mrvl_convert.frontend.step_heads import lift_step_heads
from support.recurrent import GATES

# How the head reads Y [T, D, 1, h]:
#   "squeeze": Squeeze(1) (D = 1) -> [T, 1, h] -> MatMul + Add -> [T, 1, classes]
#   "crnn":    Transpose(0, 2, 1, 3) -> Reshape [T, 1, D h] -> MatMul + Add -> Softmax
#   "gemm":    Transpose(0, 2, 1, 3) -> Reshape [T, D h] -> Gemm(transB) -> [T, classes]
HEADS = ("squeeze", "crnn", "gemm")


def _head(head: str, steps: int, width: int, classes: int) -> List[onnx.NodeProto]:
    make = helper.make_node
    if head == "squeeze":
        return [make("Squeeze", ["Y", "axis1"], ["feat"], name="drop_dirs"),
                make("MatMul", ["feat", "hw"], ["m"], name="head"),
                make("Add", ["m", "hb"], ["logits"], name="head_bias")]
    view = [make("Transpose", ["Y"], ["Yt"], name="dirs_last", perm=[0, 2, 1, 3]),
            make("Reshape", ["Yt", "shape2"], ["feat"], name="join_dirs")]
    if head == "gemm":
        return view + [make("Gemm", ["feat", "hwt", "hb"], ["logits"], name="head", transB=1)]
    return view + [make("MatMul", ["feat", "hw"], ["m"], name="head"),
                   make("Add", ["m", "hb"], ["scores"], name="head_bias"),
                   make("Softmax", ["scores"], ["logits"], name="probs", axis=2)]


def _out_shape(head: str, steps: int, classes: int) -> List[int]:
    return [steps, classes] if head == "gemm" else [steps, 1, classes]


def step_head_model(cell: str = "LSTM", head: str = "crnn", steps: int = 30, hidden: int = 8,
                    classes: int = 5, direction: str = "bidirectional", rows: int = 4,
                    seed: int = 0) -> onnx.ModelProto:
    """image ``[1, 3, rows, steps]`` -> Conv(8, 3x3) Relu -> Reshape ``[1, 8 rows, T]`` ->
    Transpose ``[T, 1, 8 rows]`` -> ``cell`` (``direction``) -> ``head`` (``HEADS``) ->
    ``logits``."""
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    width, gates = 8 * rows, GATES[cell]
    inits: Dict[str, np.ndarray] = {
        "cw": rng.standard_normal((8, 3, 3, 3)) * 0.3, "cb": rng.standard_normal(8) * 0.1,
        "shape1": np.array([1, width, steps]),
        "shape2": np.array([steps, dirs * hidden] if head == "gemm"
                           else [steps, 1, dirs * hidden]),
        "axis1": np.array([1]),
        "W": rng.standard_normal((dirs, gates * hidden, width)) * 0.2,
        "R": rng.standard_normal((dirs, gates * hidden, hidden)) * 0.3,
        "B": rng.standard_normal((dirs, 2 * gates * hidden)) * 0.1,
        "hw": rng.standard_normal((dirs * hidden, classes)) * 0.3,
        "hb": rng.standard_normal(classes) * 0.1}
    inits["hwt"] = inits["hw"].T
    extra = {"linear_before_reset": 1} if cell == "GRU" else {}
    nodes = [
        helper.make_node("Conv", ["image", "cw", "cb"], ["c"], name="conv", pads=[1] * 4),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape1"], ["f"], name="flatten"),
        helper.make_node("Transpose", ["f"], ["seq"], name="to_seq", perm=[2, 0, 1]),
        helper.make_node(cell, ["seq", "W", "R", "B"], ["Y"], name="rnn", hidden_size=hidden,
                         direction=direction, **extra)] + _head(head, steps, width, classes)
    ints = ("shape1", "shape2", "axis1")
    graph = helper.make_graph(
        nodes, "step_head", [helper.make_tensor_value_info("image", TensorProto.FLOAT,
                                                           [1, 3, rows, steps])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                       _out_shape(head, steps, classes))],
        [numpy_helper.from_array(np.asarray(v, np.int64 if k in ints else np.float32), k)
         for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)


def lifted_heads(model: onnx.ModelProto) -> Tuple[onnx.ModelProto, gs.Graph, Rewrites]:
    """``step_heads.py`` (from the model's first input as the joined steps) then
    ``sequence_lift.py`` on ``model`` (opset 14), as ``recurrent_unroll.py`` and canonicalize
    run them: (the model after, its graph, the rewrites)."""
    graph, done = gs.import_onnx(model), Rewrites()
    assert lift_step_heads(graph, [graph.inputs[0]], 14, done)
    graph.cleanup().toposort()
    assert lift_sequences(graph, 14, done)
    graph.cleanup().toposort()
    proto = gs.export_onnx(graph)
    proto.ir_version = model.ir_version
    return proto, graph, done


def joined_steps_model(name: str, nodes: List[onnx.NodeProto], joined: int,
                       outputs: Dict[str, List[int]], inits: Dict[str, np.ndarray]
                       ) -> onnx.ModelProto:
    """A head's test model (opset 14) on an unrolled cell's joined steps: float input
    ``joined`` ``[1, joined, 1, 1]``, float ``outputs`` (name -> shape), shapes inferred."""
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("joined", TensorProto.FLOAT,
                                                    [1, joined, 1, 1])],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model)


def quantized_steps_nodes() -> List[onnx.NodeProto]:
    """``joined`` -> ``Y`` (by ``yshape``) -> Transpose(0, 2, 1, 3) -> ``feat`` (by ``fshape``)
    -> a QuantizeLinear and DequantizeLinear (``s_in``, ``z8``) -> ``fdq``: a QDQ head's
    steps."""
    make = helper.make_node
    return [make("Reshape", ["joined", "yshape"], ["Y"], name="as_y"),
            make("Transpose", ["Y"], ["Yt"], name="dirs_last", perm=[0, 2, 1, 3]),
            make("Reshape", ["Yt", "fshape"], ["feat"], name="join_dirs"),
            make("QuantizeLinear", ["feat", "s_in", "z8"], ["fq"], name="feat_q"),
            make("DequantizeLinear", ["fq", "s_in", "z8"], ["fdq"], name="feat_dq")]
