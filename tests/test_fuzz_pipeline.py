"""Property tests over random ONNX CNNs (tests/strategies.py)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings

from strategies import cnn_models, from_spec


def ort_run(model: onnx.ModelProto, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return names, sess.run(names, feeds)


@given(gm=cnn_models())
def test_generated_models_are_valid(gm):
    """The strategy itself: checker (full), strict shape inference, onnxruntime, finite O(1) outputs."""
    onnx.checker.check_model(gm.model, full_check=True)
    onnx.shape_inference.infer_shapes(gm.model, check_type=True, strict_mode=True)
    names, outs = ort_run(gm.model, gm.feeds)
    declared = {o.name: [d.dim_value for d in o.type.tensor_type.shape.dim]
                for o in gm.model.graph.output}
    for name, out in zip(names, outs):
        assert list(out.shape) == declared[name], (name, out.shape, declared[name])
        assert np.all(np.isfinite(out)), name
        assert np.max(np.abs(out), initial=0.0) < 1e3, (name, np.max(np.abs(out)))
    # the printed repr rebuilds the same model
    again = from_spec(gm.spec)
    assert again.model.SerializeToString() == gm.model.SerializeToString()
    assert all(np.array_equal(gm.feeds[k], again.feeds[k]) for k in gm.feeds)
