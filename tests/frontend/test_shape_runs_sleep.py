"""frontend/shapes.py's runs for the shapes inference leaves unknown: onnxruntime's idle
workers sleep (issue 45: spinning between the ops of a whole-model run was most of its CPU
time), and the shapes are the ones computed."""
from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.frontend.shapes import resolve_shapes


def _gelu_graph() -> gs.Graph:
    """Conv -> com.microsoft Gelu (onnx infers no shape after it) -> Conv."""
    weight = numpy_helper.from_array(np.full((4, 4, 3, 3), 0.1, np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Gelu", ["c0"], ["g"], domain="com.microsoft"),
             helper.make_node("Conv", ["g", "w"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 4, 8, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    return gs.import_onnx(model)


def test_the_shape_runs_workers_sleep_and_give_the_shapes(monkeypatch):
    spinning = []
    session = ort.InferenceSession

    def recording(model, options=None, **kwargs):
        spinning.append(options.get_session_config_entry("session.intra_op.allow_spinning"))
        return session(model, options, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", recording)
    graph = _gelu_graph()
    assert resolve_shapes(graph, 8) == {}
    assert spinning == ["0"]
    tensors = graph.tensors()
    assert tensors["g"].shape == [1, 4, 8, 8] and tensors["y"].shape == [1, 4, 8, 8]
