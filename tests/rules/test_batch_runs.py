"""A batch above what the accelerator takes, run in chunks (issue 45: clashroyalebuildabot's
``number.onnx``, exported at batch 10, ran 0% on the accelerator: "batch 10 is larger than the
accelerator's maximum of 8"). A Mrvl region whose every op computes each sample on its own is
compiled at the largest divisor b of its batch N that its layers take and run N/b times
(``rules/batch_axis.py`` ``batch_runs``): the Nodes-JSON at batch b, the manifest's ``runs``,
HybridSession's chunks, the estimate's N/b runs. A region with an op that reads across the
samples keeps the batch limit's reason, naming that op."""
from __future__ import annotations

import importlib
import json

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.emit.validate import validate_tree
from mrvl_convert.errors import ArtifactError
from mrvl_convert.rules.batch_axis import device_batch
from mrvl_convert.runtime.session import HybridSession

from support.device_profiles import profile_of_batch
from support.models import Builder

# The module, not the function the package exports under the same name.
convert_module = importlib.import_module("mrvl_convert.convert")


def cnn(batch: int, silu: bool = False) -> "mrvl_convert.onnx.ModelProto":
    """Conv -> Relu (or SiLU: Sigmoid and a Mul2D, which takes batch 1) -> Conv -> Relu."""
    b = Builder(seed=45, opset=13)
    y = b.conv(b.input("x", [batch, 3, 8, 8]), 3, 8, pads=[1, 1, 1, 1])
    y = b.op("Mul", [y, b.op("Sigmoid", [y])], name="silu") if silu else \
        b.op("Relu", [y], name="act")
    y = b.op("Relu", [b.conv(y, 8, 4, pads=[1, 1, 1, 1])], name="out")
    return b.model([y])


def feed(batch: int, seed: int = 0) -> dict:
    return {"x": np.random.default_rng(seed).standard_normal((batch, 3, 8, 8)).astype(np.float32)}


def nodes_doc(result) -> dict:
    (stage,) = [s for s in result.manifest["stages"] if s["kind"] == "mrvl"]
    return json.loads((result.out_dir / stage["nodes_json"]).read_text())


@pytest.mark.parametrize("batch, expected", [(10, 5), (12, 6), (16, 8), (11, 1), (7, 7),
                                             (1, 1), (9, 3)])
def test_the_device_batch_is_the_largest_divisor_at_most_the_limit(batch, expected):
    assert device_batch(batch, 8) == expected


# b = the largest divisor of N at most min(the layers' limit, the profile's max_batch)
@pytest.mark.parametrize("batch, silu, max_batch, device", [
    (10, False, 8, 5), (12, False, 8, 6), (11, False, 8, 1), (10, True, 8, 1),
    (10, False, 1, 1), (12, False, 4, 4)])
def test_a_per_sample_cnn_above_the_limit_is_one_mrvl_subgraph_run_in_chunks(
        tmp_path, monkeypatch, batch, silu, max_batch, device):
    model = cnn(batch, silu)
    result = mrvl_convert.convert(model, tmp_path / "art",
                                  estimate=profile_of_batch(tmp_path, max_batch))
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    (stage,) = result.manifest["stages"]
    assert stage["runs"] == batch // device
    assert stage["inputs"][0]["shape"] == [batch, 3, 8, 8]   # the stage takes the whole batch
    doc = nodes_doc(result)
    assert doc["batch_size"] == str(device)
    assert doc["nodes"][0]["attrs"]["shape"] == [[device, 3, 8, 8]]
    assert validate_tree(result.out_dir) >= 3
    # The estimate counts every run: its MACs are the whole batch's.
    (costed,) = result.report["estimate"]["stages"]
    assert costed["runs"] == batch // device
    assert costed["matmul_macs"] == result.summary["macs"]
    chunked = HybridSession(result.out_dir).run(None, feed(batch))[0]
    # The fp16 simulator of the whole batch: the same stage lowered at batch N, run once.
    monkeypatch.setattr(convert_module, "batch_runs", lambda *args: None)
    whole = mrvl_convert.convert(model, tmp_path / "whole")
    assert "runs" not in whole.manifest["stages"][0]
    assert nodes_doc(whole)["batch_size"] == str(batch)
    np.testing.assert_array_equal(chunked, HybridSession(whole.out_dir).run(None, feed(batch))[0])
    monkeypatch.undo()
    assert mrvl_convert.compare(model, result.out_dir, samples=2).passed


