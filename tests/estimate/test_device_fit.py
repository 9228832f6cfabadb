""""Fits one device" verdicts that are true (issue 45's corpus: key_cnn, onsets_cnn, beats_tcn_1
and number said no while their Mrvl part fits).

- A batchless ``[frames, bins]`` input (madmom) is one sample: its lift to ``[1, frames, ...]``
  runs on CPU, so the Mrvl subgraph reads the lifted tensor and the codegen compiles it at batch
  1, not at ``frames`` (``rules/batch_axis.batchless_lifts``).
- A per-sample region of batch N is compiled at the largest divisor of N at most the smaller of
  its layers' limit and the profile's ``max_batch`` (``batch_runs``), and run N/b times.
- The batch limit is a Mrvl subgraph's: DPDK loads a TVM-built model at batch_size 1 and sizes
  its inputs and outputs as whole tensors (``mvtvm_ml_model.c``), so the CPU outputs of a
  chunked model are no batch the device refuses.
- A true misfit (axis 0 of a subgraph's tensor above the limit, heads folded into it) is still
  a "no", and its fix no longer says to convert at the batch the model already has.
"""
from __future__ import annotations

import json
import numpy as np

import mrvl_convert
from mrvl_convert.cli.convert import main as cli_main
from mrvl_convert.estimate.device import Model, Subgraph, batch
from mrvl_convert.estimate import load_profile
from support.badmodels import save
from support.device_profiles import profile_of_batch
from support.models import Builder


def _axes(b: Builder, *axes: int) -> str:
    return b.const(np.array(axes, np.int64))


def frames_net(frames: int = 16, bins: int = 12):
    """key_cnn's head: ``[frames, bins]`` lifted by Unsqueeze(0), then a channel axis, Conv."""
    b = Builder(seed=61, opset=13)
    y = b.op("Unsqueeze", [b.input("x", [frames, bins]), _axes(b, 0)], name="add_batch")
    y = b.op("Unsqueeze", [y, _axes(b, 1)], name="add_channel")   # [1, 1, T, F]
    y = b.op("Relu", [b.conv(y, 1, 4, pads=[1, 1, 1, 1])], name="act")
    return b.model([b.op("Relu", [b.conv(y, 4, 4, pads=[1, 1, 1, 1])], name="out")])


def _mrvl(result):
    (stage,) = [s for s in result.manifest["stages"] if s["kind"] == "mrvl"]
    return stage, json.loads((result.out_dir / stage["nodes_json"]).read_text())


def test_a_batchless_frames_model_fits_and_its_subgraph_reads_the_lifted_tensor(tmp_path):
    model = frames_net()
    result = mrvl_convert.convert(model, tmp_path / "a")
    device = result.report["device"]
    assert device["fits"] is True, device["reasons"]
    stage, doc = _mrvl(result)
    assert [t["shape"] for t in stage["inputs"]] == [[1, 16, 12]]
    assert doc["nodes"][0]["attrs"]["shape"] == [[1, 16, 12]] and doc["batch_size"] == "1"
    # the lift (sequence_lift.py's view of the Unsqueeze) runs on CPU, and says why
    (lift,) = result.placement("add_batch")["derived"]
    assert lift["stage"].endswith("_cpu_0") and "batchless input 'x' [16, 12]" in lift["reason"]
    assert result.placement("add_channel")["placement"] == "mrvl"
    # the model as a whole still takes [frames, bins]
    assert result.manifest["model"]["inputs"][0]["shape"] == [16, 12]
    assert mrvl_convert.compare(model, result.out_dir, samples=2).passed


def test_a_frames_axis_at_the_device_batch_is_left_on_mrvl(tmp_path):
    result = mrvl_convert.convert(frames_net(frames=1), tmp_path / "a")
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    assert result.report["device"]["fits"] is True


