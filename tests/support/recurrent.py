"""Small recurrent models built in the tests: one cell of any form, and a CRNN (Conv front end
-> BiLSTM -> FC head) as OCR and audio models write it; running a cell before and after
``frontend/recurrent_unroll.py`` and that module's bound."""
from __future__ import annotations

from typing import Dict, Optional, Sequence

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.recurrent_unroll import unroll_recurrent

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}

U = 2.0 ** -24


def run(model: onnx.ModelProto, feeds) -> Dict[str, np.ndarray]:
    """The model's outputs by name on onnxruntime."""
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds)))


def unrolled(model: onnx.ModelProto):
    """(the model with its cells unrolled, its graph, the Rewrites); every cell must be."""
    graph, done = gs.import_onnx(model), Rewrites()
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    assert unroll_recurrent(graph, done, opset), done.kept
    graph.cleanup().toposort()
    proto = gs.export_onnx(graph)
    proto.ir_version = model.ir_version
    return proto, graph, done


def feeds_for(model: onnx.ModelProto, seed: int = 1) -> Dict[str, np.ndarray]:
    """Standard normal values for every graph input."""
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]
                                        ).astype(np.float32) for i in model.graph.input}


def bound(model: onnx.ModelProto, feeds) -> float:
    """The module's bound, 2 (I + hidden + 1) u sum|terms| per pre-activation, times T^2: each
    of T steps adds its own, and a later step's R carries it on (a state sums up to T). A state
    is at most 1 in magnitude after a step, the initial one what it is."""
    values = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    values.update(feeds)
    w, r = np.abs(values["W"]), np.abs(values["R"])
    width, hidden = w.shape[2], r.shape[2]
    state = max([1.0] + [float(np.abs(values[s]).max()) for s in ("h0",) if s in values])
    terms = (np.abs(values["x"]).max() * w.sum(axis=2) + state * r.sum(axis=2)).max()
    terms += np.abs(values.get("B", np.zeros(1))).max() * 2
    cell = model.graph.node[0]
    layout = next((a.i for a in cell.attribute if a.name == "layout"), 0)
    steps = values["x"].shape[1 if layout else 0]
    return steps * steps * 2 * (width + hidden + 1) * U * float(terms)


def cell_model(op: str, direction: str = "forward", steps: int = 5, batch: int = 1,
               width: int = 3, hidden: int = 4, bias: bool = True, states: str = "none",
               outputs: Sequence[bool] = (True, True, True), lbr: int = 0, layout: int = 0,
               lens: Optional[Sequence[int]] = None, peepholes: bool = False, seed: int = 0,
               opset: int = 14, **attrs) -> onnx.ModelProto:
    """One cell reading ``x`` ``[T, N, I]`` (layout 1: ``[N, T, I]``); ``states``: "none",
    "inputs" (h0/c0 graph inputs) or "constants"; ``outputs``: which of Y, Y_h, Y_c are graph
    outputs (unused ones unnamed); ``lens``: a constant sequence_lens; ``peepholes``: a
    nonzero P. The same seed gives the same weights whatever the layout."""
    rng = np.random.default_rng(seed)
    gates, dirs = GATES[op], 2 if direction == "bidirectional" else 1
    inits = {"W": rng.standard_normal((dirs, gates * hidden, width)),
             "R": rng.standard_normal((dirs, gates * hidden, hidden)) * 0.5}
    names = ["x", "W", "R", ""]
    if bias:
        inits["B"] = rng.standard_normal((dirs, 2 * gates * hidden)) * 0.5
        names[3] = "B"
    seq = [batch, steps, width] if layout else [steps, batch, width]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, seq)]
    state = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
    names.append("")
    if lens is not None:
        inits["lens"] = np.asarray(lens, np.int32)
        names[4] = "lens"
    for s in (["h0", "c0"] if op == "LSTM" else ["h0"]):
        names.append(s if states != "none" else "")
        if states == "inputs":
            inputs.append(helper.make_tensor_value_info(s, TensorProto.FLOAT, state))
        elif states == "constants":
            inits[s] = rng.standard_normal(state)
    if peepholes:
        inits["P"] = rng.standard_normal((dirs, 3 * hidden))
        names.append("P")
    while names[-1] == "":
        names.pop()
    attrs = dict(hidden_size=hidden, direction=direction, **attrs)
    if op == "GRU":
        attrs["linear_before_reset"] = lbr
    if layout:
        attrs["layout"] = 1
    ys = [batch, steps, dirs, hidden] if layout else [steps, dirs, batch, hidden]
    shapes = {"Y": ys, "Y_h": state, "Y_c": state}
    out_names = [n if used else "" for n, used in zip(["Y", "Y_h", "Y_c"][:2 + (op == "LSTM")],
                                                      outputs)]
    while out_names and not out_names[-1]:
        out_names.pop()
    node = helper.make_node(op, names, out_names, name="cell", **attrs)
    graph = helper.make_graph(
        [node], "cell", inputs,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[n]) for n in out_names if n],
        [numpy_helper.from_array(np.asarray(v, v.dtype if k == "lens" else np.float32), k)
         for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=8)


