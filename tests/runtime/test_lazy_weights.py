"""The numpy kernels' weight forms (GEMM matrices, Winograd transforms, depthwise taps) are made
on the first numpy ``run``, never by the graph engine: a session that runs every layer in
onnxruntime does not hold them, and one that does make them gets the numbers eager ones give."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from mrvl_convert import convert
from mrvl_convert.kernels.base import LazyWeights
from mrvl_convert.runtime import HybridSession
from support import models


def _cnn():
    """A CNN with Conv2D in each mode a converted model has weights for (im2col, Winograd,
    depthwise; a grouped conv is written block-diagonal) and a 2-D FC."""
    b = models.Builder(seed=3)
    x = b.input("x", [1, 3, 16, 16])
    y = b.op("Relu", [b.conv(x, 3, 64, pads=[1, 1, 1, 1])])
    y = b.op("Relu", [b.conv(y, 64, 64, pads=[1, 1, 1, 1])])          # Winograd
    y = b.op("Relu", [b.conv(y, 64, 64, group=64, pads=[1, 1, 1, 1])])  # depthwise
    y = b.conv(y, 64, 32, k=1, group=4)                                # grouped 1x1
    y = b.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = b.op("Flatten", [y], axis=1)
    return b.model([b.gemm(y, 32 * 8 * 8, 10, transB=1)])


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("lazy") / "cnn")
    convert(_cnn(), directory)
    return directory


def _feed(seed: int = 0):
    return {"x": np.random.default_rng(seed).standard_normal((1, 3, 16, 16))
            .astype(np.float32)}


def _lazy(session: HybridSession):
    return [step.kernel for stage in session.stages if stage.kind == "mrvl"
            for step in stage.runner.steps if step.kernel.weights is not None]


def _modes(session: HybridSession):
    return sorted(getattr(k, "mode", type(k).__name__) for k in _lazy(session))


def _traces_equal(a, b) -> None:
    assert [t.spec.name for t in a] == [t.spec.name for t in b]
    for got, want in zip(a, b):
        np.testing.assert_array_equal(got.value, want.value, err_msg=got.spec.name)


def _eager(artifact: str) -> HybridSession:
    """A per-layer session whose weights are all made before its first call."""
    session = HybridSession(artifact, engine="layers")
    for kernel in _lazy(session):
        kernel.weights.get()
    return session


def test_graph_engine_makes_no_numpy_weights(artifact):
    session = HybridSession(artifact)
    # The grouped conv is written block-diagonal (an im2col conv); its segment form finds
    # the groups again, so it keeps the raw constant as its source.
    assert _modes(session) == ["FCKernel", "depthwise", "gemm", "gemm", "winograd"]
    assert not any(k.weights.ready for k in _lazy(session))
    session.run(None, _feed())  # every layer in onnxruntime: still none
    assert not any(k.weights.ready for k in _lazy(session))


def test_per_layer_runs_make_them_and_match_eager_weights(artifact):
    session = HybridSession(artifact)
    tensors, layers = session.run_layers(_feed())
    assert all(k.weights.ready for k in _lazy(session))
    eager = _eager(artifact)
    want_tensors, want_layers = eager.run_layers(_feed())
    _traces_equal(layers, want_layers)
    output = session.get_outputs()[0].name
    np.testing.assert_array_equal(tensors[output], want_tensors[output])


def test_layers_engine_prepares_on_first_run(artifact):
    session = HybridSession(artifact, engine="layers")
    assert not any(k.weights.ready for k in _lazy(session))
    got = session.run(None, _feed(1))[0]
    assert all(k.weights.ready for k in _lazy(session))
    np.testing.assert_array_equal(got, _eager(artifact).run(None, _feed(1))[0])


def test_concurrent_first_runs_give_identical_results(artifact):
    session = HybridSession(artifact)
    start = threading.Barrier(4)

    def first_run(_):
        start.wait()
        return session.run_layers(_feed(2))[1]

    with ThreadPoolExecutor(4) as pool:
        traces = list(pool.map(first_run, range(4)))
    want = _eager(artifact).run_layers(_feed(2))[1]
    for trace in traces:
        _traces_equal(trace, want)


def test_lazy_weights_are_made_once_from_several_threads():
    calls = []

    def prepare(weight):
        calls.append(weight)
        time.sleep(0.05)  # long enough for the other threads to arrive meanwhile
        return weight * 2

    lazy = LazyWeights(lambda: np.arange(3.0), prepare)
    start = threading.Barrier(4)

    def get(_):
        start.wait()
        return lazy.get()

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(get, range(4)))
    assert len(calls) == 1 and all(g is got[0] for g in got)
    np.testing.assert_array_equal(got[0], [0.0, 2.0, 4.0])


def test_shared_source_replaces_the_raw_one_until_made():
    lazy = LazyWeights(lambda: np.zeros(2), lambda w: w + 1)
    lazy.share(lambda: np.ones(2))
    np.testing.assert_array_equal(lazy.get(), [2.0, 2.0])
    lazy.share(lambda: np.full(2, 7.0))  # too late: the form is made
    np.testing.assert_array_equal(lazy.get(), [2.0, 2.0])


def test_graph_engine_weights_come_from_the_segments_arrays(artifact):
    """The first run's weights are read from the segment's store, the arrays it hands
    onnxruntime, not from a raw constant kept alive beside them: no kernel's source holds an
    array of its own (so a store that spills its arrays to a file frees them all)."""
    session = HybridSession(artifact)
    [segment] = session.stages[0].runner.graph.parts
    assert not segment.weights.spilled  # a small model: onnxruntime reads our arrays
    kept = [array for _, array in segment.weights.items()]
    fc = next(k for k in _lazy(session) if not hasattr(k, "mode"))
    assert any(fc.weights._source() is array for array in kept)
    conv = next(k for k in _lazy(session) if getattr(k, "mode", "") == "winograd")
    oihw = next(array for array in kept if array.shape == (64, 64, 3, 3))
    np.testing.assert_array_equal(conv.weights._source(), oihw.transpose(0, 2, 3, 1))
    for kernel in _lazy(session):
        assert not _holds_array(kernel.weights._source), kernel.spec.name


def _holds_array(function, depth: int = 0) -> bool:
    """Whether ``function``'s closure (or a closure it holds) holds a numpy array."""
    for cell in getattr(function, "__closure__", None) or ():
        value = cell.cell_contents
        if isinstance(value, np.ndarray) or (depth < 3 and callable(value)
                                             and _holds_array(value, depth + 1)):
            return True
    return False
