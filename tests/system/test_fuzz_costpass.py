"""Property tests over graphs with constant chains, Constant nodes, shape arithmetic and ops
that do not fold (tests/support/strategies/costpass.py): folding in fold_view.py's view gives
the bytes folding the whole graph gives, and the folded model computes what the model did."""
from __future__ import annotations

import copy

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import onnxruntime as ort
import pytest
from hypothesis import given, settings

from mrvl_convert.frontend import folding
from support.strategies.costpass import SHAPE, fold_models

pytestmark = pytest.mark.system

_FEW = settings(max_examples=max(5, settings.default.max_examples // 4), deadline=None)


def _folded(model: onnx.ModelProto, whole: bool) -> onnx.ModelProto:
    saved = folding.fold_view, folding.lower_constant_nodes
    if whole:  # main's path: graphsurgeon's own Constant lowering, the whole graph
        folding.fold_view, folding.lower_constant_nodes = (lambda g: None), (lambda g: None)
    try:
        graph = gs.import_onnx(onnx.shape_inference.infer_shapes(copy.deepcopy(model)))
        folding.fold_constants(graph, verbose=False)
    finally:
        folding.fold_view, folding.lower_constant_nodes = saved
    return gs.export_onnx(graph.cleanup())


@_FEW
@given(model=fold_models())
def test_folding_in_the_view_is_folding_the_whole_graph(model):
    in_view = _folded(model, whole=False)
    assert in_view.SerializeToString() == _folded(model, whole=True).SerializeToString()
    feed = {"x": np.random.default_rng(1).standard_normal(SHAPE).astype("f4")}
    want = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    got = ort.InferenceSession(in_view.SerializeToString()).run(None, feed)
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)