def crnn(steps: int = 8, hidden: int = 16, classes: int = 10, seed: int = 0,
         cell: str = "LSTM", computed_weights: bool = False, **cell_attrs) -> onnx.ModelProto:
    """image [1, 3, 8, steps] -> Conv(8) Relu -> MaxPool(2x1) -> Reshape [1, 32, T] ->
    Transpose [T, 1, 32] -> bidirectional ``cell`` -> Transpose [T, 1, 2, h] -> Reshape
    [T, 1, 2h] -> MatMul + Add (classes) -> logits [T, 1, classes]. ``cell_attrs``: more
    attributes of the cell (GRU: linear_before_reset=1 unless given). ``computed_weights``: W
    is a Concat of two constants (paddle2onnx's LSTMs: the int8 recipe quantizes it)."""
    rng = np.random.default_rng(seed)
    gates = GATES[cell]
    inits: Dict[str, np.ndarray] = {
        "cw": rng.standard_normal((8, 3, 3, 3)) * 0.3, "cb": rng.standard_normal(8) * 0.1,
        "shape1": np.array([1, 32, steps]), "shape2": np.array([steps, 1, 2 * hidden]),
        "W": rng.standard_normal((2, gates * hidden, 32)) * 0.2,
        "R": rng.standard_normal((2, gates * hidden, hidden)) * 0.2,
        "B": rng.standard_normal((2, 2 * gates * hidden)) * 0.1,
        "hw": rng.standard_normal((2 * hidden, classes)) * 0.3,
        "hb": rng.standard_normal(classes) * 0.1}
    extra = {"linear_before_reset": 1} if cell == "GRU" else {}
    extra.update(cell_attrs)
    nodes = [
        helper.make_node("Conv", ["image", "cw", "cb"], ["c"], name="conv", pads=[1] * 4),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 1],
                         strides=[2, 1]),
        helper.make_node("Reshape", ["p", "shape1"], ["f"], name="flatten"),
        helper.make_node("Transpose", ["f"], ["seq"], name="to_seq", perm=[2, 0, 1]),
        helper.make_node(cell, ["seq", "Wc" if computed_weights else "W", "R", "B"], ["Y"],
                         name="rnn", hidden_size=hidden,
                         direction="bidirectional", **extra),
        helper.make_node("Transpose", ["Y"], ["Yt"], name="dirs_last", perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["Yt", "shape2"], ["feat"], name="join_dirs"),
        helper.make_node("MatMul", ["feat", "hw"], ["m"], name="head"),
        helper.make_node("Add", ["m", "hb"], ["logits"], name="head_bias")]
    if computed_weights:
        half = gates * hidden // 2
        inits["Wa"], inits["Wb"] = inits["W"][:, :half], inits.pop("W")[:, half:]
        nodes.insert(5, helper.make_node("Concat", ["Wa", "Wb"], ["Wc"], name="w_join", axis=1))
    graph = helper.make_graph(
        nodes, "crnn", [helper.make_tensor_value_info("image", TensorProto.FLOAT,
                                                      [1, 3, 8, steps])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [steps, 1, classes])],
        [numpy_helper.from_array(np.asarray(v, np.int64 if k.startswith("shape") else np.float32),
                                 k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
