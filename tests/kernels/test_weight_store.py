"""A graph-engine segment's weight store: arrays in memory until spilled to one file, and the
same values read back after it (``kernels/weight_store.py``)."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.kernels.weight_store import MODEL_FILE, WEIGHTS_FILE, WeightStore


def _builder_with(*arrays: np.ndarray) -> "tuple[OnnxBuilder, list[str]]":
    builder = OnnxBuilder({})
    return builder, [builder.constant(a, "w") for a in arrays]


def _model(builder: OnnxBuilder) -> bytes:
    graph = helper.make_graph([], "g", [], [], builder.initializers)
    return helper.make_model(graph).SerializeToString()


def _arrays():
    rng = np.random.default_rng(0)
    return [rng.standard_normal(shape).astype(np.float32) for shape in [(3, 5, 70), (1000,),
                                                                        (2, 2049)]]


def test_spill_writes_every_array_page_aligned_and_reads_them_back(tmp_path):
    arrays = _arrays()
    builder, names = _builder_with(*arrays)
    store = builder.weights
    assert store.names() == names and store.nbytes == sum(a.nbytes for a in arrays)
    read = [builder.reader(name) for name in names]
    assert all(r() is a for r, a in zip(read, arrays))  # in memory: the very arrays
    path = store.spill(str(tmp_path), _model(builder))
    assert store.spilled and store.arrays() == {}
    assert sorted(os.listdir(tmp_path)) == sorted([MODEL_FILE, WEIGHTS_FILE])
    model = onnx.load(path, load_external_data=False)
    places = {t.name: {e.key: e.value for e in t.external_data} for t in model.graph.initializer}
    data = (tmp_path / WEIGHTS_FILE).read_bytes()
    for name, array in zip(names, arrays):
        place = places[name]
        offset, length = int(place["offset"]), int(place["length"])
        assert place["location"] == WEIGHTS_FILE and offset % 4096 == 0
        assert data[offset:offset + length] == array.tobytes()
    for r, array in zip(read, arrays):
        got = r()
        np.testing.assert_array_equal(got, array)
        assert got.flags.writeable and got.dtype == np.float32 and got.shape == array.shape
    # onnx reads the file back as the same tensors
    full = onnx.load(path)
    for tensor, array in zip(full.graph.initializer, arrays):
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(tensor), array)


def test_a_failed_spill_leaves_the_arrays_in_memory(tmp_path):
    arrays = _arrays()
    builder, names = _builder_with(*arrays)
    with pytest.raises(OSError):
        builder.weights.spill(str(tmp_path / "missing"), _model(builder))
    assert not builder.weights.spilled
    assert all(builder.weights.get(n) is a for n, a in zip(names, arrays))


def test_dropping_an_undone_emission_keeps_the_earlier_arrays():
    store = WeightStore()
    first, second = _arrays()[:2]
    store.add("a", first)
    store.add("b", second)
    store.drop_after(1)
    assert store.names() == ["a"] and "b" not in store and store.nbytes == first.nbytes


def test_small_constants_stay_in_the_model_and_are_read_from_it():
    builder = OnnxBuilder({})
    small = np.arange(6, dtype=np.float32).reshape(2, 3)
    name = builder.constant(small)
    assert name not in builder.weights and len(builder.weights) == 0
    np.testing.assert_array_equal(builder.reader(name)(), small)
    assert builder.initializers[0].data_location != TensorProto.EXTERNAL
