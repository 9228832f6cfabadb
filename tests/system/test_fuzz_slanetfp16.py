"""The fp16 floor's forms, generated: a Conv + BatchNormalization folded for the floor computes
the pair within the fold's bound (module docstring of ``verify/floor_folds.py``) and leaves no
BatchNormalization; a backbone whose features reach an index slot only through a decision is
rounded by the floor, the decision's indices are not."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from hypothesis import given

from mrvl_convert.verify.floor_folds import fold_conv_batchnorms
from mrvl_convert.verify.fp16_floor import floor_model
from mrvl_convert.verify.value_tensors import never_rounded
from support.models import run_ort
from support.strategies.slanetfp16 import conv_bn_models, decision_models

pytestmark = pytest.mark.system

_X = {"x": np.random.default_rng(0).standard_normal((1, 4, 6, 6)).astype(np.float32)}


@given(conv_bn_models())
def test_the_fold_computes_the_pair_within_its_bound(model):
    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    assert fold_conv_batchnorms(folded) == 1
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.append(onnx.helper.make_tensor_value_info("c", 1, None))
    pair = run_ort(probe, _X, ["c", "y"], optimize=False)
    got = run_ort(folded, _X, optimize=False)["y"]
    # a few float32 ulps of the largest term: the Conv's output times the scale (where the
    # BatchNormalization re-centres an output near 1000, the pair's own fp32 subtraction
    # loses that much; the fold, exact in reals, does not)
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    consts.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t)
                   for n in model.graph.node if n.op_type == "Constant"})
    bn = next(n for n in model.graph.node if n.op_type == "BatchNormalization")
    eps = bn.attribute[0].f
    scale = np.abs(consts["gamma"] / np.sqrt(consts["var"] + eps)).max()
    term = np.abs(pair["c"]).max() * scale + np.abs(pair["y"]).max()
    assert np.abs(got - pair["y"]).max() <= 1e-6 * term
    assert not any(n.op_type == "BatchNormalization" for n in floor_model(model).graph.node)


@given(decision_models())
def test_a_decision_protects_its_indices_not_its_data(case):
    model, features = case
    kept = never_rounded(model)
    assert "idx" in kept and features not in kept and "x" not in kept
    run_ort(floor_model(model), _X)  # onnxruntime runs the rounded model