def cnn(batch: int):
    b = Builder(seed=62, opset=13)
    y = b.op("Relu", [b.conv(b.input("x", [batch, 3, 8, 8]), 3, 8, pads=[1, 1, 1, 1])],
             name="act")
    return b, b.op("Relu", [b.conv(y, 8, 4, pads=[1, 1, 1, 1])], name="out")


def test_a_batch_within_the_rules_limit_runs_at_the_profiles_batch(tmp_path):
    # batch 8 is the Conv rule's limit; the built-in profile (a TVM-built model) takes 1
    b, y = cnn(8)
    result = mrvl_convert.convert(b.model([y]), tmp_path / "a")
    stage, doc = _mrvl(result)
    assert stage["runs"] == 8 and doc["batch_size"] == "1"
    assert result.report["device"]["fits"] is True, result.report["device"]["reasons"]
    # a profile of max_batch 4: b = 4, 2 runs
    b, y = cnn(8)
    four = mrvl_convert.convert(b.model([y]), tmp_path / "b", estimate=profile_of_batch(tmp_path, 4))
    stage, doc = _mrvl(four)
    assert stage["runs"] == 2 and doc["batch_size"] == "4"
    assert four.report["device"]["fits"] is True, four.report["device"]["reasons"]
    assert mrvl_convert.compare(b.model([y]), four.out_dir, samples=2).passed


def test_the_cpu_outputs_of_a_chunked_model_are_no_device_batch(tmp_path):
    # number.onnx: the Mrvl stage runs 10 x batch 1, a CPU stage writes the [10, ...] outputs
    b, y = cnn(10)
    model = b.model([b.op("Sin", [y], name="cpu_tail")])
    result = mrvl_convert.convert(model, tmp_path / "a")
    assert result.placement("cpu_tail")["placement"] == "cpu"
    assert _mrvl(result)[0]["runs"] == 10
    assert result.report["device"]["fits"] is True, result.report["device"]["reasons"]


def test_the_whole_model_has_no_batch_limit_its_subgraphs_do():
    whole = Subgraph("the model", (("x", (10, 3)),), (("y", (10, 3)),))
    assert batch(Model((Subgraph("s", (("x", (1, 3)),), (("y", (1, 3)),)),), whole),
                 load_profile().device) == []
    over = batch(Model((Subgraph("s", (("x", (2, 3)),), (("y", (1, 3)),)),), whole),
                 load_profile().device)
    assert [r["subgraph"] for r in over] == ["s"]


def heads_folded():
    """Heads reshaped into axis 0 ([12, T, d] of a batch-1 model): a true misfit."""
    b = Builder(seed=63, opset=13)
    y = b.op("Reshape", [b.input("x", [1, 12, 16, 8]), b.const(np.array([12, 16, 8], np.int64))],
             name="fold")
    return b.model([b.op("Relu", [b.op("MatMul", [y, b.weight(8, 8)], name="fc")], name="act")])