def test_the_device_check_counts_a_run_not_the_batch(tmp_path):
    # TVM-built models run at batch 1 (estimate/profile.py): a Mul2D region runs at 1.
    result = mrvl_convert.convert(cnn(10, silu=True), tmp_path / "art")
    assert result.report["device"]["fits"] is True, result.report["device"]["reasons"]


def test_a_manifest_whose_runs_do_not_give_the_batch_is_refused(tmp_path):
    result = mrvl_convert.convert(cnn(10), tmp_path / "art")
    path = result.out_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["stages"][0]["runs"] = 5
    path.write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="axis 0 times its 5 runs"):
        HybridSession(result.out_dir)


def mixing(op: str, batch: int = 10):
    """The CNN, then an op that reads across the samples."""
    b = Builder(seed=46, opset=13)
    y = b.op("Relu", [b.conv(b.input("x", [batch, 3, 8, 8]), 3, 8, pads=[1, 1, 1, 1])],
             name="act")
    if op == "ReduceMean":
        y = b.op("ReduceMean", [y], name="mix", axes=[0], keepdims=1)
    elif op == "Transpose":
        y = b.op("Transpose", [y], name="mix", perm=[1, 0, 2, 3])
    else:  # a Concat of the batch with itself along axis 0
        y = b.op("Concat", [y, y], name="mix", axis=0)
    return b.model([b.conv(y, 8 if op != "Transpose" else batch, 4, pads=[1, 1, 1, 1])])


@pytest.mark.parametrize("op, why", [
    ("ReduceMean", "ReduceMean 'mix' reduces axis 0 (axes [0])"),
    ("Transpose", "Transpose 'mix' moves axis 0 (perm [1, 0, 2, 3])"),
    ("Concat", "Concat 'mix' works along axis 0 (axis=0)"),
])
def test_an_op_that_mixes_the_samples_keeps_the_batch_reason_naming_it(tmp_path, op, why):
    result = mrvl_convert.convert(mixing(op), tmp_path / "art")
    entry = result.placement("mix")
    assert entry["placement"] == "cpu"
    assert "batch 10 is larger than the accelerator's maximum of 8" in entry["reason"]
    assert why in entry["reason"]
    # The per-sample Conv before it still runs in chunks.
    assert result.placement("act")["placement"] == "mrvl"


def test_the_batch_reason_is_unchanged_for_a_batch_that_is_not_the_models(tmp_path):
    # Heads folded into axis 0 ([12, T, d] of a batch-1 model) are no batch of the device's:
    # nothing to chunk, the generic limit reads the model's batch 1 (rules/batch_axis.py).
    b = Builder(seed=47, opset=13)
    x = b.input("x", [1, 12, 16, 8])
    y = b.op("Reshape", [x, b.const(np.array([12, 16, 8], np.int64))], name="fold")
    y = b.op("MatMul", [y, b.weight(8, 8)], name="fc")
    result = mrvl_convert.convert(b.model([b.op("Relu", [y], name="act")]), tmp_path / "a")
    assert all("runs" not in s for s in result.manifest["stages"])


def lstm_of_sliced_state() -> "mrvl_convert.onnx.ModelProto":
    """An LSTM whose initial state is layer 1 of a ``[layers, batch 1, hidden]`` input."""
    b = Builder(seed=50, opset=13)
    x, h = b.input("x", [4, 1, 8]), b.input("h", [2, 1, 6])
    state = b.op("Slice", [h] + [b.const(np.array([v], np.int64)) for v in (1, 2, 0)],
                 name="layer1_state")
    y = b.op("LSTM", [x, b.weight(1, 24, 8), b.weight(1, 24, 6), "", "", state],
             name="lstm", hidden_size=6)
    return b.model([y])


