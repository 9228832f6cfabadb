"""HybridSession, compare() and mrvl-verify on a hand-made Mrvl -> CPU -> Mrvl artifact."""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from mrvl_convert import convert
from mrvl_convert.errors import ArtifactError, InputFeedError
from mrvl_convert.runtime import HybridSession
from mrvl_convert.verify.tolerances import Tolerance, Tolerances
from mrvl_convert.verify.compare import compare
from mrvl_convert.kernels.gemm import GEMM_ENGINES
from mrvl_convert.cli.verify import main as verify_main
from support import badmodels
from support import handmade
from support.onnxref import ORT_OLD_CEIL_POOLING, run_model


@pytest.fixture()
def artifact(tmp_path):
    return handmade.make(str(tmp_path / "art"))


def feed(seed=0):
    return {"x": np.random.default_rng(seed).standard_normal(handmade.X_SHAPE)
            .astype(np.float32)}


def test_session_matches_fp32_onnxruntime(artifact):
    model, directory = artifact
    session = HybridSession(directory)
    assert [(a.name, a.shape, a.type) for a in session.get_inputs()] == \
        [("x", [1, 3, 8, 8], "tensor(float)")]
    assert [(a.name, a.shape, a.type) for a in session.get_outputs()] == \
        [("y", [1, 2, 8, 8], "tensor(float)")]
    x = feed()
    [got] = session.run(None, x)
    [want] = run_model(model, x)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-2 * np.abs(want).max()


@pytest.mark.parametrize("gemm", GEMM_ENGINES)
@pytest.mark.parametrize("which", ["mrvl_cpu_mrvl", "cnn_64x64x32"])
def test_runs_from_several_threads_give_the_serial_results(tmp_path, which, gemm):
    """Run as onnxruntime sessions are, from a thread pool: each call must get exactly the
    outputs it gets alone. The 64x64x32 CNN's layers are large enough for numpy to release the
    GIL inside them, so calls really interleave there; the handmade artifact has a CPU stage."""
    if which == "mrvl_cpu_mrvl":
        _, directory = handmade.make(str(tmp_path / "art"))
    else:
        directory = str(tmp_path / "cnn")
        convert(badmodels.small_cnn(channels=32, size=64), directory)
    session = HybridSession(directory, gemm=gemm)
    spec = session.get_inputs()[0]
    rng = np.random.default_rng(0)
    feeds = [{spec.name: rng.standard_normal(spec.shape).astype(np.float32)} for _ in range(12)]
    alone = [session.run(None, f)[0] for f in feeds]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            together = list(pool.map(lambda f: session.run(None, f)[0], feeds))
            for got, want in zip(together, alone):
                np.testing.assert_array_equal(got, want)


def test_capture_returns_every_boundary_tensor(artifact):
    _, directory = artifact
    session = HybridSession(directory)
    (y,), tensors = session.run(["y"], feed(), capture=True)
    assert {"x", "c", "s", "y"} <= set(tensors)
    np.testing.assert_array_equal(tensors["y"], y)
    np.testing.assert_allclose(tensors["s"], 1 / (1 + np.exp(-tensors["c"])), rtol=1e-6)
    [c] = session.run(["c"], feed())  # boundary tensors can be asked for by name too
    np.testing.assert_array_equal(c, tensors["c"])


@pytest.mark.parametrize("bad,pattern", [
    ({"input": np.zeros(handmade.X_SHAPE, np.float32)}, r"tensor 'input'.*no input.*\['x'\]"),
    ({}, r"tensor 'x'.*missing.*tensor\(float\) of shape \[1, 3, 8, 8\]"),
    ({"x": np.zeros((1, 8, 8, 3), np.float32)}, r"tensor 'x'.*shape \[1, 8, 8, 3\].*expected "
                                                r"\[1, 3, 8, 8\]"),
    ({"x": np.zeros(handmade.X_SHAPE, np.float64)}, r"tensor 'x'.*float64.*tensor\(float\)"),
])
def test_bad_feeds_name_the_input(artifact, bad, pattern):
    session = HybridSession(artifact[1])
    with pytest.raises(InputFeedError, match=pattern):
        session.run(None, bad)