def test_a_true_misfit_still_prints_and_its_fix_is_true(tmp_path, capsys):
    path = save(heads_folded(), tmp_path / "heads.onnx")
    assert cli_main([str(path), "-o", str(tmp_path / "out"), "-q"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines()
             if "does not fit one device" in line]
    assert len(lines) == 1 and "max_batch 1" in lines[0] and "has batch 12" in lines[0]
    assert "the model's batch is already 1" in lines[0] and "--input-shape" not in lines[0]


def crnn(tail_reshape: bool):
    """Conv -> [1, C, T] -> Transpose to the LSTM's time-major [T, 1, C] -> LSTM ->
    [T, 1, 1, H], then either a Reshape back to batch 1 [1, T, H] or a per-step Squeeze to
    [T, 1, H], and a MatMul head (modelA_paper, ddddocr's common, rec-model). Its gates never
    reach the clip, but a clipped cell is not unrolled (``recurrent_unroll``), so its time-major
    sequence crosses Mrvl boundaries as an unrollable one's did before."""
    b, hidden, steps = Builder(seed=64, opset=13), 6, 16
    y = b.op("Relu", [b.conv(b.input("x", [1, 3, 8, steps]), 3, 8, pads=[1, 1, 1, 1])],
             name="c1")
    y = b.op("ReduceMean", [y], name="pool_h", axes=[2], keepdims=0)          # [1, 8, T]
    seq = b.op("Transpose", [y], name="to_seq", perm=[2, 0, 1])               # [T, 1, 8]
    out = b.op("LSTM", [seq, b.weight(1, 4 * hidden, 8, scale=0.3),
                        b.weight(1, 4 * hidden, hidden, scale=0.3)], name="lstm",
               hidden_size=hidden, clip=50.0)  # clipped: not unrolled, the cell stays on CPU
    if tail_reshape:
        z = b.op("Reshape", [out, b.const(np.array([1, steps, hidden], np.int64))], name="back")
    else:
        z = b.op("Squeeze", [out, _axes(b, 1)], name="back")                  # [T, 1, H]
    return b.model([b.op("MatMul", [z, b.weight(hidden, 5)], name="head")])


def test_a_recurrent_cells_time_major_boundaries_are_batch_one(tmp_path):
    for tail_reshape in (True, False):
        model = crnn(tail_reshape)
        result = mrvl_convert.convert(model, tmp_path / f"a{tail_reshape}")
        device = result.report["device"]
        assert device["fits"] is True, device["reasons"]
        to_seq = result.placement("to_seq")
        assert to_seq["placement"] == "cpu" and "time-major" in to_seq["reason"]
        stages = [s for s in result.manifest["stages"] if s["kind"] == "mrvl"]
        assert stages[0]["outputs"][0]["shape"] == [1, 8, 16]   # before the Transpose
        assert result.placement("head")["placement"] == "mrvl"
        # a Reshape to [1, T, H] runs beside the LSTM; a per-step Squeeze region runs in
        # 16 chunks of one time step
        assert result.placement("back")["placement"] == ("cpu" if tail_reshape else "mrvl")
        assert stages[-1].get("runs", 1) == (1 if tail_reshape else 16)
        assert mrvl_convert.compare(model, result.out_dir, samples=2).passed


def test_an_unrolled_cells_time_major_output_is_laid_out_on_cpu(tmp_path):
    """An LSTM unrolled onto the accelerator (recurrent_unroll) whose Y ``[T, 1, 1, H]`` is a
    model output: the Mrvl subgraph writes the batch-1 tensor the steps were joined in, the
    Reshape to time-major runs on CPU, and the model fits (main: the subgraph wrote axis 0 T,
    'does not fit one device')."""
    from support.recurrent import cell_model

    model = cell_model("LSTM", steps=4, outputs=(True, False, False))
    result = mrvl_convert.convert(model, tmp_path / "a")
    assert result.report["summary"]["mrvl_subgraphs"] == 1
    assert result.report["device"]["fits"] is True, result.report["device"]["reasons"]
    mrvl = [s for s in result.manifest["stages"] if s["kind"] == "mrvl"]
    assert all(t["shape"][0] == 1 for s in mrvl for t in s["inputs"] + s["outputs"]), mrvl
    assert mrvl_convert.compare(model, result.out_dir, samples=2).passed


def test_a_step_a_cleanup_dropped_is_not_in_the_report(tmp_path):
    """Only Y_c read: the unrolled steps' unused outputs are dropped after canonicalize; the
    report lists what was derived from the cell and is still somewhere (was a KeyError)."""
    from support.recurrent import cell_model

    model = cell_model("LSTM", steps=1, width=1, hidden=1, bias=False,
                       outputs=(False, False, True))
    result = mrvl_convert.convert(model, tmp_path / "a")
    stages = {s["name"] for s in result.manifest["stages"]}
    derived = [d for e in result.report["nodes"] for d in e.get("derived", ())]
    assert derived and all(d["stage"] in stages for d in derived)
