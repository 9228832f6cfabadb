"""``core/graph.py``'s ``static_shape`` and ``dtype_name`` (its names cached per dtype) give
what they gave computed afresh: every kind of dim and dtype a graphsurgeon tensor carries."""
from __future__ import annotations

from typing import Any, List, Optional

import numpy as np
import onnx_graphsurgeon as gs
import pytest

from mrvl_convert.core.graph import dtype_name, static_shape


def _fresh_shape(shape: Any) -> Optional[List[int]]:
    if shape is None:
        return None
    if any(not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
        return None
    return [int(d) for d in shape]


def _fresh_name(dtype: Any) -> str:
    if dtype is None:
        return "unknown"
    try:
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype)


@pytest.mark.parametrize("shape", [None, [], [1, 3, 8, 8], [np.int64(2), 3], ["N", 3],
                                   [1, -1], [True, 2], [1, None], (4,), [2.0, 3]])
def test_static_shape_as_computed_afresh(shape):
    tensor = gs.Variable("t", dtype=np.float32, shape=shape)
    assert static_shape(tensor) == _fresh_shape(shape)


@pytest.mark.parametrize("dtype", [None, np.float32, np.dtype("float16"), np.dtype(">f4"),
                                   np.int64, bool, 1, "float32", [("a", "f4")], "no such",
                                   object])
def test_dtype_name_as_computed_afresh(dtype):
    tensor = gs.Variable("t")
    tensor.dtype = dtype
    for _ in range(2):  # the second from the cache
        assert dtype_name(tensor) == _fresh_name(dtype)
    assert static_shape(gs.Constant("c", np.zeros((2, 3), np.float32))) == [2, 3]
