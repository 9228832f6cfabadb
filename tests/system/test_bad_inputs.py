"""Every bad or odd input gets the library's own error naming the file and the node or tensor, and
leaves no partial output: no OUT/<name>/ directory and no hidden temporary directory."""
from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import onnx
import pytest

from mrvl_convert import (InvalidModelError, ModelLoadError, MrvlConvertError, OutputDirError,
                          RuleFileError, ShapeError, UnsupportedModelError, convert)
from mrvl_convert.cli.convert import main as cli_main
from support import badmodels as bm

pytestmark = pytest.mark.system

CLI = str(Path(sys.executable).with_name("mrvl-convert"))


def snapshot(root: Path) -> Dict[str, bytes]:
    """Every file below root (hidden ones too), relative path -> content."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def assert_nothing_written(out: Path) -> None:
    """OUT holds no artifact directory and no leftover hidden staging directory."""
    if out.exists():
        assert sorted(p.name for p in out.iterdir()) == []


def expect_error(model, tmp_path: Path, error: type, *needles: str, **kwargs) -> MrvlConvertError:
    out = tmp_path / "out"
    with pytest.raises(error) as info:
        convert(model, out / "m", **kwargs)
    message = str(info.value)
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    assert "\n" not in message
    assert_nothing_written(out)
    return info.value


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=120)


# ---- not ONNX ---------------------------------------------------------------------------------

def test_random_bytes(tmp_path: Path) -> None:
    path = bm.random_bytes_file(tmp_path / "noise.onnx")
    expect_error(path, tmp_path, ModelLoadError, str(path), "not an ONNX model")


def test_text_file(tmp_path: Path) -> None:
    path = bm.text_file(tmp_path / "readme.onnx")
    expect_error(path, tmp_path, ModelLoadError, str(path), "not an ONNX model")


def test_truncated_protobuf(tmp_path: Path) -> None:
    path = bm.truncated_file(tmp_path / "cut.onnx")
    expect_error(path, tmp_path, ModelLoadError, str(path))


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.onnx"
    expect_error(path, tmp_path, ModelLoadError, str(path), "no such file")


def test_text_file_through_cli_one_line_no_traceback(tmp_path: Path) -> None:
    path = bm.text_file(tmp_path / "notes.onnx")
    done = cli(str(path), "-o", str(tmp_path / "out"), "-q")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "not an ONNX model" in lines[0]
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["summary.json"]


# ---- invalid graphs ---------------------------------------------------------------------------

def test_empty_graph(tmp_path: Path) -> None:
    path = bm.save(bm.empty_graph(), tmp_path / "empty.onnx")
    expect_error(path, tmp_path, InvalidModelError, str(path), "empty")


def test_checker_failure(tmp_path: Path) -> None:
    path = bm.save(bm.checker_failure(), tmp_path / "bad_conv.onnx")
    expect_error(path, tmp_path, InvalidModelError, str(path), "checker", "conv")


def test_cycle(tmp_path: Path) -> None:
    path = bm.save(bm.cycle(), tmp_path / "cycle.onnx")
    error = expect_error(path, tmp_path, InvalidModelError, str(path), "cycle", "'add_a'", "'b'")
    assert (error.node, error.tensor) == ("add_a", "b")


def test_missing_initializer(tmp_path: Path) -> None:
    path = bm.save(bm.missing_initializer(), tmp_path / "no_fc_w.onnx")
    error = expect_error(path, tmp_path, InvalidModelError, str(path), "'fc_w'", "'fc'")
    assert error.tensor == "fc_w"


def test_unknown_domain(tmp_path: Path) -> None:
    path = bm.save(bm.unknown_domain(), tmp_path / "custom.onnx")
    expect_error(path, tmp_path, UnsupportedModelError, str(path), "com.example", "'frob'")


def test_duplicate_tensor_names(tmp_path: Path) -> None:
    path = bm.save(bm.duplicate_tensor(), tmp_path / "dup.onnx")
    expect_error(path, tmp_path, InvalidModelError, str(path), "tensor 'r'", "relu_again")


@pytest.mark.parametrize("opset", [6, 99])
def test_opset_out_of_range(tmp_path: Path, opset: int) -> None:
    path = bm.save(bm.with_opset(opset), tmp_path / f"opset{opset}.onnx")
    expect_error(path, tmp_path, UnsupportedModelError, str(path), f"opset {opset}")


# ---- shapes -----------------------------------------------------------------------------------

def test_dynamic_dim_unfixed_then_fixed(tmp_path: Path) -> None:
    path = bm.save(bm.dynamic_batch(), tmp_path / "dyn.onnx")
    error = expect_error(path, tmp_path, ShapeError, str(path), "tensor 'x'", "--input-shape")
    assert error.tensor == "x"
    result = convert(path, tmp_path / "fixed", shapes={"x": [1, 3, 8, 8]})
    assert result.manifest["model"]["inputs"][0]["shape"] == [1, 3, 8, 8]


def test_shape_for_unknown_input(tmp_path: Path) -> None:
    path = bm.save(bm.small_cnn(), tmp_path / "cnn.onnx")
    expect_error(path, tmp_path, ShapeError, str(path), "'nope'", shapes={"nope": [1]})


@pytest.mark.parametrize("spec", ["x:1,a,3", "x1,3,8,8", ":1,3", "x:", "x:1,,3", "x:1,-3,8,8"])
def test_malformed_input_shape_cli(tmp_path: Path, capsys, spec: str) -> None:
    path = bm.save(bm.dynamic_batch(), tmp_path / "dyn.onnx")
    out = tmp_path / "out"
    assert cli_main([str(path), "-o", str(out), "--input-shape", spec]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and spec in err[0] and "usage error" in err[0]
    assert not out.exists()


def test_dynamic_dim_fixed_through_cli(tmp_path: Path, capsys) -> None:
    path = bm.save(bm.dynamic_batch(), tmp_path / "dyn.onnx")
    out = tmp_path / "out"
    assert cli_main([str(path), "-o", str(out), "--input-shape", "x:2,3,8,8", "-q"]) == 0
    assert (out / "dyn" / "manifest.json").is_file()


# ---- external data and size -------------------------------------------------------------------

def test_external_data_file_missing(tmp_path: Path) -> None:
    path = bm.save_external(bm.small_cnn(), tmp_path / "ext" / "ext.onnx")
    (tmp_path / "ext" / "ext.onnx.data").unlink()
    expect_error(path, tmp_path, ModelLoadError, str(path), "ext.onnx.data", "tensor 'w'")


def test_external_data_outside_model_dir(tmp_path: Path) -> None:
    path = bm.save_external(bm.small_cnn(), tmp_path / "ext" / "ext.onnx")
    model = onnx.load_model(str(path), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../elsewhere.data"
    onnx.save_model(model, str(path))
    expect_error(path, tmp_path, ModelLoadError, str(path), "outside")


def test_external_data_weights_convert(tmp_path: Path) -> None:
    model = bm.small_cnn(seed=5, channels=8, size=16)
    inline = convert(bm.save(model, tmp_path / "inline" / "cnn.onnx"), tmp_path / "a", name="cnn")
    path = bm.save_external(model, tmp_path / "ext" / "cnn.onnx")
    assert (tmp_path / "ext" / "cnn.onnx.data").stat().st_size > 4000
    external = convert(path, tmp_path / "b", name="cnn")
    same = [f.name for f in inline.files if f.name.endswith("-consts.json")]
    assert same, inline.files
    for name in same:  # the weights read from the side file are the same weights
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert external.summary == inline.summary


@pytest.mark.slow
def test_model_over_2gib_converts(tmp_path: Path) -> None:
    path = bm.write_huge_model(tmp_path / "huge" / "huge.onnx")
    data = tmp_path / "huge" / "huge.onnx.data"
    assert data.stat().st_size > 2 << 30
    start = time.perf_counter()
    result = convert(path, tmp_path / "out" / "huge")
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    print(f"\n>2 GiB model: {data.stat().st_size / 2 ** 30:.2f} GiB of weights converted in "
          f"{seconds:.1f} s, peak RSS {peak:.1f} GiB")
    assert result.summary["mrvl_nodes"] + result.summary["cpu_nodes"] >= 5
    written = sum(f.stat().st_size for f in (tmp_path / "out" / "huge").iterdir())
    assert written > 2 << 30   # every weight made it into the artifacts
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]


# ---- names ------------------------------------------------------------------------------------

def _all_files(root: Path) -> List[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_odd_node_and_tensor_names_stay_inside(tmp_path: Path) -> None:
    work = tmp_path / "work"
    path = bm.save(bm.odd_names(), work / "odd.onnx")
    before = set(_all_files(tmp_path))
    out = work / "deep" / "out"
    result = convert(path, out / "odd")
    created = set(_all_files(tmp_path)) - before
    assert created and all(out.resolve() in p.resolve().parents for p in created), created
    assert set(result.files) == {p for p in created}
    names = {p["name_in_model"] if "name_in_model" in p else p["name"] for p in result.placements}
    assert names == set(bm.ODD_NODE_NAMES)
    assert result.summary["mrvl_nodes"] + result.summary["cpu_nodes"] == 5


def test_odd_file_name_through_cli(tmp_path: Path, capsys) -> None:
    path = bm.save(bm.odd_names(), tmp_path / "in" / "my model ü..onnx")
    out = tmp_path / "out"
    assert cli_main([str(path), "-o", str(out), "-q"]) == 0
    (artifact,) = [p for p in out.iterdir() if p.is_dir()]
    assert artifact.name == "my_model" and (artifact / "manifest.json").is_file()
    outside = [p for p in _all_files(tmp_path) if out not in p.parents]
    assert outside == [path]


def test_model_name_with_separators(tmp_path: Path) -> None:
    model = bm.small_cnn()
    model.graph.name = "../../../etc/evil name"
    out = tmp_path / "out"
    result = convert(model, out / "x")
    assert result.model_name == "etc_evil_name"
    assert all(out / "x" in f.parents for f in result.files)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


# ---- output directory -------------------------------------------------------------------------

def test_output_under_a_regular_file(tmp_path: Path) -> None:
    path = bm.save(bm.small_cnn(), tmp_path / "cnn.onnx")
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(OutputDirError) as info:
        convert(path, blocker / "sub" / "cnn")
    assert str(path) in str(info.value) and str(blocker) in str(info.value)
    assert blocker.read_text() == "not a directory"


def test_output_under_a_regular_file_cli(tmp_path: Path, capsys) -> None:
    path = bm.save(bm.small_cnn(), tmp_path / "cnn.onnx")
    (tmp_path / "file").write_text("x")
    assert cli_main([str(path), "-o", str(tmp_path / "file" / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a file" in err[0]


def test_existing_foreign_directory_is_not_clobbered(tmp_path: Path) -> None:
    path = bm.save(bm.small_cnn(), tmp_path / "cnn.onnx")
    target = tmp_path / "out" / "cnn"
    target.mkdir(parents=True)
    (target / "precious.txt").write_text("keep me")
    before = snapshot(tmp_path / "out")
    with pytest.raises(OutputDirError) as info:
        convert(path, target)
    assert "not an mrvl_convert artifact directory" in str(info.value)
    assert str(path) in str(info.value)
    assert snapshot(tmp_path / "out") == before


def test_failure_while_writing_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    """A failure after staging started (here: the report) removes the staging directory."""
    def broken_report(*args, **kwargs):
        raise UnsupportedModelError("simulated failure while writing")
    monkeypatch.setattr("mrvl_convert.emit.documents.report", broken_report)
    path = bm.save(bm.small_cnn(), tmp_path / "cnn.onnx")
    expect_error(path, tmp_path, UnsupportedModelError, "simulated failure")


def test_rerun_replaces_own_artifact_directory(tmp_path: Path) -> None:
    path = bm.save(bm.small_cnn(), tmp_path / "cnn.onnx")
    first = snapshot(convert(path, tmp_path / "out" / "cnn").out_dir)
    second = snapshot(convert(path, tmp_path / "out" / "cnn").out_dir)
    assert first == second
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["cnn"]


# ---- rule files -------------------------------------------------------------------------------

BAD_RULES = {
    "bad_yaml": "composites: [ {name: x, layer: FC\n  pattern: - broken",
    "schema_violation": "format_version: 1\ncomposites:\n  - name: my.fc\n    layer: FC\n",
}


@pytest.mark.parametrize("kind", sorted(BAD_RULES))
def test_invalid_rule_file(tmp_path: Path, kind: str) -> None:
    rules = tmp_path / f"{kind}.yaml"
    rules.write_text(BAD_RULES[kind])
    path = bm.save(bm.small_cnn(), tmp_path / "cnn.onnx")
    expect_error(path, tmp_path, RuleFileError, str(rules), rules=[rules])


def test_invalid_rule_file_cli(tmp_path: Path, capsys) -> None:
    rules = tmp_path / "bad.yaml"
    rules.write_text(BAD_RULES["schema_violation"])
    path = bm.save(bm.small_cnn(), tmp_path / "cnn.onnx")
    out = tmp_path / "out"
    assert cli_main([str(path), "-o", str(out), "--rules", str(rules)]) == 2  # a bad rule file is a usage error
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(rules) in err[0] and "pattern" in err[0]
    assert_nothing_written(out)
