"""The command line as users of onnxruntime and Polygraphy expect it (issue 18): per-model
--input-shape, verification judged on the outputs with --atol/--rtol and real inputs, the
verify_failed status and exit code 3, summary.json merged across runs, errors with suggestions,
onnxruntime's warnings only with -v, and the stage shown while a model is in work."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert import MrvlConvertError, convert, convert_many
from mrvl_convert.batch import VerifyOptions
from mrvl_convert.cli.args import UsageError, parse_shapes
from mrvl_convert.cli.convert import main
from mrvl_convert.cli.output import _Progress
from mrvl_convert.emit.validate import validate
import mrvl_convert
from mrvl_convert.errors import NodeNotFoundError, ShapeError
from mrvl_convert.verify.tolerances import DEFAULT_TOLERANCE
from support import badmodels as bm

CLI = str(Path(sys.executable).with_name("mrvl-convert"))
VERIFY = str(Path(sys.executable).with_name("mrvl-verify"))


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300)


def summary(out: Path) -> dict:
    document = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    validate(document, "summary", label="summary.json")
    return document


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def _eye(scale: float) -> np.ndarray:
    return np.eye(4, dtype=np.float32)[:, :, None, None] * np.float32(scale)


def _model(nodes, inits, shape=(1, 4, 8, 8), name="m") -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def boundary_off_model() -> onnx.ModelProto:
    """Mrvl: s = x * (1 + 2**-12) - x, which fp16 makes exactly 0 (100% off); CPU: y = x + |s|.
    The boundary tensor s is wholly wrong, the output y is within 2**-12 of itself."""
    inits = [numpy_helper.from_array(_eye(1 + 2.0 ** -12), "wa"),
             numpy_helper.from_array(_eye(-1.0), "wb")]
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a"),
             helper.make_node("Conv", ["x", "wb"], ["b"], name="conv_b"),
             helper.make_node("Add", ["a", "b"], ["s"], name="add"),
             helper.make_node("Abs", ["s"], ["t"], name="abs"),
             helper.make_node("Add", ["x", "t"], ["y"], name="out")]
    return _model(nodes, inits, (1, 4, 6, 6), "boundary_off")


def faint_sigmoid_model() -> onnx.ModelProto:
    """y = Sigmoid(13.3 x - 4.7 - 13.3 x) on Mrvl-then-CPU: every value of y is near 0.009,
    and fp16's rounding of the 13.3 x terms moves it by about 1.7e-4: 2% of its own peak, far
    below what float16 can resolve of a probability."""
    inits = [numpy_helper.from_array(_eye(13.3), "wa"), numpy_helper.from_array(_eye(-13.3), "wb"),
             numpy_helper.from_array(np.full(4, -4.7, np.float32), "ba")]
    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["a"], name="conv_a"),
             helper.make_node("Conv", ["x", "wb"], ["b"], name="conv_b"),
             helper.make_node("Add", ["a", "b"], ["c"], name="add"),
             helper.make_node("Sigmoid", ["c"], ["y"], name="sigmoid")]
    return _model(nodes, inits, name="faint")


def dynamic_hw(size: int, seed: int) -> onnx.ModelProto:
    """small_cnn for size x size inputs, its input declared [1, 3, 'h', 'w']."""
    proto = bm.small_cnn(seed, size=size)
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param, dims[3].dim_param = "h", "w"
    return proto


# ---- exit codes and the verdict --------------------------------------------------------------

def test_verdict_is_the_outputs_boundaries_are_diagnostics(tmp_path: Path) -> None:
    model = bm.save(boundary_off_model(), tmp_path / "boff.onnx")
    out = tmp_path / "out"
    done = run(str(model), "-o", str(out), "--verify")
    assert done.returncode == 0, done.stderr
    assert "verify boff: PASS" in done.stdout and "stage-boundary tensor(s) over" in done.stdout
    figures = summary(out)["models"][0]["verify"]
    assert figures["passed"] and figures["boundaries_over"] == ["s"]
    [y] = figures["outputs"]
    assert y["tensor"] == "y" and y["passed"] and y["max_rel"] < DEFAULT_TOLERANCE.max_rel
    assert (y["atol"], y["rtol"]) == (DEFAULT_TOLERANCE.atol, DEFAULT_TOLERANCE.max_rel)


def test_small_valued_output_is_judged_with_an_absolute_floor(tmp_path: Path) -> None:
    model = bm.save(faint_sigmoid_model(), tmp_path / "faint.onnx")
    out = tmp_path / "out"
    done = run(str(model), "-o", str(out), "--verify", "-q")
    assert done.returncode == 0, done.stderr
    [y] = summary(out)["models"][0]["verify"]["outputs"]
    # The case of the issue: off by more than max_rel of its own peak, yet below the floor.
    assert y["max_rel"] > DEFAULT_TOLERANCE.max_rel and y["max_abs"] < 2.0 ** -12, y
    assert y["passed"]
    # Without the floor the same figures fail: converted, verify failed, exit 3.
    for atol in ("0", "y:0"):
        done = run(str(model), "-o", str(out), "--verify", "-q", "--atol", atol)
        assert done.returncode == 3, done.stderr
        line = one_line(done.stderr)
        assert str(model) in line and "verify failed" in line and "y" in line
        entry = summary(out)["models"][0]
        assert (entry["status"], entry["verified"], entry["out_dir"]) == \
               ("verify_failed", False, "faint")
        assert entry["verify"]["outputs"][0]["atol"] == 0.0
        assert (out / "faint" / "manifest.json").is_file()      # the artifacts are kept
    # A looser rtol for that output passes it again.
    done = run(str(model), "-o", str(out), "--verify", "-q", "--atol", "0", "--rtol", "y:0.05")
    assert done.returncode == 0, done.stderr


def test_exit_codes_0_1_2_3(tmp_path: Path) -> None:
    good = bm.save(bm.small_cnn(), tmp_path / "m" / "cnn.onnx")
    garbage = bm.random_bytes_file(tmp_path / "garbage.onnx")
    strict = ["--verify", "--atol", "0", "--rtol", "1e-9"]   # fp16 cannot meet these
    assert run(str(good), "-o", str(tmp_path / "o0"), "--verify").returncode == 0
    done = run(str(good), "-o", str(tmp_path / "o3"), *strict)
    assert done.returncode == 3 and "verify failed" in one_line(done.stderr)
    assert "1 of 1 models converted (1 failed verify)" in done.stdout
    # A model that does not convert outweighs a verify failure.
    both = run(str(good), str(garbage), "-o", str(tmp_path / "o1"), *strict)
    assert both.returncode == 1
    assert len(both.stderr.strip().splitlines()) == 2 and "Traceback" not in both.stderr
    rows = {r["name"]: r["status"] for r in summary(tmp_path / "o1")["models"]}
    assert rows == {"cnn": "verify_failed", "garbage": "failed"}
    assert summary(tmp_path / "o1")["totals"]["verify_failed"] == 1


@pytest.mark.parametrize("args,needle", [
    (["--atol", "1e-3"], "--atol needs --verify"),
    (["--rtol", "y:0.1"], "--rtol needs --verify"),
    (["--verify-inputs", "{tmp}/in.npz"], "--verify-inputs needs --verify"),
    (["--verify", "--atol", "abc"], "--atol 'abc': expected a number"),
    (["--verify", "--rtol", "y:-1"], "must be a finite number >= 0"),
    (["--verify", "--atol", "1e-3", "--atol", "2e-3"], "two different values"),
    (["--verify", "--verify-inputs", "{tmp}/absent.npz"], "absent.npz: no such file"),
])
def test_tolerance_and_input_options_usage_errors(tmp_path: Path, capsys, args: List[str],
                                                  needle: str) -> None:
    good = bm.save(bm.small_cnn(), tmp_path / "cnn.onnx")
    out = tmp_path / "out"
    assert main([str(good), "-o", str(out), *[a.format(tmp=tmp_path) for a in args]]) == 2
    line = one_line(capsys.readouterr().err)
    assert needle in line and "usage error" in line
    assert not out.exists()


def test_verify_inputs_feed_real_data(tmp_path: Path, capsys) -> None:
    good = bm.save(bm.small_cnn(), tmp_path / "cnn.onnx")
    npz = tmp_path / "images.npz"
    rng = np.random.default_rng(3)
    np.savez(npz, x=rng.standard_normal((5, 1, 3, 8, 8)).astype(np.float32))
    out = tmp_path / "out"
    assert main([str(good), "-o", str(out), "-q", "--verify", "--verify-inputs", str(npz)]) == 0
    figures = summary(out)["models"][0]["verify"]
    assert figures["samples"] == 5 and figures["inputs"] == str(npz)
    # Inputs that do not fit the model: converted, but verify could not run (exit 3).
    np.savez(npz, x=np.zeros((2, 3, 5, 5), np.float32))
    assert main([str(good), "-o", str(out), "-q", "--verify", "--verify-inputs", str(npz)]) == 3
    line = one_line(capsys.readouterr().err)
    assert "verify could not run" in line and "does not fit input shape" in line
    entry = summary(out)["models"][0]
    assert entry["status"] == "verify_failed" and "does not fit" in entry["verify"]["error"]


def test_verify_options_through_the_api(tmp_path: Path) -> None:
    model = bm.save(faint_sigmoid_model(), tmp_path / "faint.onnx")
    result = convert_many([model], tmp_path / "out", verify=True)
    assert result.all_ok and result[0].verify["outputs"][0]["passed"]
    result = convert_many([model], tmp_path / "out", verify=VerifyOptions(atol={None: 0.0}))
    assert [o.status for o in result] == ["verify_failed"]
    assert result.verify_failed == list(result) and result.failed == []


# ---- per-model --input-shape -----------------------------------------------------------------

def test_three_models_sharing_an_input_name_with_different_sizes(tmp_path: Path) -> None:
    models = tmp_path / "models"
    for name, size, seed in (("det_a", 8, 1), ("det_b", 12, 2), ("cls", 16, 3)):
        bm.save(dynamic_hw(size, seed), models / f"{name}.onnx")
    out = tmp_path / "out"
    done = run(str(models), "-o", str(out), "--input-shape", "det_a.onnx=x:1,3,8,8",
               "--input-shape", "det_b*=x:1,3,12,12", "--input-shape", "x:1,3,16,16")
    assert done.returncode == 0, done.stderr
    for name, size in (("det_a", 8), ("det_b", 12), ("cls", 16)):
        manifest = json.loads((out / name / "manifest.json").read_text())
        assert manifest["model"]["inputs"][0]["shape"] == [1, 3, size, size]
    options = summary(out)["options"]["shapes"]
    assert options == {"det_a.onnx": {"x": [1, 3, 8, 8]}, "det_b*": {"x": [1, 3, 12, 12]},
                       "x": [1, 3, 16, 16]}


def test_per_model_shapes_through_the_api(tmp_path: Path) -> None:
    paths = [bm.save(dynamic_hw(size, size), tmp_path / f"m{size}.onnx") for size in (8, 12)]
    shapes = {"m8.onnx": {"x": [1, 3, 8, 8]}, "m12": {"x": [1, 3, 12, 12]}}
    result = convert_many(paths, tmp_path / "out", jobs=1, shapes=shapes)
    assert result.all_ok, [o.error for o in result]
    # The command line's spelling works too.
    result = convert_many(paths, tmp_path / "out", jobs=1,
                          shapes={"m8.onnx=x": [1, 3, 8, 8], "m12*=x": [1, 3, 12, 12]})
    assert result.all_ok, [o.error for o in result]
    with pytest.raises(MrvlConvertError, match="no model matches"):
        convert_many(paths, tmp_path / "out2", shapes={"nothing*": {"x": [1, 3, 8, 8]}})
    with pytest.raises(MrvlConvertError, match="two different shapes"):
        convert_many(paths, tmp_path / "out2", shapes={"m8.onnx": {"x": [1, 3, 8, 8]},
                                                       "m8.onnx=x": [1, 3, 9, 9]})


def test_per_model_shape_errors(tmp_path: Path, capsys) -> None:
    paths = [bm.save(dynamic_hw(8, s), tmp_path / f"det_{s}.onnx") for s in (1, 2)]
    out = str(tmp_path / "out")
    cases: List[Tuple[List[str], str]] = [
        (["det_*=x:1,3,8,8", "det_1*=x:1,3,9,9"], "two different shapes"),
        (["cls*=x:1,3,8,8"], "no model matches"),
        (["=x:1,3,8,8"], "nothing before '='"),
        (["det_1.onnx=x:1,3,8,8", "det_1.onnx=x:1,3,9,9"], "two different shapes for models"),
    ]
    for specs, needle in cases:
        args = [a for spec in specs for a in ("--input-shape", spec)]
        assert main([*map(str, paths), "-o", out, *args]) == 2, specs
        line = one_line(capsys.readouterr().err)
        assert needle in line and "usage error" in line, line
    # A pattern's input name is checked against the models it matches: a model error (exit 1).
    assert main([*map(str, paths), "-o", out, "-q", "--input-shape", "det_*=y:1,3,8,8"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("'y', which is not a graph input" in e for e in err)


def test_parse_shapes_with_model_patterns() -> None:
    assert parse_shapes(["det*.onnx=images:1,3,416,416", "cls.onnx=input:0:1,3,48,192",
                         "x:1,3,8,8"]) == {"det*.onnx": {"images": [1, 3, 416, 416]},
                                           "cls.onnx": {"input:0": [1, 3, 48, 192]},
                                           "x": [1, 3, 8, 8]}
    with pytest.raises(UsageError, match="both as an input name and as a model pattern"):
        parse_shapes(["x:1,2", "x=y:1,2"])


# ---- summary.json across runs ----------------------------------------------------------------

def test_summary_is_merged_with_earlier_runs(tmp_path: Path) -> None:
    a = bm.save(bm.small_cnn(1), tmp_path / "a.onnx")
    b = bm.save(bm.small_cnn(2), tmp_path / "b.onnx")
    out = tmp_path / "out"
    assert main([str(a), "-o", str(out), "-q"]) == 0
    assert main([str(b), "-o", str(out), "-q", "--verify"]) == 0
    doc = summary(out)
    assert [(r["name"], r["verified"]) for r in doc["models"]] == [("a", None), ("b", True)]
    assert doc["last_run"] == ["b"] and doc["totals"]["models"] == 2
    assert doc["models"][1]["verify"]["outputs"][0]["tensor"] == "y"
    # Re-running a updates its row in place and keeps b's.
    assert main([str(a), "-o", str(out), "-q", "--verify"]) == 0
    doc = summary(out)
    assert [(r["name"], r["verified"]) for r in doc["models"]] == [("a", True), ("b", True)]
    # A row whose directory is gone is dropped.
    import shutil
    shutil.rmtree(out / "a")
    assert main([str(b), "-o", str(out), "-q"]) == 0
    assert [r["name"] for r in summary(out)["models"]] == ["b"]


# ---- errors with suggestions -----------------------------------------------------------------

def test_placement_of_an_unknown_node_names_the_closest(tmp_path: Path) -> None:
    result = convert(bm.small_cnn(), tmp_path / "cnn")
    assert result.placement("conv")["placement"] == "mrvl"
    with pytest.raises(NodeNotFoundError) as info:
        result.placement("Conv_3")
    text = str(info.value)
    assert "no node named 'Conv_3'" in text and "closest: 'conv'" in text
    assert isinstance(info.value, KeyError) and isinstance(info.value, MrvlConvertError)
    assert "NodeNotFoundError" in mrvl_convert.__all__   # catchable without a private import
    with pytest.raises(mrvl_convert.NodeNotFoundError, match="e.g. 'conv', 'fc'"):
        result.placement("zzzzzz")


def test_mrvl_verify_on_the_output_directory_names_the_artifact_dir(tmp_path: Path) -> None:
    good = bm.save(bm.small_cnn(), tmp_path / "cnn.onnx")
    out = tmp_path / "out"
    assert main([str(good), "-o", str(out), "-q"]) == 0
    done = subprocess.run([VERIFY, str(good), str(out)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert "manifest not found" in line and f"did you mean {out / 'cnn'}?" in line
    done = subprocess.run([VERIFY, str(good), str(out / "cnn"), "--atol", "0", "--rtol", "0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 3 and "FAIL" in done.stdout    # verify failed: as mrvl-convert


def test_bad_rule_file_is_a_usage_error(tmp_path: Path, capsys) -> None:
    good = bm.save(bm.small_cnn(), tmp_path / "cnn.onnx")
    rules = tmp_path / "bad.yaml"
    rules.write_text("composites: [unclosed")
    out = tmp_path / "out"
    assert main([str(good), "-o", str(out), "--rules", str(rules)]) == 2
    assert str(rules) in one_line(capsys.readouterr().err)
    assert not out.exists()


def test_dynamic_batch_hint_is_exact(tmp_path: Path) -> None:
    model = bm.save(bm.small_cnn(batch="N", size=8), tmp_path / "dyn.onnx")
    with pytest.raises(ShapeError) as info:
        convert(model, tmp_path / "out")
    assert "--input-shape x:1,3,8,8 (shapes={'x': [1, 3, 8, 8]})" in str(info.value)
    hw = bm.save(dynamic_hw(8, 0), tmp_path / "hw.onnx")
    with pytest.raises(ShapeError, match=r"--input-shape x:1,3,<h>,<w>, each <\.\.\.> replaced"):
        convert(hw, tmp_path / "out")
    done = run(str(model), "-o", str(tmp_path / "cli"))
    assert done.returncode == 1 and "--input-shape x:1,3,8,8" in one_line(done.stderr)


# ---- onnxruntime's log and the progress display ----------------------------------------------

def test_onnxruntime_warnings_only_with_verbose(tmp_path: Path) -> None:
    """onnxruntime warns about an initializer no node uses when the original model is loaded
    for the comparison: not on the terminal unless -v."""
    proto = bm.small_cnn()
    proto.graph.initializer.append(numpy_helper.from_array(np.ones(3, np.float32), "unused"))
    model = bm.save(proto, tmp_path / "extra.onnx")
    quiet = run(str(model), "-o", str(tmp_path / "q"), "--verify")
    assert quiet.returncode == 0 and "[W:onnxruntime" not in quiet.stderr + quiet.stdout
    assert quiet.stderr == ""
    loud = run(str(model), "-o", str(tmp_path / "v"), "--verify", "-v")
    assert loud.returncode == 0 and "[W:onnxruntime" in loud.stderr + loud.stdout


def test_progress_names_the_stage(tmp_path: Path) -> None:
    seen: List[Tuple[str, str]] = []
    model = bm.save(bm.small_cnn(), tmp_path / "cnn.onnx")
    convert_many([model], tmp_path / "out", verify=True,
                 on_stage=lambda name, stage: seen.append((name, stage)))
    assert seen == [("cnn", stage) for stage in
                    ("convert", "load", "match", "lower", "emit", "verify")]

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True
    stream = Tty()
    with _Progress(1, quiet=False, stream=stream) as progress:
        progress.stage("cnn", "verify")
        assert "cnn: verify..." in stream.getvalue() and "0/1" in stream.getvalue()


def test_progress_keeps_the_elapsed_time_moving() -> None:
    """A model that takes long still sees the bar redrawn (tqdm itself redraws on updates)."""
    import time

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True
    stream = Tty()
    with _Progress(1, quiet=False, stream=stream, tick_seconds=0.05) as progress:
        progress.stage("cnn", "convert")
        before = stream.getvalue().count("\r")
        time.sleep(0.5)
        assert stream.getvalue().count("\r") > before + 2
        assert progress._ticker is not None
    assert progress._ticker is None


def test_pool_runs_name_the_models_in_work(tmp_path: Path) -> None:
    """On an executor the models a worker has taken are named as they start (polled)."""
    import time
    from concurrent.futures import Executor, Future, ThreadPoolExecutor

    class SlowStart(Executor):
        """One worker thread; each job first waits longer than the poll interval."""
        def __init__(self) -> None:
            self.pool = ThreadPoolExecutor(max_workers=1)

        def submit(self, fn, *args, **kwargs) -> Future:
            def slow():
                time.sleep(0.7)
                return fn(*args, **kwargs)
            return self.pool.submit(slow)

    paths = [bm.save(bm.small_cnn(s), tmp_path / f"m{s}.onnx") for s in (1, 2, 3)]
    seen: List[Tuple[str, str]] = []
    executor = SlowStart()
    try:
        result = convert_many(paths, tmp_path / "out", executor=executor,
                              on_stage=lambda name, stage: seen.append((name, stage)))
    finally:
        executor.pool.shutdown()
    assert result.all_ok
    assert seen == [("m1", "convert"), ("m2", "convert"), ("m3", "convert")]


def test_a_tolerance_for_no_output_is_reported(tmp_path: Path, capsys) -> None:
    good = bm.save(bm.small_cnn(), tmp_path / "cnn.onnx")
    out = tmp_path / "out"
    assert main([str(good), "-o", str(out), "-q", "--verify", "--atol", "cnn:0"]) == 0
    line = one_line(capsys.readouterr().err)
    assert "warning" in line and "'cnn'" in line and "outputs: y" in line
    from mrvl_convert.cli import verify_main
    assert verify_main([str(good), str(out / "cnn"), "--rtol", "logits:0.1"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "'logits', which is not an output of the model (outputs: y)" in line
