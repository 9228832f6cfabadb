"""Hostile array files, generated (the ``array files`` class of the hostile fuzz profile): any
dtype (strings, complex, bool, ints, floats), any shape, NaN and infinities, and ``.npy`` headers
declaring far more data than they hold. The verify-input reader (``verify.feeds``, over
``core.arrays``) and the calibration reader (``quantize.calibration``) either give finite
float32 samples of the input's shape or raise ``InputFeedError``; nothing else.
``pytest --hypothesis-profile thorough tests/system/test_fuzz_hostile_arrays.py`` runs more.
"""
from __future__ import annotations

import io
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto, helper

from mrvl_convert.errors import InputFeedError
from mrvl_convert.quantize.calibration import calibration_feeds
from mrvl_convert.runtime.stages import TensorSpec
from mrvl_convert.verify.feeds import load_npz_feeds

pytestmark = pytest.mark.system

SPEC = TensorSpec("x", (1, 2, 3), "float32")
DTYPES = st.sampled_from(["float32", "float64", "float16", "int32", "uint8", "bool",
                          "complex64", "<U2", "S3"])
SHAPES = st.one_of(st.just((2, 1, 2, 3)), st.just((1, 2, 3)), st.just((4, 2, 3)),
                   hnp.array_shapes(min_dims=0, max_dims=5, min_side=0, max_side=4))
ARRAYS = st.builds(lambda dtype, shape: (dtype, shape), DTYPES, SHAPES).flatmap(
    lambda ds: hnp.arrays(ds[0], ds[1]))
NAMES = st.sampled_from(["x", "images", "labels", "-x", ".x", "é"])


def _proto():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3])])
    return helper.make_model(graph)


@given(members=st.dictionaries(NAMES, ARRAYS, min_size=1, max_size=3))
def test_hostile_npz_arrays_are_used_whole_or_refused(members) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "in.npz"
        np.savez(path, **members)
        try:
            feeds = load_npz_feeds(str(path), [SPEC])
        except InputFeedError:
            pass
        else:
            for feed in feeds:
                assert feed["x"].dtype == np.float32 and feed["x"].shape == SPEC.shape
                assert np.isfinite(feed["x"]).all()
        if "x" in members:
            try:
                calibration_feeds(_proto(), {"x": members["x"]}, str(path))
            except InputFeedError:
                pass


def _fits_spec(shape) -> bool:
    """One sample of SPEC, or a stack of them (with or without SPEC's batch dimension of 1)."""
    return shape == SPEC.shape or shape[1:] == SPEC.shape or shape[1:] == SPEC.shape[1:]


@example(declared=[1, 2, 3], dtype="<f4", held=24, npy=True)      # exactly its bytes
@example(declared=[1, 2, 3], dtype="<f4", held=23, npy=True)      # one byte short
@example(declared=[2, 1, 2, 3], dtype="<f8", held=96, npy=False)  # a stack, in an .npz
@example(declared=[3, 2, 3], dtype="|u1", held=200, npy=False)    # more bytes than declared
@example(declared=[1, 2, 3], dtype="<c8", held=48, npy=True)      # complex: not real samples
@example(declared=[1 << 40, 2, 3], dtype="<f8", held=256, npy=False)
@given(declared=st.one_of(st.sampled_from([[1, 2, 3], [2, 1, 2, 3], [4, 2, 3], [0, 2, 3]]),
                          st.lists(st.integers(0, 1 << 40), min_size=0, max_size=4)),
       dtype=st.sampled_from(["<f4", "<f8", "|u1", "<c8"]), held=st.integers(0, 256),
       npy=st.booleans())
def test_npy_headers_declaring_more_than_they_hold_are_refused(declared, dtype, held,
                                                                npy) -> None:
    """A header declaring more bytes than follow it is an InputFeedError, before numpy
    allocates what it declares (up to 2**40 elements here). A header the bytes do cover is
    read as it says: the declared all-zero samples if they fit the input as real numbers,
    else an InputFeedError."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": dtype, "fortran_order": False, "shape": tuple(declared)})
    data = header.getvalue() + b"\0" * held
    need = int(np.prod(declared, dtype=object)) * np.dtype(dtype).itemsize
    shape = tuple(declared)
    readable = need <= held and dtype != "<c8" and _fits_spec(shape)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("x.npy" if npy else "in.npz")
        if npy:
            path.write_bytes(data)
        else:
            with zipfile.ZipFile(path, "w") as archive:
                archive.writestr("x.npy", data)
        if not readable:
            with pytest.raises(InputFeedError):
                load_npz_feeds(str(path), [SPEC])
            return
        feeds = load_npz_feeds(str(path), [SPEC])
    samples = 1 if shape == SPEC.shape else shape[0]
    assert len(feeds) == samples
    for feed in feeds:
        assert feed["x"].dtype == np.float32 and feed["x"].shape == SPEC.shape
        assert not feed["x"].any()
