"""After the sequence lift (issue 45, madmom's key_cnn, ``frontend/sequence_forms.py``): a Pad of
the batchless input moves after the Unsqueeze and Transpose into the first Conv, which folds
it, and a mean over the frames and bins of ``[T, W, C]`` is a global average pool. On main the
Pad stayed on the CPU ("Pad goes to the accelerator only fused into a composite ... here it reads
a graph input"), the mean too ("it reduces axes [0, 1]; the layer reduces one axis")."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.sequence_lift import lift_sequences
from support.models import run_ort
from support.strategies.seqaxis import assert_whole_and_verified, sequence_from_spec

_U = 2.0 ** -24
_KEY = {"seed": 7, "frames": 40, "bins": 9, "channels": 8, "windows": 0, "dilation": 1,
        "stack_axis": 1, "per_frame": ["elu"], "mean": False, "pad": True,
        "global_mean": True}


def test_the_pad_reaches_the_conv_and_the_mean_is_a_pool():
    case = sequence_from_spec(_KEY)
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(case.model))
    done = Rewrites()
    assert lift_sequences(graph, 13, done)
    graph.cleanup(remove_unused_graph_inputs=False).toposort()
    nodes = {n.name: n for n in graph.nodes}
    assert nodes["pad_input"].outputs[0].outputs[0].op == "Conv"
    assert "moved after" in done.rewritten["pad_input"]
    mean = nodes["key_mean"]
    assert mean.attrs["keepdims"] == 1 and mean.outputs[0].shape == [1, 8, 1, 1]
    assert "global average pool" in done.rewritten["key_mean"]
    proto = gs.export_onnx(graph)
    proto.ir_version = case.model.ir_version
    want = run_ort(case.model, case.feeds, optimize=False)
    got = run_ort(proto, case.feeds, optimize=False)
    assert np.array_equal(got["activations_out"], want["activations_out"])
    inner = onnx.shape_inference.infer_shapes(case.model)
    inner.graph.output.extend(v for v in inner.graph.value_info if v.name == "key_elu_out")
    values = np.abs(run_ort(inner, case.feeds, optimize=False)["key_elu_out"])  # [T, W, C]
    count = values.shape[0] * values.shape[1]  # the stated bound: 2 (n - 1) u mean |x|
    bound = 2 * (count - 1) * _U * values.mean(axis=(0, 1))
    assert got["key_mean_out"].shape == want["key_mean_out"].shape == (8,)
    assert np.all(np.abs(got["key_mean_out"] - want["key_mean_out"]) <= bound)

def test_a_key_net_is_one_mrvl_subgraph_and_verifies(tmp_path):
    """key_cnn's form: on main 1 Mrvl subgraph and 2 CPU ones (the input's Pad, the mean)."""
    assert_whole_and_verified(sequence_from_spec(_KEY).model, tmp_path / "art")