def test_recurrent_states_are_not_batches():
    # silero_vad's LSTM states [directions, batch, hidden] = [2, 1, 64], sliced per layer:
    # axis 0 is the directions (ONNX's LSTM, layout 0), so the model's batch stays 1.
    import onnx
    import onnx_graphsurgeon as gs

    from mrvl_convert.rules.batch_axis import axis0_is_batch
    from mrvl_convert.rules.checks_shape import model_batch

    model = onnx.shape_inference.infer_shapes(lstm_of_sliced_state())
    graph = gs.import_onnx(model)
    (state,) = [t for t in graph.inputs if t.name == "h"]
    assert not axis0_is_batch(graph, state)
    assert model_batch(graph) == 1


def test_every_layer_of_a_chunked_stage_is_compared_on_the_whole_batch(tmp_path):
    # verify's per-layer rows: each layer's runs concatenated, a Flatten (reshape layer) too.
    b = Builder(seed=49, opset=13)
    y = b.op("Relu", [b.conv(b.input("x", [10, 3, 8, 8]), 3, 8, pads=[1, 1, 1, 1])])
    model = b.model([b.gemm(b.op("Flatten", [y], name="flat"), 8 * 8 * 8, 5)])
    result = mrvl_convert.convert(model, tmp_path / "art")
    assert [s.get("runs") for s in result.manifest["stages"]] == [10]   # the profile's batch 1
    report = mrvl_convert.compare(model, result.out_dir, samples=1, layers=True)
    rows = {row.tensor: row for row in report.rows}
    assert report.passed and rows["flat_out"].shape == [10, 512] and rows["flat_out"].passed


def test_an_int8_cnn_above_the_limit_runs_in_chunks(tmp_path, monkeypatch):
    # The int8 weights' DequantizeLinear outputs are one value for every sample, not batches.
    from mrvl_convert.quantize.recipe import Quantization

    model = cnn(10)
    rows = np.random.default_rng(0).standard_normal((4, 10, 3, 8, 8)).astype(np.float32)
    recipe = Quantization(calibration={"x": rows})
    result = mrvl_convert.convert(model, tmp_path / "art", quantize=recipe)
    assert [(s["kind"], s.get("runs")) for s in result.manifest["stages"]] == [("mrvl", 10)]
    assert nodes_doc(result)["batch_size"] == "1"
    chunked = HybridSession(result.out_dir).run(None, feed(10))[0]
    monkeypatch.setattr(convert_module, "batch_runs", lambda *args: None)
    whole = mrvl_convert.convert(model, tmp_path / "whole", quantize=recipe)
    np.testing.assert_array_equal(chunked, HybridSession(whole.out_dir).run(None, feed(10))[0])
    monkeypatch.undo()
    qdq = result.out_dir / result.manifest["quantization"]["file"]
    assert mrvl_convert.compare(qdq, result.out_dir, samples=2).passed


def test_an_lstm_state_sliced_per_layer_is_no_batch_cut(tmp_path):
    # silero_vad: "the batch dimension is not kept ([2, 1, 64] -> [1, 1, 64])" on the Slices of
    # its LSTM states; axis 0 there is the layers, so the Slice maps (and computes it right).
    model = lstm_of_sliced_state()
    result = mrvl_convert.convert(model, tmp_path / "art", min_compute_layers=0)
    assert result.placement("layer1_state")["placement"] == "mrvl"
    feeds = [{"x": np.random.default_rng(k).standard_normal((4, 1, 8)).astype(np.float32),
              "h": np.random.default_rng(k + 9).standard_normal((2, 1, 6)).astype(np.float32)}
             for k in range(2)]
    assert mrvl_convert.compare(model, result.out_dir, feeds).passed
