"""An Expand read by broadcasting ops (frontend/token_ops.py) is dropped into its readers only
where the reader's other operands span the expanded shape, and canonicalize's guard
(frontend/output_shapes.py) refuses any rewrite that changes an output's shape.

Issue 43 finding 5: ``Sub(Expand(m, [1, 3, 4, 8]), m)`` converted with exit 0, the manifest
declared ``[1, 3, 4, 8]`` and ``HybridSession.run`` returned ``(1, 1, 4, 8)``. Issue 45
finding 6: an Expand read by a Where, or by a broadcasting op beside a reader that does not
broadcast, stayed (a byte model's mask broadcast cut it).
"""
from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs
import pytest

import mrvl_convert
from mrvl_convert.errors import MrvlConvertError
from mrvl_convert.frontend.load import load_model
from mrvl_convert.frontend.output_shapes import check_output_shapes
from mrvl_convert.runtime.session import HybridSession
from support.models import Builder, canonicalized, run_ort

SHAPE = [1, 1, 4, 8]
WIDE = [1, 3, 4, 8]


def _front(b: Builder, shape) -> str:
    """An identity FC in front, so the conversion has a compute-heavy layer."""
    return b.op("MatMul", [b.input("x", shape), b.const(np.eye(shape[-1], dtype=np.float32))],
                name="front")


def _feed(shape, seed: int = 3):
    return {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


def _self_minus_expand():
    b = Builder(opset=13)
    m = _front(b, SHAPE)
    wide = b.op("Expand", [m, b.const(np.array(WIDE, np.int64))], name="expand")
    return b.model([b.op("Sub", [wide, m], name="sub")])


def test_sub_of_an_expand_and_its_own_input_keeps_the_expanded_shape(tmp_path):
    model = _self_minus_expand()
    canonical, proto = canonicalized(model)
    assert "Expand" in {n.op for n in canonical.graph.nodes}
    feeds = _feed(SHAPE)
    want = run_ort(model, feeds, optimize=False)
    got = run_ort(proto, feeds, optimize=False)
    for name, value in want.items():
        assert got[name].shape == value.shape == tuple(WIDE)
        assert np.array_equal(got[name], value)
    mrvl_convert.convert(model, tmp_path / "art")
    out = HybridSession(tmp_path / "art").run(None, feeds)[0]
    assert out.shape == tuple(WIDE)


def _mixed_readers():
    """A mask broadcast read by a Where (spanned by the scores), an Add spanned by the scores,
    and a Softmax (not a broadcast): the Expand stays for the Softmax alone."""
    b = Builder(opset=13)
    x = _front(b, [1, 3, 4, 8])
    mask = b.op("Greater", [b.op("ReduceMean", [x], name="row", axes=[1], keepdims=1),
                            b.const(np.array(0.0, np.float32))], name="mask")
    wide = b.op("Expand", [mask, b.const(np.array(WIDE, np.int64))], name="expand")
    picked = b.op("Where", [wide, x, b.const(np.array(-1.0, np.float32))], name="where")
    widef = b.op("Expand", [b.op("Cast", [mask], name="cast", to=1),
                            b.const(np.array(WIDE, np.int64))], name="expandf")
    added = b.op("Add", [widef, x], name="add")
    soft = b.op("Softmax", [widef], name="soft", axis=-1)
    return b.model([picked, added, soft])


def test_each_spanning_reader_reads_the_expand_input_and_the_rest_keep_it():
    model = _mixed_readers()
    canonical, proto = canonicalized(model)
    readers = {n.name: [t.name for t in n.inputs] for n in canonical.graph.nodes}
    ops = [n.op for n in canonical.graph.nodes]
    assert "mask_out" in readers["where"] and "expand" in canonical.merged
    assert "cast_out" in readers["add"] and ops.count("Expand") == 1
    assert "expandf" in canonical.kept
    feeds = _feed(WIDE)
    want = run_ort(model, feeds, optimize=False)
    got = run_ort(proto, feeds, optimize=False)
    for name, value in want.items():
        assert got[name].shape == value.shape
        assert np.array_equal(got[name], value)


def test_the_guard_refuses_a_rewrite_that_changes_an_output_shape():
    model = _self_minus_expand()
    loaded = load_model(model)
    graph = gs.import_onnx(loaded.proto)
    check_output_shapes(graph, loaded.proto, "planted")  # as loaded: accepted
    sub = next(n for n in graph.nodes if n.op == "Sub")
    sub.inputs[0] = sub.inputs[1]  # what the unchecked rewrite did
    with pytest.raises(MrvlConvertError, match=r"\[1, 3, 4, 8\] to \[1, 1, 4, 8\]"):
        check_output_shapes(graph, loaded.proto, "planted")
