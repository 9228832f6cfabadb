"""``rules/per_sample.py``: which nodes compute each sample (axis 0) on their own, and the
reason naming the op for those that do not (the batch limit keeps it)."""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest

from mrvl_convert.rules.per_sample import reads_across_batch

from support.models import Builder

N = 10


def verdict(build) -> Optional[str]:
    """reads_across_batch of the node named 'n' in the model ``build(b, x)`` makes, x [N, 4, 6]."""
    b = Builder(seed=1, opset=13)
    y = build(b, b.input("x", [N, 4, 6]))
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(b.model([y])))
    (node,) = [n for n in graph.nodes if n.name == "n"]
    return reads_across_batch(node, N)


def i64(b: Builder, *values: int) -> str:
    return b.const(np.array(values, np.int64))


PER_SAMPLE = {
    "relu": lambda b, x: b.op("Relu", [x], name="n"),
    "reshape_keeping_axis0": lambda b, x: b.op("Reshape", [x, i64(b, N, 24)], name="n"),
    "flatten": lambda b, x: b.op("Flatten", [x], name="n", axis=1),
    "transpose_behind_axis0": lambda b, x: b.op("Transpose", [x], name="n", perm=[0, 2, 1]),
    "softmax_last": lambda b, x: b.op("Softmax", [x], name="n", axis=-1),
    "reduce_last": lambda b, x: b.op("ReduceMean", [x], name="n", axes=[2], keepdims=0),
    "matmul_weight": lambda b, x: b.op("MatMul", [x, b.weight(6, 3)], name="n"),
    "batch_matmul": lambda b, x: b.op("MatMul", [x, b.op("Transpose", [x], perm=[0, 2, 1])],
                                      name="n"),
    "add_per_channel": lambda b, x: b.op("Add", [x, b.weight(4, 1)], name="n"),
    "slice_channels": lambda b, x: b.op("Slice", [x, i64(b, 1), i64(b, 3), i64(b, 1)],
                                        name="n"),
    "concat_channels": lambda b, x: b.op("Concat", [x, x], name="n", axis=1),
}

MIXING = {
    "reshape_merging_axis0": (lambda b, x: b.op("Reshape", [x, i64(b, 5, 48)], name="n"),
                              "Reshape 'n' has 'n_out' of shape [5, 48]"),
    "flatten_all": (lambda b, x: b.op("Flatten", [x], name="n", axis=0),
                    "Flatten 'n' has 'n_out' of shape [1, 240]"),
    "transpose_axis0": (lambda b, x: b.op("Transpose", [x], name="n", perm=[1, 0, 2]),
                        "Transpose 'n' moves axis 0 (perm [1, 0, 2])"),
    "softmax_axis0": (lambda b, x: b.op("Softmax", [x], name="n", axis=0),
                      "Softmax 'n' works along axis 0 (axis=0)"),
    "reduce_all": (lambda b, x: b.op("ReduceSum", [x], name="n", keepdims=1),
                   "ReduceSum 'n' reduces every axis, the batch too"),
    "gather_axis0": (lambda b, x: b.op("Gather", [x, i64(b, 3, 1)], name="n", axis=0),
                     "Gather 'n' works along axis 0 (axis=0)"),
    "reversed_axis0": (lambda b, x: b.op("Slice", [x, i64(b, -1), i64(b, -(1 << 30)), i64(b, 0),
                                                  i64(b, -1)], name="n"),
                       "Slice 'n' slices axis 0 (start -1, step -1)"),
    "pad_axis0": (lambda b, x: b.op("Pad", [b.op("Slice", [x, i64(b, 1), i64(b, N), i64(b, 0)]),
                                            i64(b, 1, 0, 0, 0, 0, 0)], name="n"),
                  "Pad 'n' pads axis 0 (pads [1, 0, 0, 0, 0, 0])"),
    "row_per_sample": (lambda b, x: b.op("Mul", [x, b.weight(N, 4, 6)], name="n"),
                       "Mul 'n' reads the constant"),
    "samples_contracted": (lambda b, x: b.op("MatMul", [b.weight(7, N),
                                                        b.op("Reshape", [x, i64(b, N, 24)])],
                                             name="n"),
                           "MatMul 'n' contracts the samples"),
    "unknown_op": (lambda b, x: b.op("CumSum", [x, i64(b, 2)], name="n"),
                   "CumSum 'n' is not known to keep the samples apart"),
}


@pytest.mark.parametrize("name", sorted(PER_SAMPLE))
def test_per_sample_nodes_pass(name):
    assert verdict(PER_SAMPLE[name]) is None


@pytest.mark.parametrize("name", sorted(MIXING))
def test_nodes_that_read_across_the_samples_are_named(name):
    build, why = MIXING[name]
    found = verdict(build)
    assert found is not None and found.startswith(why), found
