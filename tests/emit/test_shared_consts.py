"""An unrolled recurrent cell's steps all read one ``R^T``: its FC kernel is made once per stage
(``layers/fc.py``), its base64 text once per subgraph (``emit/mrvl_json.py``) and its bytes
once per file (``emit/base64_text.py``), each step's constant still written under its own name,
the file byte for byte what the compact JSON encoder writes. FCs whose weights differ, or read
one buffer in another orientation or scale, keep their own kernels."""
from __future__ import annotations

import base64
import importlib
import json
from pathlib import Path
from typing import Dict, List

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.emit import mrvl_json
from mrvl_convert.emit.base64_text import Base64Text, consts_chunks
from support.recurrent import cell_model

_CONVERT = importlib.import_module("mrvl_convert.convert")


def _lowered(monkeypatch, model: onnx.ModelProto, out: Path) -> List:
    """Convert ``model`` into ``out``; every lowered Mrvl subgraph, in order."""
    made: List = []
    lower = _CONVERT.lower_stage

    def keep(*args, **kwargs):
        made.append(lower(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(_CONVERT, "lower_stage", keep)
    mrvl_convert.convert(model, out)
    return made


def _consts(out: Path) -> Dict[str, Dict]:
    [path] = out.glob("*-consts.json")
    return json.loads(path.read_bytes())


def _decoded(entry: Dict) -> np.ndarray:
    data = np.frombuffer(base64.b64decode(entry["data_base64"]), "<f4")
    return data.reshape(entry["shape"])


def test_the_steps_of_an_unrolled_cell_share_one_read_only_kernel(monkeypatch, tmp_path):
    steps, hidden = 6, 4
    model = cell_model("LSTM", steps=steps, hidden=hidden, states="inputs")
    [sub] = _lowered(monkeypatch, model, tmp_path / "out")
    r = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "R"))
    kernels = [array for layer in sub.layers if layer.kind == "FC"
               for role, array in layer.consts if role == "kernel"
               and array.shape == (4 * hidden, hidden)]
    assert len(kernels) == steps  # every step's H R^T, the first's from the h0 input too
    assert len({id(k) for k in kernels}) == 1  # main: one copy per step
    assert not kernels[0].flags.writeable
    np.testing.assert_array_equal(kernels[0], r[0].astype(np.float32))


def test_a_shared_kernel_is_encoded_once_and_written_under_each_name(monkeypatch, tmp_path):
    steps, hidden = 5, 4
    model = cell_model("GRU", "bidirectional", steps=steps, hidden=hidden, states="inputs")
    encoded: List[tuple] = []
    encode = mrvl_json.encode_const

    def counted(array):
        encoded.append(array.shape)
        return encode(array)

    monkeypatch.setattr(mrvl_json, "encode_const", counted)
    mrvl_convert.convert(model, tmp_path / "out")
    r = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "R"))
    # one R^T per direction, its z and r gates' and its h gate's columns: 2 x 2 arrays, each
    # encoded once (main: once per step, 2 x 2 x 5)
    assert encoded.count((2 * hidden, hidden)) + encoded.count((hidden, hidden)) == 4
    written = [e for e in _consts(tmp_path / "out").values()
               if e["shape"] == [2 * hidden, hidden]]
    assert len(written) == 2 * steps
    for d in range(2):
        assert sum(np.array_equal(_decoded(e), r[d][:2 * hidden]) for e in written) == steps
    [path] = (tmp_path / "out").glob("*-consts.json")
    text = path.read_bytes()
    standard = json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False) + "\n"
    assert text == standard.encode("utf-8")


def _two_products() -> onnx.ModelProto:
    """x [1, 8] -> MatMul(W) -> Relu -> Gemm(W, transB=1, alpha=2) -> Relu -> MatMul(V): W's
    one buffer read as W^T, then as 2 W; V, of W's shape, another buffer."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 8)).astype(np.float32)
    v = rng.standard_normal((8, 8)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["a"], name="first"),
             helper.make_node("Relu", ["a"], ["b"], name="relu1"),
             helper.make_node("Gemm", ["b", "W"], ["c"], name="gemm", transB=1, alpha=2.0),
             helper.make_node("Relu", ["c"], ["d"], name="relu2"),
             helper.make_node("MatMul", ["d", "V"], ["y"], name="last")]
    graph = helper.make_graph(
        nodes, "products", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(v, "V")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def test_fcs_of_one_buffer_read_otherwise_keep_their_own_kernels(monkeypatch, tmp_path):
    model = _two_products()
    w, v = (numpy_helper.to_array(t) for t in model.graph.initializer)
    [sub] = _lowered(monkeypatch, model, tmp_path / "out")
    kernels = [array for layer in sub.layers if layer.kind == "FC"
               for role, array in layer.consts if role == "kernel"]
    assert len(kernels) == 3
    for got, want in zip(kernels, (w.T, 2 * w, v.T)):
        np.testing.assert_array_equal(got, want)
    written = [_decoded(e) for e in _consts(tmp_path / "out").values() if e["shape"] == [8, 8]]
    assert len(written) == 3
    for got, want in zip(written, (w.T, 2 * w, v.T)):
        np.testing.assert_array_equal(got, want)


def test_a_base64_text_shared_by_entries_streams_as_the_encoder_writes_it():
    shared = Base64Text.of(np.arange(6, dtype="<f4"))
    own = Base64Text.of(np.ones(3, "<f4"))
    document = {f"n{k}_const_0": {"shape": [6], "dtype": "float32", "data_base64": shared}
                for k in range(3)}
    document["é_const_1"] = {"shape": [3], "data_base64": own, "min": "1"}
    document["n9_const_0"] = {"data_base64": shared}
    streamed = b"".join(consts_chunks(document))
    want = json.dumps(document, separators=(",", ":"), ensure_ascii=False) + "\n"
    assert streamed == want.encode("utf-8")
