"""Recurrent heads as exporters write them (``frontend/pick_forms.py``,
``frontend/concat_views.py``): tf2onnx's bidirectional LSTMs (openwakeword's hey_mycroft: Y
sliced per direction, Squeezed, joined on the last axis of ``[T, N, h]``; the last steps'
states joined on ``[N, h]``) and PyTorch's GRU final states (speechmos' plcmos_v2: two
``Y_h`` joined on axis 0, rows picked by scalar Gathers, joined on the last axis into a Gemm);
and one rewrite run alone on a model, to compare it with the original on onnxruntime."""
from __future__ import annotations

from typing import Callable, Dict

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.frontend.canonical_forms import Rewrites


def _init(name: str, value, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def _model(nodes, name: str, x_shape, y_shape, inits, opset: int) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=8)


def _directions(y: str, prefix: str):
    """tf2onnx's split of a bidirectional ``Y`` ``[T, 2, N, h]``: Slice each direction on axis
    1, Squeeze it: ``[T, N, h]`` each (forward, backward)."""
    n = helper.make_node
    nodes, outs = [], []
    for d, (start, end) in enumerate((("i0", "i1"), ("i1", "i2"))):
        nodes += [n("Slice", [y, start, end, "ax1"], [f"{prefix}d{d}"], name=f"{prefix}slice{d}"),
                  n("Squeeze", [f"{prefix}d{d}", "ax1"], [f"{prefix}s{d}"],
                    name=f"{prefix}squeeze{d}")]
        outs.append(f"{prefix}s{d}")
    return nodes, outs


def tf2onnx_bilstm(steps: int = 6, width: int = 8, hidden: int = 4, hidden2: int = 3,
                   seed: int = 0, opset: int = 14) -> onnx.ModelProto:
    """x ``[1, T, I]`` -> Transpose -> BiLSTM -> directions joined by ``Concat(axis=2)``
    (``cat_dirs``) -> BiLSTM -> each direction's last step (forward: step T-1, backward: 0)
    Sliced on axis 0 and Squeezed to ``[N, h2]``, joined by ``Concat(axis=1)`` (``cat_last``)
    -> MatMul + Add -> Sigmoid, y ``[1, 1]``."""
    rng = np.random.default_rng(seed)
    inits = [_init("W1", rng.standard_normal((2, 4 * hidden, width)) * 0.3),
             _init("R1", rng.standard_normal((2, 4 * hidden, hidden)) * 0.3),
             _init("B1", rng.standard_normal((2, 8 * hidden)) * 0.1),
             _init("W2", rng.standard_normal((2, 4 * hidden2, 2 * hidden)) * 0.3),
             _init("R2", rng.standard_normal((2, 4 * hidden2, hidden2)) * 0.3),
             _init("dw", rng.standard_normal((2 * hidden2, 1))),
             _init("db", rng.standard_normal(1))]
    inits += [_init(k, [v], np.int64) for k, v in (("i0", 0), ("i1", 1), ("i2", 2), ("ax0", 0),
                                                    ("ax1", 1), ("last", steps - 1),
                                                    ("end", steps))]
    n = helper.make_node
    first, (f1, b1) = _directions("Y1", "l1")
    second, (f2, b2) = _directions("Y2", "l2")
    nodes = [n("Transpose", ["x"], ["xt"], perm=[1, 0, 2], name="to_time"),
             n("LSTM", ["xt", "W1", "R1", "B1"], ["Y1"], hidden_size=hidden,
               direction="bidirectional", name="lstm1"), *first,
             n("Concat", [f1, b1], ["joined"], axis=2, name="cat_dirs"),
             n("LSTM", ["joined", "W2", "R2"], ["Y2"], hidden_size=hidden2,
               direction="bidirectional", name="lstm2"), *second,
             n("Slice", [f2, "last", "end", "ax0"], ["f_last"], name="f_last"),
             n("Squeeze", ["f_last", "ax0"], ["f_state"], name="f_state"),
             n("Slice", [b2, "i0", "i1", "ax0"], ["b_first"], name="b_first"),
             n("Squeeze", ["b_first", "ax0"], ["b_state"], name="b_state"),
             n("Concat", ["f_state", "b_state"], ["states"], axis=1, name="cat_last"),
             n("MatMul", ["states", "dw"], ["m"], name="dense"),
             n("Add", ["m", "db"], ["a"], name="dense_bias"),
             n("Sigmoid", ["a"], ["y"], name="score")]
    return _model(nodes, "hey_bilstm", [1, steps, width], [1, 1], inits, opset)


