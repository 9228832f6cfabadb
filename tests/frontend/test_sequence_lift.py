"""The frame axis 0 of a batchless tensor as axis 1 of a unit batch (issue 45, madmom's
beats_tcn_1 and onsets_cnn, ``frontend/sequence_lift.py``): per-frame Elu / Mul on ``[T, C]``,
a mean over the frames, and windows cut by Slices along axis 0 and stacked, computed on
``[1, T, ...]``. On main the Elu said "Mul2D takes batch 1; this one has batch 96", the mean "it
reduces the batch axis 0", the Slices "the batch dimension is not kept": more Mrvl subgraphs."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest

from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.sequence_lift import lift_sequences
from support.models import Builder, canonicalized, run_ort
from support.strategies.seqaxis import assert_whole_and_verified, sequence_from_spec

_U = 2.0 ** -24


def _i64(b: Builder, *values: int) -> str:
    return b.const(np.array(values, np.int64))


def framewise_net(frames: int = 96, channels: int = 8):
    """A batchless [T, F] input, Elu and Mul on [T, C] (the frames as axis 0), a mean over the
    frames into an FC, and the frames' Slices along axis 0 stacked (Unsqueeze + Concat)."""
    b = Builder(seed=45, opset=13)
    x = b.input("x", [frames, channels])
    y = b.op("Elu", [x], name="elu", alpha=1.0)
    y = b.op("Mul", [y, b.const(np.linspace(0.5, 1.5, channels, dtype=np.float32))],
             name="scale")
    mean = b.op("ReduceMean", [y], name="mean", axes=[0], keepdims=1)  # [1, C]
    tempo = b.op("MatMul", [mean, b.weight(channels, 4)], name="tempo")
    pieces = [b.op("Unsqueeze", [b.op("Slice", [y, _i64(b, k), _i64(b, frames - 2 + k),
                                                _i64(b, 0)], name=f"win{k}"), _i64(b, 1)],
                   name=f"stack{k}") for k in range(3)]
    stacked = b.op("Concat", pieces, name="windows", axis=1)  # [T - 2, 3, C]
    return b.model([tempo, b.op("Tanh", [stacked], name="act")])


def _lifted(model: onnx.ModelProto):
    """The model after lift_sequences alone, and what it recorded."""
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(model))
    done = Rewrites()
    assert lift_sequences(graph, 13, done)
    graph.cleanup(remove_unused_graph_inputs=False).toposort()
    proto = gs.export_onnx(graph)
    proto.ir_version = model.ir_version
    return proto, done


def _within_sum_bound(got: np.ndarray, want: np.ndarray, terms: int, scale: float) -> None:
    """Two float32 sums of the same n terms: at most 2 (n - 1) u sum |x| apart."""
    assert got.shape == want.shape
    assert np.all(np.abs(got - want) <= 2 * (terms - 1) * _U * scale + 1e-30)


def test_lift_alone_computes_what_the_model_does():
    model = framewise_net()
    proto, done = _lifted(model)
    lifted = {n.name for n in gs.import_onnx(proto).nodes
              if n.op in ("Elu", "Mul", "ReduceMean", "Slice", "Concat")}
    assert {"elu", "scale", "mean", "win0", "windows"} <= lifted
    assert all("frame axis 0" in done.rewritten[n] for n in ("elu", "mean", "win1"))
    shapes = {t.name: t.shape for t in gs.import_onnx(proto).tensors().values()}
    assert shapes["elu_out_seq"] == [1, 96, 8]
    for seed in range(3):
        feeds = {"x": np.random.default_rng(seed).standard_normal((96, 8)).astype(np.float32)}
        want = run_ort(model, feeds, optimize=False)
        got = run_ort(proto, feeds, optimize=False)
        assert np.array_equal(got["act_out"], want["act_out"])
        mean_scale = float(np.abs(feeds["x"]).max()) * 1.5 * 8 * 4  # |y| |w| summed
        _within_sum_bound(got["tempo_out"], want["tempo_out"], 96 * 8, mean_scale)


