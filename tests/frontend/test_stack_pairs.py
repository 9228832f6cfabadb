"""A quantized stack's ReduceMax (attacut's three conv branches, torch.stack + max, quantized by
Marvell's recipe) as the Max of its tensors on the stack's grid (``frontend/stack_pairs.py``):
bit-equal on onnxruntime before and after, and in the artifact the int8 max pooling
(``mrvl.qnn_max_pair``) in the one Mrvl stage, equal to onnxruntime's run of the QDQ model. On
main the ReduceMax stayed on CPU ("mrvl.reduce_max: the input is 4-D, not 3-D") and cut the
int8 region in two."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest

import mrvl_convert
from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.stack_pairs import rewrite_quantized_stacks
from support.int8 import float_model, placements, quantized, reference_session, run_both
from support.layer_chains import layer_kinds
from support.models import run_ort

C, L = 8, 12


def _stack(keepdims: int) -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    inits = {f"w{k}": rng.standard_normal((C, C, 3)) * 0.4 for k in range(3)}
    inits["axis"] = np.array([3])
    inits["fc"] = rng.standard_normal((C, 4)) * 0.4
    nodes = []
    for k in range(3):
        nodes += [onnx.helper.make_node("Conv", ["x", f"w{k}"], [f"c{k}"], pads=[1, 1]),
                  onnx.helper.make_node("Transpose", [f"c{k}"], [f"t{k}"], perm=[0, 2, 1]),
                  onnx.helper.make_node("Unsqueeze", [f"t{k}", "axis"], [f"u{k}"])]
    nodes += [onnx.helper.make_node("Concat", ["u0", "u1", "u2"], ["stack"], axis=3),
              onnx.helper.make_node("ReduceMax", ["stack"], ["m"], axes=[3], keepdims=keepdims,
                                    name="stack_max")]
    if keepdims:
        inits["shape"] = np.array([1, L, C])
        nodes.append(onnx.helper.make_node("Reshape", ["m", "shape"], ["m3"]))
    nodes.append(onnx.helper.make_node("MatMul", ["m3" if keepdims else "m", "fc"], ["y"]))
    model = float_model(nodes, inits, [1, C, L], [1, L, 4])
    for name in ("axis", "shape"):  # integer constants
        for init in model.graph.initializer:
            if init.name == name:
                init.CopyFrom(onnx.numpy_helper.from_array(inits[name].astype(np.int64), name))
    return model


@pytest.mark.parametrize("keepdims", [0, 1])
def test_the_rewrite_is_bit_equal_on_onnxruntime(tmp_path, keepdims):
    qdq, feeds = quantized(tmp_path, _stack(keepdims), [1, C, L], samples=4)
    model = onnx.load(qdq)
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(model))
    done = Rewrites()
    assert rewrite_quantized_stacks(graph, done)
    assert "stack_max" in done.rewritten, done.rewritten
    after = gs.export_onnx(graph.cleanup().toposort())
    assert not [n for n in after.graph.node if n.op_type == "ReduceMax"]
    session = reference_session(qdq)
    for feed in feeds:
        want = session.run(None, feed)[0]
        got = run_ort(after, feed, optimize=False)["y"]
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("keepdims", [0, 1])
def test_a_quantized_stack_max_is_one_int8_stage_equal_to_its_qdq_model(tmp_path, keepdims):
    qdq, feeds = quantized(tmp_path, _stack(keepdims), [1, C, L], samples=4)
    result = mrvl_convert.convert(qdq, tmp_path / "a")
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    node = placements(result)["stack_max"]
    assert node["placement"] == "mrvl", node
    assert "Maxpool2D" in layer_kinds(result)  # the int8 max pooling (mrvl.qnn_max_pair)
    got, want = run_both(qdq, result.out_dir, feeds)
    np.testing.assert_array_equal(got, want)
