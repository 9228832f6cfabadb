"""Sliding windows of frames read by an FC as a Conv along the frames (issue 45, madmom's
onsets_cnn, ``frontend/window_conv.py``): K Slices along axis 0 at offsets, Unsqueezed, joined
by a Concat, flattened, into a MatMul by a constant. On main the Slices stayed on the CPU ("the
batch dimension is not kept ([92, 8, 20] -> [86, 8, 20])"), the Unsqueezes and the Concat with
them: the model was 2 Mrvl subgraphs."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest

from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.window_conv import rewrite_window_convs
from support.models import canonicalized, run_ort
from support.strategies.seqaxis import assert_whole_and_verified, sequence_from_spec

_U = 2.0 ** -24
_ONSETS = {"seed": 5, "frames": 40, "bins": 6, "channels": 8, "windows": 7, "dilation": 1,
           "stack_axis": 1, "per_frame": [], "mean": False}


def _spec(**changes):
    return {**_ONSETS, **changes}


def _with_outputs(model: onnx.ModelProto, names) -> onnx.ModelProto:
    """``model`` with inner tensors as outputs too (their shapes inferred)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: v for v in inferred.graph.value_info}
    inferred.graph.output.extend(shapes[name] for name in names)
    return inferred


def _window_fc_bound(case, x_scale: float) -> float:
    """2 (n - 1) u sum |x B| over one FC output, with |x| at most ``x_scale``."""
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in case.model.graph.initializer}
    node = next(n for n in case.model.graph.node if n.name == "window_fc")
    weight = np.abs(inits[node.input[1]])
    return 2 * (weight.shape[0] - 1) * _U * x_scale * float(weight.sum(axis=0).max())


@pytest.mark.parametrize("changes", [{}, {"dilation": 2, "windows": 3},
                                     {"stack_axis": 2, "windows": 2}])
def test_the_rewrite_alone_is_a_conv_within_its_bound(changes):
    case = sequence_from_spec(_spec(**changes))
    model = _with_outputs(case.model, ["window_fc_out", "conv_remove_batch_out"])
    graph = gs.import_onnx(model)
    done = Rewrites()
    assert rewrite_window_convs(graph, 13, done)
    graph.cleanup(remove_unused_graph_inputs=False).toposort()
    assert not [n for n in graph.nodes if n.op in ("Slice", "Concat", "MatMul")
                and n.name.startswith("win")]
    conv = next(n for n in graph.nodes if n.name == "window_fc")
    assert conv.op == "Conv" and conv.attrs["dilations"][0] == case.spec["dilation"]
    assert done.merged["windows"] == "window_fc"
    proto = gs.export_onnx(graph)
    proto.ir_version = case.model.ir_version
    want = run_ort(model, case.feeds, optimize=False)  # the FC's own output, before the bias
    got = run_ort(proto, case.feeds, optimize=False)
    bound = _window_fc_bound(case, float(np.abs(want["conv_remove_batch_out"]).max()))
    diff = np.abs(got["window_fc_out"] - want["window_fc_out"])
    assert got["window_fc_out"].shape == want["window_fc_out"].shape
    assert float(diff.max()) <= bound, (float(diff.max()), bound)


def test_not_windows_are_left_alone():
    """Offsets that are no progression (0, 1, 3) are not one kernel: no Conv."""
    case = sequence_from_spec(_spec(windows=3))
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    inits = {t.name: t for t in model.graph.initializer}
    win2 = next(n for n in model.graph.node if n.name == "win2")
    inits[win2.input[1]].CopyFrom(onnx.numpy_helper.from_array(np.array([3], np.int64),
                                                                win2.input[1]))
    inits[win2.input[2]].CopyFrom(onnx.numpy_helper.from_array(np.array([-1], np.int64),
                                                                win2.input[2]))
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(model))
    assert not rewrite_window_convs(graph, 13, Rewrites())


def test_canonical_graph_keeps_onnxruntime_outputs():
    case = sequence_from_spec(_spec(per_frame=["elu", "fc"], mean=True))
    canonical, proto = canonicalized(case.model)
    assert "Conv along the frames" in canonical.rewritten["window_fc"]
    want = run_ort(case.model, case.feeds, optimize=False)
    got = run_ort(proto, case.feeds, optimize=False)
    for name, value in want.items():  # sigmoid / softmax outputs in (0, 1): the FC's bound
        assert got[name].shape == value.shape
        assert np.allclose(got[name], value, rtol=0, atol=1e-5), name


@pytest.mark.parametrize("changes", [{}, {"dilation": 2, "windows": 3, "per_frame": ["elu"]}])
def test_onsets_windows_are_one_mrvl_subgraph_and_verify(changes, tmp_path):
    """onsets_cnn's form: on main 2 Mrvl subgraphs and 2 CPU ones."""
    case = sequence_from_spec(_spec(**changes))
    assert_whole_and_verified(case.model, tmp_path / "art")