def test_a_batch_read_as_a_batch_is_not_lifted():
    """Per-frame ops only, no Unsqueeze(0) and nothing mixing frames: axis 0 may be a batch."""
    b = Builder(seed=1, opset=13)
    y = b.op("Elu", [b.input("x", [12, 8])], name="elu")
    model = b.model([b.op("MatMul", [y, b.weight(8, 4)], name="fc")])
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(model))
    assert not lift_sequences(graph, 13, Rewrites())


@pytest.mark.parametrize("spec", [
    {"seed": 1, "frames": 30, "bins": 6, "channels": 4, "windows": 0, "dilation": 1,
     "stack_axis": 1, "per_frame": ["elu", "fc", "residual"], "mean": True},
    {"seed": 2, "frames": 98, "bins": 8, "channels": 8, "windows": 0, "dilation": 1,
     "stack_axis": 1, "per_frame": ["elu", "scale"], "mean": True},
])
def test_canonical_graph_keeps_onnxruntime_outputs(spec):
    case = sequence_from_spec(spec)
    canonical, proto = canonicalized(case.model)
    assert any("frame axis 0" in why for why in canonical.rewritten.values())
    want = run_ort(case.model, case.feeds, optimize=False)
    got = run_ort(proto, case.feeds, optimize=False)
    assert np.array_equal(got["activations_out"], want["activations_out"])
    assert np.allclose(got["tempo_softmax_out"], want["tempo_softmax_out"], rtol=0, atol=1e-6)


def test_a_framewise_elu_and_a_mean_over_frames_are_one_mrvl_subgraph(tmp_path):
    """beats_tcn_1's form: on main, 3 Mrvl subgraphs (the Elu's batch 96, the mean over 0)."""
    case = sequence_from_spec({"seed": 2, "frames": 98, "bins": 8, "channels": 8, "windows": 0,
                               "dilation": 1, "stack_axis": 1, "per_frame": ["elu", "fc"],
                               "mean": True})
    assert_whole_and_verified(case.model, tmp_path / "art")


def test_opset_11_attributes_and_graph_outputs_keep_their_values():
    """Axes as attributes (Unsqueeze, Squeeze without axes, ReduceMean), Softmax's default axis
    1 before opset 13, a Pad of the frames, and region tensors that are graph outputs."""
    b = Builder(seed=3, opset=11)
    y = b.op("Softmax", [b.op("Elu", [b.input("x", [40, 6])], name="elu")], name="softmax")
    y = b.op("Pad", [y, b.const(np.array([1, 0, 2, 0], np.int64))], name="pad")
    pieces = [b.op("Unsqueeze", [b.op("Slice", [y, b.const(np.array([k])),
                                                b.const(np.array([40 + k])),
                                                b.const(np.array([0]))], name=f"win{k}")],
                   name=f"stack{k}", axes=[1]) for k in range(3)]
    stacked = b.op("Concat", pieces, name="windows", axis=1)
    mean = b.op("ReduceMean", [stacked], name="mean", axes=[0], keepdims=0)
    head = b.op("Squeeze", [b.op("MatMul", [y, b.weight(6, 1)], name="fc")], name="head")
    model = b.model([mean, head, stacked])
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(model))
    done = Rewrites()
    assert lift_sequences(graph, 11, done)
    graph.cleanup(remove_unused_graph_inputs=False).toposort()
    assert {n.name for n in graph.nodes} >= {"elu", "softmax", "pad", "windows", "mean"}
    assert "stack1" in done.merged and done.rewritten["softmax"].endswith("one sample")
    proto = gs.export_onnx(graph)
    proto.ir_version = model.ir_version
    onnx.checker.check_model(proto)
    feeds = {"x": np.random.default_rng(0).standard_normal((40, 6)).astype(np.float32)}
    want, got = run_ort(model, feeds, optimize=False), run_ort(proto, feeds, optimize=False)
    for name, value in want.items():
        assert got[name].shape == value.shape, name
        if name == "mean_out":  # a mean of 43 softmax values (<= 1): its stated bound
            _within_sum_bound(got[name], value, 43, 1.0)
        else:
            assert np.array_equal(got[name], value), name
