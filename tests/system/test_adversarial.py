"""Hostile inputs (issue 15): nothing read outside its directory, nothing half-written, no raw
exceptions. One test (or parametrized group) per case of the issue, numbered as there.

Each asserts the exception type, that the message names the file and the node or tensor, that
no file outside the allowed directory was opened (``hostile.opened_files``) nor its bytes written
(``hostile.assert_no_canary``), and that no partial output or staging directory was left.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert import (ArtifactError, HybridSession, InvalidModelError, ModelLoadError,
                          MrvlConvertError, OptionError, OutputDirError, RuleFileError, ShapeError,
                          UnsupportedModelError, convert, convert_many)
from mrvl_convert.cli import main as cli_main, verify_main
from mrvl_convert.cli.args import UsageError, parse_shapes
from mrvl_convert.rules.loader import load_rule_file
from support import badmodels as bm
from support import hostile
from support.badmodels import cnn_with_cpu_tail

pytestmark = pytest.mark.system

BIN = Path(sys.executable).parent


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    return hostile.make_outside(tmp_path)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("art") / "cnn"
    convert(cnn_with_cpu_tail(), out)
    return out


def copy_artifact(artifact: Path, tmp_path: Path) -> Path:
    target = tmp_path / "work" / "cnn"
    shutil.copytree(artifact, target)
    return target


def edit_json(path: Path, change: Callable[[Any], Any]) -> None:
    doc = json.loads(path.read_text())
    doc = change(doc) or doc
    path.write_text(json.dumps(doc))


def drop_hashes(manifest: Any) -> None:
    for stage in manifest["stages"]:
        del stage["sha256"]


def expect(error: type, fn: Callable, *needles: str) -> MrvlConvertError:
    with pytest.raises(error) as info:
        fn()
    message = str(info.value)
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    assert "\n" not in message
    return info.value


# ---- 1. artifact paths stay inside the artifact directory ------------------------------------

HOSTILE_PATHS = {
    "dotdot": lambda outside: "../../outside/canary.json",
    "absolute": lambda outside: str(outside / "canary.json"),
    "inner_dotdot": lambda outside: "x/../../../outside/canary.json",
    "nul": lambda outside: "small_cnn_mrvl_0-nodes.json\0.txt",
    "symlink": lambda outside: "link.json",
    "not_a_string": lambda outside: ["small_cnn_mrvl_0-nodes.json"],
}


@pytest.mark.parametrize("field,stage", [("nodes_json", 0), ("consts_json", 0), ("onnx", 1)])
@pytest.mark.parametrize("kind", sorted(HOSTILE_PATHS))
def test_1_stage_file_outside_the_artifact(artifact, tmp_path, outside, field, stage, kind):
    art = copy_artifact(artifact, tmp_path)
    (art / "link.json").symlink_to(outside / "canary.json")
    value = HOSTILE_PATHS[kind](outside)
    edit_json(art / "manifest.json", lambda doc: doc["stages"][stage].__setitem__(field, value))
    with hostile.opened_files() as opened:
        expect(ArtifactError, lambda: HybridSession(art), str(art / "manifest.json"),
               f"field '{field}'")
    hostile.assert_not_opened(opened, outside)


def test_1_mrvl_verify_refuses_a_tampered_manifest(artifact, tmp_path, outside, capsys):
    art = copy_artifact(artifact, tmp_path)
    model = bm.save(cnn_with_cpu_tail(), tmp_path / "cnn.onnx")
    edit_json(art / "manifest.json",
              lambda doc: doc["stages"][1].__setitem__("onnx", str(outside / "canary.bin")))
    code = verify_main([str(model), str(art)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "manifest.json" in err and "absolute path" in err


# ---- 2. external data of a Constant node: the model's directory, never the CWD ---------------

def _external_tensor(name: str, dims, location: str) -> onnx.TensorProto:
    tensor = onnx.TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(dims))
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", location
    return tensor


def constant_weight_model(location: str) -> onnx.ModelProto:
    """Conv whose weight comes from a Constant node with external data (64 floats: 4x1x4x4)."""
    nodes = [helper.make_node("Constant", [], ["w"], name="weight_const",
                              value=_external_tensor("w_value", (4, 1, 4, 4), location)),
             helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[4, 4])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])
    return bm.make(nodes, [x], [y], name="constw")


def test_2_constant_external_data_is_read_beside_the_model(tmp_path, outside, monkeypatch):
    weights = np.linspace(-1, 1, 64, dtype=np.float32)
    model_dir = tmp_path / "model"
    path = bm.save(constant_weight_model("w.bin"), model_dir / "m.onnx")
    (model_dir / "w.bin").write_bytes(weights.tobytes())
    monkeypatch.chdir(outside)  # holds a w.bin too: the canary
    out = tmp_path / "out" / "m"
    with hostile.opened_files() as opened:
        convert(path, out)
    hostile.assert_not_opened(opened, outside)
    hostile.assert_no_canary(tmp_path / "out")
    x = np.random.default_rng(0).standard_normal((1, 1, 8, 8)).astype(np.float32)
    got = HybridSession(out).run(None, {"x": x})[0]
    reference = onnx.load(str(path))  # loads w.bin from model_dir, as onnx does given the path
    want = ort.InferenceSession(reference.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("location", ["../outside/canary.bin", "ABS", "w\0.bin", "sub/../w.bin"])
def test_2_constant_external_data_outside_is_refused(tmp_path, outside, location):
    location = str(outside / "canary.bin") if location == "ABS" else location
    path = bm.save(constant_weight_model(location), tmp_path / "model" / "m.onnx")
    with hostile.opened_files() as opened:
        expect(ModelLoadError, lambda: convert(path, tmp_path / "out" / "m"), str(path),
               "node 'weight_const'", "tensor 'w_value'", "external data location")
    hostile.assert_not_opened(opened, outside)
    hostile.assert_no_staging(tmp_path / "out")
    assert not (tmp_path / "out" / "m").exists()


def test_2_subgraph_initializer_external_data_outside_is_refused(tmp_path, outside):
    branch = helper.make_graph([helper.make_node("Add", ["x", "k"], ["b"], name="add_k")], "br",
                               [], [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4])],
                               [_external_tensor("k", (1, 4), "../outside/canary.bin")])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["n"], name="neg")], "other", [],
                              [helper.make_tensor_value_info("n", TensorProto.FLOAT, [1, 4])])
    nodes = [helper.make_node("Constant", [], ["c"], name="cond",
                              value=numpy_helper.from_array(np.array(True), "c_value")),
             helper.make_node("If", ["c"], ["y"], name="branchy", then_branch=branch,
                              else_branch=other)]
    model = bm.make(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    path = bm.save(model, tmp_path / "model" / "m.onnx")
    with hostile.opened_files() as opened:
        expect(ModelLoadError, lambda: convert(path, tmp_path / "out" / "m"), str(path),
               "tensor 'k'")
    hostile.assert_not_opened(opened, outside)


def test_2_modelproto_with_external_data_is_refused(tmp_path, outside, monkeypatch):
    monkeypatch.chdir(outside)
    model = constant_weight_model("w.bin")
    with hostile.opened_files() as opened:
        expect(ModelLoadError, lambda: convert(model, tmp_path / "out" / "m"), "tensor 'w_value'",
               "pass the model's path")
    hostile.assert_not_opened(opened, outside)


# ---- 3. rule files are bounded -----------------------------------------------------------------

def alias_bomb() -> str:
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    return "\n".join(lines + ["composites: *a9", ""])


@pytest.mark.parametrize("name,text,needle", [
    ("bomb.yaml", alias_bomb(), "aliases"),
    ("deep.yaml", "[" * 100_000 + "]" * 100_000, "nests deeper"),
    ("deep_map.yaml", "a: {" * 5000 + "}" * 5000, "nests deeper"),
    ("bigint.yaml", "composites: [{name: mrvl.x, priority: " + "9" * 10_000 + "}]", "integer"),
    ("huge.yaml", "# " + "x" * (2 << 20), "larger than"),
])
def test_3_rule_file_bounds(tmp_path, name, text, needle):
    path = tmp_path / name
    path.write_text(text)
    before = hostile.peak_rss_mb()
    start = time.perf_counter()
    error = expect(RuleFileError, lambda: load_rule_file(path), str(path))
    assert time.perf_counter() - start < 20
    assert hostile.peak_rss_mb() - before < hostile.RSS_LIMIT_MB
    assert needle in str(error) or needle == "integer" and "digits" in str(error)


def test_3_cli_reports_a_rule_bomb_in_one_line(tmp_path, capsys):
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb())
    model = bm.save(bm.small_cnn(), tmp_path / "m.onnx")
    assert cli_main([str(model), "-o", str(tmp_path / "out"), "--rules", str(path), "-q"]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "Traceback" not in err


# ---- 4. If/Loop/Scan take their outer-scope inputs with them -----------------------------------

def if_after_conv() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.2).astype(np.float32), "w")
    out = [1, 4, 8, 8]
    then_g = helper.make_graph([helper.make_node("Relu", ["c"], ["t"], name="then_relu")], "then",
                               [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, out)])
    else_g = helper.make_graph([helper.make_node("Neg", ["c"], ["e"], name="en")], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, out)])
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
             helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_g,
                              else_branch=else_g)]
    zero = numpy_helper.from_array(np.array(0, np.float32), "zero")
    return bm.make(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], [w, zero])


def unoptimized_session(model: onnx.ModelProto) -> ort.InferenceSession:
    # onnxruntime 1.18's graph optimizer aborts the process (a failed assertion) on an If whose
    # branch reads a Conv's output from the outer scope; the unoptimized graph runs.
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options)


@pytest.mark.parametrize("sign", [1.0, -1.0])  # both branches taken
def test_4_if_reading_an_outer_tensor_after_a_conv(tmp_path, sign):
    model = if_after_conv()
    result = convert(model, tmp_path / "m")
    assert result.placement("conv")["placement"] == "mrvl"
    assert result.placement("if")["placement"] == "cpu"
    x = sign * np.abs(np.random.default_rng(1).standard_normal((1, 3, 8, 8))).astype(np.float32)
    got = HybridSession(tmp_path / "m").run(None, {"x": x})[0]
    want = unoptimized_session(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)  # the Conv ran in fp16


def test_4_if_reading_a_graph_input_alone_on_cpu(tmp_path):
    model = if_after_conv()
    del model.graph.node[0]
    model.graph.node[-1].attribute[0].g.node[0].input[0] = "x"
    model.graph.node[-1].attribute[1].g.node[0].input[0] = "x"
    for branch in model.graph.node[-1].attribute:
        branch.g.output[0].type.tensor_type.shape.dim[1].dim_value = 3
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 3
    del model.graph.initializer[0]
    convert(model, tmp_path / "m")
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    got = HybridSession(tmp_path / "m").run(None, {"x": x})[0]
    want = unoptimized_session(model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)


# ---- 5. what goes to Mrvl is what the simulator can run ----------------------------------------

def conv_model(w_shape=(4, 3, 3, 3), bias: int = 4, **attrs) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(w_shape).astype(np.float32), "w")]
    inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(np.ones(bias, np.float32), "b"))
        inputs.append("b")
    node = helper.make_node("Conv", inputs, ["y"], name="conv", **attrs)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)
    return bm.make([node], [x], [y], inits)


@pytest.mark.parametrize("model,needle", [
    (conv_model((4, 2, 3, 3)), "input channels"),
    (conv_model((4, 1, 3, 3), group=3), "groups=3 does not divide"),
    (conv_model(kernel_shape=[5, 5]), "kernel_shape=[5, 5] contradicts"),
    (conv_model(pads=[2 ** 40] * 4), "pads="),
    (conv_model(strides=[2 ** 40] * 2), "strides="),
    (conv_model(bias=7), "the bias b has shape [7]"),
], ids=["channels", "group", "kernel_shape", "pads", "strides", "bias"])
def test_5_conv_that_does_not_fit_stays_on_cpu_with_the_reason(tmp_path, model, needle):
    result = convert(model, tmp_path / "m")
    entry = result.placement("conv")
    assert entry["placement"] == "cpu", entry
    assert needle in entry["reason"], entry["reason"]
    report = json.loads((tmp_path / "m" / "report.json").read_text())
    assert needle in report["nodes"][0]["reason"]


def test_5_maxpool_window_past_the_padded_input_stays_on_cpu(tmp_path):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[1, 1]),
             helper.make_node("MaxPool", ["c"], ["y"], name="pool", kernel_shape=[3, 3],
                              dilations=[3, 3], pads=[2, 2, 1, 1])]
    w = numpy_helper.from_array(np.ones((3, 3, 1, 1), np.float32), "w")
    model = bm.make(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 3, 3])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)], [w])
    result = convert(model, tmp_path / "m")
    entry = result.placement("pool")
    assert entry["placement"] == "cpu" and "larger than the padded input" in entry["reason"]


# ---- 6. SIGTERM mid-write; stale staging directories -------------------------------------------

def test_6_sigterm_mid_write_leaves_nothing(tmp_path):
    model = bm.save(bm.small_cnn(), tmp_path / "m.onnx")
    out = tmp_path / "out"
    env = dict(os.environ, _MRVL_CONVERT_TEST_WRITE_DELAY="2")
    proc = subprocess.Popen([str(BIN / "mrvl-convert"), str(model), "-o", str(out), "-j", "1",
                             "-q"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not any(p.name.startswith(".m.tmp-") for p in (out.iterdir() if out.exists() else [])):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM
    hostile.assert_no_staging(out)
    assert not (out / "m").exists()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_6_stale_staging_of_dead_processes_is_cleaned(tmp_path):
    out = tmp_path / "out"
    dead = out / f".m.tmp-{_dead_pid()}-abc"
    dead_old = out / f".m.old-{_dead_pid()}-abc"
    live = out / f".m.tmp-{os.getppid()}-xyz"  # a live process: another run's, kept
    other_model = out / f".n.tmp-{_dead_pid()}-abc"  # another model's: not this run's business
    for d in (dead, dead_old, live, other_model):
        (d / "half").mkdir(parents=True)
    convert(bm.small_cnn(), out / "m")
    left = sorted(p.name for p in out.iterdir())
    assert left == sorted(["m", live.name, other_model.name])


# ---- 7. no raw exceptions for inputs a user can cause ------------------------------------------

def test_7_raw_data_longer_than_the_shape(tmp_path):
    model = bm.small_cnn()
    model.graph.initializer[1].raw_data += b"\0" * 8
    expect(ModelLoadError, lambda: convert(model, tmp_path / "o" / "m"), "small_cnn",
           "tensor 'b'", "need 16")
    hostile.assert_no_staging(tmp_path / "o")


def test_7_bf16_input(tmp_path):
    model = bm.small_cnn()
    model.graph.input[0].name = "xb"
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.BFLOAT16
    model.graph.node.insert(0, helper.make_node("Cast", ["xb"], ["x"], name="cast", to=1))
    expect(UnsupportedModelError, lambda: convert(model, tmp_path / "m"), "small_cnn",
           "tensor 'xb'", "BFLOAT16")


def test_7_external_location_with_nul(tmp_path):
    model = bm.small_cnn()
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", "w\0.bin"
    path = bm.save(model, tmp_path / "m.onnx")
    expect(ModelLoadError, lambda: convert(path, tmp_path / "o" / "m"), str(path), "tensor 'w'",
           "NUL")


@pytest.mark.parametrize("name,change,needle", [
    ("manifest.json", lambda t: t.replace('"shape": [', '"shape": [' + "9" * 100_000 + ",", 1),
     "digits"),
    ("manifest.json", lambda t: t[:-2] + ', "x": ' + "[" * 200_000 + "]" * 200_000 + "}\n",
     "nests deeper"),
    ("manifest.json", lambda t: t[:-2] + ', "x": ' + "[" * 100 + "]" * 100 + "}\n",
     "nests deeper"),
    ("manifest.json", lambda t: t.replace('"shape": [', '"shape": [NaN, ', 1), "NaN"),
    ("small_cnn_mrvl_0-nodes.json", lambda t: t + " " * (300 << 20), "bytes"),
    ("small_cnn_mrvl_0-consts.json", lambda t: json.dumps({k: dict(v, shape=[2 ** 32, 2 ** 32])
                                                     for k, v in json.loads(t).items()}),
     "beyond the limits"),
])
def test_7_hostile_artifact_documents(artifact, tmp_path, name, change, needle):
    art = copy_artifact(artifact, tmp_path)
    if name != "manifest.json":  # the manifest rewritten too (its hashes would refuse the
        edit_json(art / "manifest.json", drop_hashes)  # file first): the reader's own bounds
    path = art / name
    path.write_text(change(path.read_text()))
    before = hostile.peak_rss_mb()
    expect(ArtifactError, lambda: HybridSession(art), str(path), needle)
    assert hostile.peak_rss_mb() - before < hostile.RSS_LIMIT_MB


def test_7_mrvl_verify_with_another_input_shape(artifact, tmp_path, capsys):
    model = bm.save(cnn_with_cpu_tail(), tmp_path / "other.onnx")
    edit = onnx.load(str(model))
    edit.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 16
    onnx.save(edit, str(model))
    code = verify_main([str(model), str(artifact)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert str(model) in err and "tensor 'x'" in err and "[1, 3, 8, 8]" in err


def test_7_summary_json_is_a_directory(tmp_path, capsys):
    model = bm.save(bm.small_cnn(), tmp_path / "m.onnx")
    out = tmp_path / "out"
    (out / "summary.json").mkdir(parents=True)
    expect(OutputDirError, lambda: convert_many([model], out), str(out / "summary.json"))
    assert cli_main([str(model), "-o", str(out), "-q"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "summary.json" in err and "Traceback" not in err


def test_7_read_only_output_that_exists(tmp_path, monkeypatch, capsys):
    """A read-only filesystem, simulated: every new file or directory in OUT fails with EROFS
    (chmod would not stop root)."""
    import tempfile

    def erofs(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))
    model = bm.save(bm.small_cnn(), tmp_path / "m.onnx")
    out = tmp_path / "out"
    out.mkdir()
    real_mkdir = os.mkdir

    def erofs_inside_out(path, *args, **kwargs):   # the staging directory is an os.mkdir
        if str(path).startswith(str(out)):
            erofs()
        return real_mkdir(path, *args, **kwargs)
    monkeypatch.setattr(tempfile, "mkdtemp", erofs)
    monkeypatch.setattr(tempfile, "mkstemp", erofs)
    monkeypatch.setattr(os, "mkdir", erofs_inside_out)
    assert cli_main([str(model), "-o", str(out), "-j", "1", "-q"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Read-only file system" in err
    assert all(line.startswith("mrvl-convert: ") for line in err.splitlines())
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("shapes", [{"x": "1,3,8,8"}, {"x": [1.5, 3, 8, 8]}, {"x": [True, 3, 8, 8]},
                                    {"x": 4}])
def test_7_and_10_shapes_must_be_whole_numbers(tmp_path, shapes):
    model = bm.small_cnn(batch="N")
    expect(ShapeError, lambda: convert(model, tmp_path / "m", shapes=shapes), "tensor 'x'",
           "whole numbers")
    expect(ShapeError, lambda: convert_many([bm.save(model, tmp_path / "m.onnx")],
                                            tmp_path / "o", shapes=shapes), "tensor 'x'")


@pytest.mark.parametrize("jobs", [-1, 0, 1.5, "2", True])
def test_7_convert_many_jobs(tmp_path, jobs):
    model = bm.save(bm.small_cnn(), tmp_path / "m.onnx")
    expect(OptionError, lambda: convert_many([model, model], tmp_path / "o", jobs=jobs), "jobs=")
    assert not (tmp_path / "o").exists()


def test_5_huge_dilation_is_a_model_onnxruntime_refuses(tmp_path):
    expect(InvalidModelError, lambda: convert(conv_model(dilations=[70000, 70000]),
                                              tmp_path / "m"), "node 'conv'", "negative shape")


def test_7_conv_weight_of_rank_3(tmp_path):
    expect(InvalidModelError, lambda: convert(conv_model((4, 3, 3)), tmp_path / "m"), "node 'conv'")


def test_7_cli_internal_error_is_one_line_saying_it_is_a_bug(tmp_path, monkeypatch, capsys):
    import mrvl_convert.cli.convert

    def broken(*args, **kwargs):
        raise KeyError("boom")
    monkeypatch.setattr(mrvl_convert.cli.convert, "run_batch", broken)
    model = bm.save(bm.small_cnn(), tmp_path / "m.onnx")
    assert cli_main([str(model), "-o", str(tmp_path / "out"), "-q"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "internal error KeyError" in err and "issue tracker" in err


# ---- 8. errors name the model ------------------------------------------------------------------

def test_8_graph_without_outputs(tmp_path):
    model = bm.small_cnn()
    del model.graph.output[:]
    expect(InvalidModelError, lambda: convert(model, tmp_path / "m"), "model small_cnn",
           "no outputs")


def test_8_maxpool_window_larger_than_the_input(tmp_path):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[1, 1]),
             helper.make_node("MaxPool", ["c"], ["y"], name="pool", kernel_shape=[12, 12])]
    w = numpy_helper.from_array(np.ones((3, 3, 1, 1), np.float32), "w")
    model = bm.make(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 3, 3])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)], [w],
                    name="tiny")
    path = bm.save(model, tmp_path / "tiny.onnx")
    expect(InvalidModelError, lambda: convert(path, tmp_path / "o" / "m"), str(path),
           "node 'pool'", "tensor 'y'", "negative shape")
    hostile.assert_no_staging(tmp_path / "o")


# ---- 9. published files honour the umask --------------------------------------------------------

@pytest.mark.parametrize("mask,dir_mode,file_mode", [(0o022, 0o755, 0o644), (0o027, 0o750, 0o640)])
def test_9_umask(tmp_path, mask, dir_mode, file_mode):
    model = bm.save(bm.small_cnn(), tmp_path / "m.onnx")
    previous = os.umask(mask)
    try:
        convert_many([model], tmp_path / "out", jobs=1)
    finally:
        os.umask(previous)
    assert (tmp_path / "out" / "m").stat().st_mode & 0o777 == dir_mode
    assert (tmp_path / "out" / "summary.json").stat().st_mode & 0o777 == file_mode
    for path in (tmp_path / "out" / "m").iterdir():
        assert path.stat().st_mode & 0o777 == file_mode, path


# ---- 10. strict --input-shape ------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["x:1_0,3,8,8", "x:\u0661,3,8,8", "x: 1,3,8,8", "x:+1,3,8,8",
                                  "x:1,3,8,8\n", "x:" + "9" * 40])
def test_10_input_shape_is_ascii_digits_only(spec):
    with pytest.raises(UsageError):
        parse_shapes([spec])


def test_10_input_shape_good():
    assert parse_shapes(["x:1,3,8,8"]) == {"x": [1, 3, 8, 8]}