def torch_gru_states(steps: int = 5, width: int = 6, hidden: int = 4, classes: int = 3,
                     seed: int = 0, opset: int = 14) -> onnx.ModelProto:
    """x ``[1, T, I]`` -> Transpose -> two bidirectional GRUs, their ``Y_h`` ``[2, N, h]``
    joined on axis 0 (``cat_states``, ``[4, N, h]``), rows -2 and -1 picked by scalar
    Gathers (``pick_a``, ``pick_b``) and joined on the last axis (``cat_picked``); the first
    GRU's rows 0 and 1 the same way (``cat_first``); both joined on the last axis
    (``cat_features``, ``[N, 4h]``) -> Gemm, y ``[1, classes]``."""
    rng = np.random.default_rng(seed)
    inits = [_init("W1", rng.standard_normal((2, 3 * hidden, width)) * 0.3),
             _init("R1", rng.standard_normal((2, 3 * hidden, hidden)) * 0.3),
             _init("B1", rng.standard_normal((2, 6 * hidden)) * 0.1),
             _init("W2", rng.standard_normal((2, 3 * hidden, width)) * 0.3),
             _init("R2", rng.standard_normal((2, 3 * hidden, hidden)) * 0.3),
             _init("gw", rng.standard_normal((4 * hidden, classes))),
             _init("gb", rng.standard_normal(classes))]
    inits += [_init(k, v, np.int64) for k, v in (("minus2", -2), ("minus1", -1), ("zero", 0),
                                                  ("one", 1))]
    n = helper.make_node
    nodes = [n("Transpose", ["x"], ["xt"], perm=[1, 0, 2], name="to_time"),
             n("GRU", ["xt", "W1", "R1", "B1"], ["", "h1"], hidden_size=hidden,
               direction="bidirectional", linear_before_reset=1, name="gru1"),
             n("GRU", ["xt", "W2", "R2"], ["", "h2"], hidden_size=hidden,
               direction="bidirectional", linear_before_reset=1, name="gru2"),
             n("Concat", ["h1", "h2"], ["states"], axis=0, name="cat_states"),
             n("Gather", ["states", "minus2"], ["a"], axis=0, name="pick_a"),
             n("Gather", ["states", "minus1"], ["b"], axis=0, name="pick_b"),
             n("Concat", ["a", "b"], ["picked"], axis=-1, name="cat_picked"),
             n("Gather", ["h1", "zero"], ["c"], axis=0, name="pick_c"),
             n("Gather", ["h1", "one"], ["d"], axis=0, name="pick_d"),
             n("Concat", ["c", "d"], ["first"], axis=1, name="cat_first"),
             n("Concat", ["picked", "first"], ["features"], axis=-1, name="cat_features"),
             n("Gemm", ["features", "gw", "gb"], ["y"], name="head")]
    return _model(nodes, "plc_gru", [1, steps, width], [1, classes], inits, opset)


def applied(model: onnx.ModelProto, rewrite: Callable[[gs.Graph, Rewrites], bool]):
    """(``model`` after ``rewrite(graph, done)`` alone (shapes inferred first), the Rewrites,
    whether it changed anything)."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    graph, done = gs.import_onnx(inferred), Rewrites()
    changed = rewrite(graph, done)
    graph.cleanup(remove_unused_graph_inputs=False).toposort()
    proto = gs.export_onnx(graph, do_type_check=False)
    proto.ir_version = model.ir_version
    proto.opset_import[0].version = model.opset_import[0].version
    return proto, done, changed


def feeds(model: onnx.ModelProto, seed: int = 1) -> Dict[str, np.ndarray]:
    """Standard normal float inputs, values spread over decades (a data move keeps every bit)."""
    rng = np.random.default_rng(seed)
    out = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        out[i.name] = (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, shape)
                       ).astype(np.float32)
    return out


def assert_bit_equal(model: onnx.ModelProto, rewritten: onnx.ModelProto) -> None:
    """Both run on onnxruntime (no graph optimization) give the same outputs, bit for bit."""
    from support.models import run_ort
    feed = feeds(model)
    want = run_ort(model, feed, optimize=False)
    got = run_ort(rewritten, feed, optimize=False)
    assert set(got) == set(want)
    for name, value in want.items():
        assert got[name].shape == value.shape, name
        assert np.array_equal(got[name].view(np.uint32), value.view(np.uint32)), name
