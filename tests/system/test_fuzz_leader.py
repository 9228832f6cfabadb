"""Property tests over rank-5 detours (tests/support/strategies/leader.py): the rewrites of
frontend/rank5_detours.py keep onnxruntime's outputs bit for bit, and a chain or a repeat
(not a tiling) leaves no tensor of rank 5 or more. Quick profile by default."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings

from mrvl_convert.core.graph import static_shape
from mrvl_convert.frontend.canonicalize import canonicalize
from mrvl_convert.frontend.load import load_model
from support.models import canonicalized, run_ort
from support.strategies.leader import broadcast_muls, chains, repeats

pytestmark = pytest.mark.system

_SOME = settings(max_examples=max(5, settings.default.max_examples // 2), deadline=None)


def _feeds(model: onnx.ModelProto):
    rng = np.random.default_rng(0)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
            .astype(np.float32) for i in model.graph.input}


def _same_outputs(model: onnx.ModelProto) -> None:
    _, proto = canonicalized(model)
    feeds = _feeds(model)
    want, got = run_ort(model, feeds), run_ort(proto, feeds)
    for name, value in want.items():
        assert got[name].shape == value.shape and np.array_equal(got[name], value), name


def _ops(model: onnx.ModelProto):
    return {n.op_type for n in model.graph.node}


def _max_rank(model: onnx.ModelProto) -> int:
    graph = canonicalize(load_model(model)).graph
    return max(len(static_shape(t) or []) for n in graph.nodes for t in n.outputs)


@_SOME
@given(model=chains())
def test_a_chain_through_rank_5_keeps_the_outputs_and_leaves_rank_4(model):
    _same_outputs(model)
    if len(model.graph.output) == 1:  # no chain tensor read elsewhere
        assert _max_rank(model) <= 4


@_SOME
@given(model=repeats())
def test_a_repeat_keeps_the_outputs_and_a_tiling_stays(model):
    _same_outputs(model)
    reshape = next(n for n in model.graph.node if n.op_type == "Reshape")
    new_axis = next(n for n in model.graph.node if n.op_type == "Unsqueeze")
    tiling = _is_tiling(model, reshape, new_axis)
    canonical_ops = {n.op for n in canonicalize(load_model(model)).graph.nodes}
    assert ("Resize" in canonical_ops) != tiling


def _is_tiling(model: onnx.ModelProto, reshape, unsqueeze) -> bool:
    """The new axis does not follow the axis before it after the Transpose: each position
    holds the whole axis after it again (strategy's ``merge_after``), not a repeat."""
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    axis = int(inits[unsqueeze.input[1]][0])
    transpose = next((n for n in model.graph.node if n.op_type == "Transpose"), None)
    perm = list(range(5)) if transpose is None else list(transpose.attribute[0].ints)
    n = perm.index(axis)
    return n == 0 or perm[n - 1] != axis - 1


@_SOME
@given(model=broadcast_muls())
def test_a_broadcast_mul_keeps_the_outputs_and_is_a_conv_beyond_one_channel(model):
    _same_outputs(model)
    channels = max(np.prod(i.dims) for i in model.graph.initializer)
    ops = {n.op for n in canonicalize(load_model(model)).graph.nodes}
    assert ("Conv" in ops) == (channels > 1)
