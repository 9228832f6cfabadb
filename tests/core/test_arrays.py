"""One hardened reader for the array files a user hands in (``core.arrays``), as used by the
verify inputs (``verify.feeds``) and the calibration samples (``quantize.calibration``)."""
from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from mrvl_convert.core.arrays import check_samples, read_arrays
from mrvl_convert.errors import InputFeedError
from mrvl_convert.quantize.calibration import calibration_feeds
from mrvl_convert.runtime.stages import TensorSpec
from mrvl_convert.verify.feeds import load_npz_feeds

SPEC = TensorSpec("x", (1, 3, 4, 4), "float32")


def _proto():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])])
    return helper.make_model(graph)


BAD = {
    "strings": (np.array([["a"] * 48] * 2).reshape(2, 3, 4, 4), "holds <U1"),
    "complex": (np.ones((2, 3, 4, 4), np.complex64), "holds complex64"),
    "nan": (np.full((2, 3, 4, 4), np.nan, np.float32), "NaN or infinite"),
    "inf": (np.full((2, 3, 4, 4), np.inf, np.float32), "NaN or infinite"),
    "shape": (np.ones((2, 3, 5, 4), np.float32), "does not fit input shape"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_verify_inputs_are_refused_naming_file_array_and_input(tmp_path: Path, case) -> None:
    array, reason = BAD[case]
    np.savez(tmp_path / "in.npz", x=array)
    with pytest.raises(InputFeedError, match=reason) as info:
        load_npz_feeds(str(tmp_path / "in.npz"), [SPEC])
    assert "in.npz" in str(info.value) and "'x'" in str(info.value)


@pytest.mark.parametrize("case", sorted(BAD))
def test_calibration_samples_are_refused_alike(case) -> None:
    array, reason = BAD[case]
    with pytest.raises(InputFeedError, match=reason):
        calibration_feeds(_proto(), {"x": array}, "calib.npz")


def test_verify_inputs_from_a_npy(tmp_path: Path) -> None:
    np.save(tmp_path / "in.npy", np.ones((3, 1, 3, 4, 4), np.float32))
    feeds = load_npz_feeds(str(tmp_path / "in.npy"), [SPEC])
    assert len(feeds) == 3 and feeds[0]["x"].shape == (1, 3, 4, 4)


def _huge_member(path: Path) -> None:
    """An .npz whose member's header declares 2**40 samples but holds a few bytes."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (1 << 40, 3, 4, 4)})
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", header.getvalue() + b"\0" * 64)


def test_a_header_declaring_more_than_it_holds_is_refused_before_allocation(tmp_path) -> None:
    _huge_member(tmp_path / "in.npz")
    with pytest.raises(InputFeedError, match="declares shape"):
        load_npz_feeds(str(tmp_path / "in.npz"), [SPEC])
    with pytest.raises(InputFeedError, match="declares shape"):
        read_arrays(tmp_path / "in.npz")


def test_integer_input_takes_its_integer_type_only() -> None:
    check_samples(np.ones((2, 4), np.int32), source="f", array_name="ids", input_name="ids",
                  shape=(1, 4), integer=np.dtype(np.int64))
    with pytest.raises(InputFeedError, match="the input takes int32"):
        check_samples(np.ones((2, 4), np.float32), source="f", array_name="ids",
                      input_name="ids", shape=(1, 4), integer=np.dtype(np.int32))


def test_good_samples_pass() -> None:
    check_samples(np.zeros((5, 3, 4, 4), np.float32), source="f", array_name="x",
                  input_name="x", shape=(1, 3, 4, 4))
    check_samples(np.zeros((1, 3, 4, 4), np.float16), source="f", array_name="x",
                  input_name="x", shape=(None, 3, 4, 4))


def test_arrays_named_after_no_input_are_named_in_a_warning(tmp_path: Path) -> None:
    np.savez(tmp_path / "in.npz", images=np.ones((2, 1, 3, 4, 4), np.float32),
             labels=np.zeros((2,), np.int64))
    lines = []
    feeds = load_npz_feeds(str(tmp_path / "in.npz"), [SPEC], warn=lines.append)
    assert len(feeds) == 2
    assert len(lines) == 1 and "'labels'" in lines[0] and "'images'" not in lines[0]


def test_float64_values_beyond_float32_are_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "in.npz", x=np.full((1, 3, 4, 4), 1e39, np.float64))
    with pytest.raises(InputFeedError, match="beyond the range of float32"):
        load_npz_feeds(str(tmp_path / "in.npz"), [SPEC])