def test_unknown_output_name(artifact):
    with pytest.raises(InputFeedError, match="tensor 'nope'"):
        HybridSession(artifact[1]).run(["nope"], feed())


def _edit_manifest(directory, edit):
    path = os.path.join(directory, "manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    edit(manifest)
    with open(path, "w") as f:
        json.dump(manifest, f)


@pytest.mark.parametrize("edit,pattern", [
    (lambda m: m["stages"].pop(0), r"reads tensor 'c' before any stage produces it"),
    (lambda m: m["stages"][1].update(onnx="missing.onnx"), r"'missing.onnx'"),
    (lambda m: m["stages"][0]["inputs"][0].update(shape=[1, 3, 9, 9]), r"do not match"),
    (lambda m: m["stages"][2].update(kind="gpu"), r"kind 'gpu'"),
    (lambda m: m["model"]["outputs"][0].update(name="z"), r"model output 'z'"),
])
def test_inconsistent_manifest(artifact, edit, pattern):
    _edit_manifest(artifact[1], edit)
    with pytest.raises(ArtifactError, match=pattern):
        HybridSession(artifact[1])


def test_missing_manifest(tmp_path):
    with pytest.raises(ArtifactError, match="manifest.json: manifest not found"):
        HybridSession(str(tmp_path))


def test_compare_reports_every_boundary_and_passes(artifact):
    model, directory = artifact
    result = compare(model, directory, samples=3, seed=1)
    assert result.passed and result.samples == 3
    assert [(r.tensor, r.kind) for r in result.rows] == \
        [("c", "boundary"), ("s", "boundary"), ("y", "output")]
    for row in result.rows:
        assert 0 < row.max_rel < 1e-2 and row.cosine > 0.9999 and row.top1 is None
    table = result.format_table()
    assert "PASS" in table and "max_rel" in table
    json.dumps(result.to_dict())


def test_compare_fails_on_a_wrong_artifact(tmp_path):
    model = handmade.original_model(handmade.weights(0))
    directory = handmade.write_artifact(str(tmp_path / "other"), handmade.weights(1))
    result = compare(model, directory)
    assert not result.passed
    assert not result.rows[0].passed  # the first boundary already disagrees: located early
    assert "FAIL" in result.format_table()


def test_compare_takes_explicit_inputs_and_tolerances(artifact):
    model, directory = artifact
    strict = Tolerances(overrides={"y": Tolerance(max_rel=1e-9, reason="test: demand exact")})
    result = compare(model, directory, [feed(1), feed(2)], tolerances=strict)
    assert result.samples == 2
    assert [r.passed for r in result.rows] == [True, True, False]
    with pytest.raises(ValueError, match="reason"):
        Tolerances(overrides={"y": Tolerance(max_rel=1.0)})
    loose = compare(model, directory, feed(1), tolerances={"overrides": {
        "y": {"max_rel": 0.5, "reason": "test: dict form"}}})
    assert loose.passed and loose.rows[2].tolerance["reason"] == "test: dict form"


def test_verify_cli_exit_codes(artifact, tmp_path, capsys):
    model, directory = artifact
    model_path = str(tmp_path / "handmade.onnx")
    import onnx
    onnx.save(model, model_path)
    assert verify_main([model_path, directory, "--samples", "2"]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "y" in out
    npz = str(tmp_path / "in.npz")
    np.savez(npz, images=np.random.default_rng(0).standard_normal((4, 3, 8, 8))
             .astype(np.float32), labels=np.arange(4))
    json_path = str(tmp_path / "cmp.json")
    assert verify_main([model_path, directory, "--inputs", npz, "--json", json_path]) == 0
    with open(json_path) as f:
        assert json.load(f)["samples"] == 4
    other = handmade.write_artifact(str(tmp_path / "other"), handmade.weights(1))
    assert verify_main([model_path, other]) == 3   # verify failed, as in mrvl-convert
    # The other GEMM engine computes the same verdicts.
    assert verify_main([model_path, directory, "--gemm", "onnxruntime"]) == 0
    assert verify_main([model_path, other, "--gemm", "onnxruntime"]) == 3
    assert verify_main([model_path, directory, "--gemm", "blas"]) == 2
    # Both simulator engines compute the same verdicts.
    assert verify_main([model_path, directory, "--engine", "layers"]) == 0
    assert verify_main([model_path, other, "--engine", "layers"]) == 3
    assert verify_main([model_path, directory, "--engine", "fast"]) == 2
    capsys.readouterr()
    assert verify_main([model_path, str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "manifest not found" in err and "Traceback" not in err
    assert verify_main(["only-one-arg"]) == 2


def _conv_latepool_conv():
    """conv -> MaxPool (1x1 window, stride 3, ceil mode on 8 columns) -> conv. Windows start at
    0, 3, 6 and 9; 9 is past the input, so the pool gives 3 columns (onnxruntime 1.21+, the
    simulator) where onnx's shape inference (1.17 to 1.23 at least) says 4."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
               for n, s in (("w1", (4, 4, 3, 3)), ("w2", (4, 4, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c"], ["p"], name="pool", kernel_shape=[1, 1],
                              strides=[1, 3], ceil_mode=1),
             helper.make_node("Conv", ["p", "w2"], ["y"], name="conv2")]
    graph = helper.make_graph(
        nodes, "latepool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w"])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_cpu_stage_giving_another_shape_than_the_manifest_is_named(tmp_path):
    """When onnxruntime computes a CPU stage tensor in another shape than onnx's shape inference
    gave the manifest, the Mrvl stage reading it was built for the wrong shape: the error names
    the tensor, the CPU stage's file and both shapes."""
    from mrvl_convert.errors import ShapeError
    result = convert(_conv_latepool_conv(), tmp_path / "o", policy="multi")
    kinds = [stage["kind"] for stage in result.manifest["stages"]]
    x = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)
    session = HybridSession(result.out_dir)
    if kinds == ["mrvl"]:  # this onnx infers the pool as the layer computes it: no CPU stage
        assert session.run(None, {"x": x})[0].shape == (1, 4, 8, 3)
        return
    assert kinds == ["mrvl", "cpu", "mrvl"]
    if ORT_OLD_CEIL_POOLING:
        pytest.skip("onnxruntime < 1.21 keeps the late window, as the manifest does")
    with pytest.raises(ShapeError) as info:
        session.run(None, {"x": x})
    message = str(info.value)
    assert "tensor 'p'" in message and "latepool_cpu_0.onnx: CPU stage latepool_cpu_0" in message
    assert "gave shape [1, 4, 8, 3] but the manifest" in message and "says [1, 4, 8, 4]" in message


@pytest.mark.parametrize("threads", [1, 2])
def test_one_thread_budget_and_no_spinning(artifact, threads):
    """Every CPU stage's onnxruntime session gets the session's budget, with idle workers
    asleep; the outputs do not depend on it."""
    _, directory = artifact
    session = HybridSession(directory, threads=threads, gemm="onnxruntime")
    cpu = [s for s in session.stages if s.kind == "cpu"]
    assert cpu
    for stage in cpu:
        options = stage.runner.get_session_options()
        assert (options.intra_op_num_threads, options.inter_op_num_threads) == (threads, 1)
        for pool in ("intra_op", "inter_op"):
            assert options.get_session_config_entry(f"session.{pool}.allow_spinning") == "0"
        assert not options.enable_mem_pattern  # its block grows the peak (runtime/options.py)
    assert session.simulator.gemm.threads == threads
    x = feed()
    np.testing.assert_array_equal(session.run(None, x)[0], HybridSession(directory).run(None, x)[0])


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_bad_thread_budget(artifact, bad):
    with pytest.raises(ValueError, match="threads"):
        HybridSession(artifact[1], threads=bad)
