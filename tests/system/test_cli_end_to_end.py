"""The mrvl-convert command: exit codes, one line per error, --list-rules, summary.json."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from mrvl_convert.cli.args import find_models
from mrvl_convert.cli.convert import main
from mrvl_convert.emit.validate import validate, validate_tree
from support import badmodels as bm

pytestmark = pytest.mark.system

CLI = str(Path(sys.executable).with_name("mrvl-convert"))
VERIFY = str(Path(sys.executable).with_name("mrvl-verify"))


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300)


@pytest.fixture()
def good(tmp_path: Path) -> Path:
    return bm.save(bm.small_cnn(), tmp_path / "models" / "cnn.onnx")


def test_exit_0_and_summary_validates(good: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run(str(good), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    validate(summary, "summary", label="summary.json")
    assert summary["totals"] == {"models": 1, "ok": 1, "failed": 0, "verify_failed": 0,
                                 "skipped": 0}
    entry = summary["models"][0]
    assert (entry["name"], entry["status"], entry["mrvl_nodes"], entry["cpu_nodes"]) == \
           ("cnn", "ok", 5, 0)
    assert validate_tree(out) >= 4   # every JSON file below OUT, summary.json included
    lines = done.stdout.splitlines()
    assert lines[0].startswith("ok ") and "cnn" in lines[0]          # not a tty: plain lines
    header = next(line for line in lines if line.startswith("model "))
    for column in ("status", "Mrvl nodes", "CPU nodes", "Mrvl subgraphs", "CPU subgraphs",
                   "seconds", "error"):
        assert column in header


def test_exit_1_one_line_per_error_no_traceback(good: Path, tmp_path: Path) -> None:
    bad = bm.bad_model_files(tmp_path / "bad")
    done = run(str(good), *map(str, bad), "-o", str(tmp_path / "out"), "-q")
    assert done.returncode == 1
    assert done.stdout == ""                                           # --quiet
    lines = done.stderr.strip().splitlines()
    assert len(lines) == len(bad) and "Traceback" not in done.stderr
    for path, line in zip(bad, lines):
        assert str(path) in line


@pytest.mark.parametrize("args,needle", [
    (["{empty}", "-o", "{out}"], "no ONNX model found"),
    (["{tmp}/absent.onnx", "-o", "{out}"], "no such file"),
    (["{tmp}/nothing*.onnx", "-o", "{out}"], "no ONNX model found"),
    (["{good}"], "-o OUT is required"),
    (["-o", "{out}"], "no MODEL given"),
    (["{good}", "-o", "{out}", "--input-shape", "x:1,a,3"], "x:1,a,3"),
    (["{good}", "-o", "{out}", "--input-shape", "x1,3"], "NAME:D0,D1"),
    (["{good}", "-o", "{out}", "--policy", "many"], "invalid choice"),
    (["{good}", "-o", "{out}", "--jobs", "0"], "at least 1"),
    (["{good}", "-o", "{out}", "--rules", "{tmp}/missing.yaml"], "missing.yaml"),
    (["{good}", "-o", "{out}", "--frobnicate"], "unrecognized arguments"),
])
def test_exit_2_usage_errors(good: Path, tmp_path: Path, capsys, args: List[str],
                             needle: str) -> None:
    (tmp_path / "empty").mkdir()
    values = {"good": str(good), "out": str(tmp_path / "out"), "tmp": str(tmp_path),
              "empty": str(tmp_path / "empty")}
    assert main([a.format(**values) for a in args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and "usage error" in err[0]
    assert not (tmp_path / "out").exists()


def test_help_and_version_return_0(capsys) -> None:
    assert main(["--help"]) == 0
    assert "--input-shape" in capsys.readouterr().out
    assert main(["--version"]) == 0
    assert "mrvl-convert 0." in capsys.readouterr().out


def test_exit_2_through_subprocess(tmp_path: Path) -> None:
    done = run(str(tmp_path / "nothing_here"), "-o", str(tmp_path / "out"))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_list_rules(tmp_path: Path) -> None:
    done = run("--list-rules")
    assert done.returncode == 0 and done.stderr == ""
    assert "mrvl.conv2d_nhwc2nhwc  ->  Conv2D" in done.stdout
    assert "mrvl.fc_ni2no" in done.stdout and "pattern:" in done.stdout


def test_list_rules_with_a_user_file(tmp_path: Path, capsys) -> None:
    rules = tmp_path / "mine.yaml"
    rules.write_text("format_version: 1\ncomposites:\n"
                     "  - name: my.fc\n    layer: FC\n    summary: my own FC\n"
                     "    pattern:\n      - {role: fc, op: [Gemm]}\n")
    assert main(["--list-rules", "--rules", str(rules)]) == 0
    out = capsys.readouterr().out
    assert f"my.fc  ->  FC   ({rules}" in out and "mrvl.fc_ni2no" in out


def test_list_rules_with_a_bad_file(tmp_path: Path, capsys) -> None:
    rules = tmp_path / "bad.yaml"
    rules.write_text("composites: [unclosed")
    assert main(["--list-rules", "--rules", str(rules)]) == 2          # a usage error
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(rules) in err[0]


def test_user_rule_file_is_used_and_recorded(good: Path, tmp_path: Path, capsys) -> None:
    rules = tmp_path / "mine.yaml"
    rules.write_text("format_version: 1\ncomposites:\n"
                     "  - name: mrvl.fc_ni2no\n    layer: FC\n"
                     "    pattern:\n      - {role: fc, op: [MatMul]}\n")   # Gemm no longer taken
    out = tmp_path / "out"
    assert main([str(good), "-o", str(out), "--rules", str(rules), "-q"]) == 0
    report = json.loads((out / "cnn" / "report.json").read_text())
    fc = next(n for n in report["nodes"] if n["name"] == "fc")
    assert fc["placement"] == "cpu"
    assert json.loads((out / "summary.json").read_text())["options"]["rules"] == [str(rules)]


def test_directories_and_quoted_globs(tmp_path: Path) -> None:
    for name in ("b", "a", "sub/c"):
        bm.save(bm.small_cnn(), tmp_path / "m" / f"{name}.onnx")
    (tmp_path / "m" / "notes.txt").write_text("not a model")
    assert [p.name for p in find_models([str(tmp_path / "m")])] == ["a.onnx", "b.onnx", "c.onnx"]
    assert [p.name for p in find_models([str(tmp_path / "m" / "*.onnx")])] == ["a.onnx", "b.onnx"]
    assert [p.name for p in find_models([str(tmp_path / "m" / "**" / "*.onnx")])] == \
           ["a.onnx", "b.onnx", "c.onnx"]
    both = find_models([str(tmp_path / "m" / "a.onnx"), str(tmp_path / "m")])
    assert [p.name for p in both] == ["a.onnx", "b.onnx", "c.onnx"]       # no duplicates


def test_rerun_into_same_output_skips_artifacts(tmp_path: Path) -> None:
    """An earlier run's CPU-stage .onnx files inside OUT are never taken as models."""
    bm.save(bm.small_cnn(), tmp_path / "m" / "a.onnx")
    (tmp_path / "m" / "out" / "a").mkdir(parents=True)
    bm.save(bm.small_cnn(), tmp_path / "m" / "out" / "a" / "a_cpu_0.onnx")
    found = find_models([str(tmp_path / "m")], exclude=tmp_path / "m" / "out")
    assert [p.name for p in found] == ["a.onnx"]


def _fragmented(path: Path, cuts: int) -> Path:
    """Conv, then ``cuts // 2`` times (Sin on CPU, Conv on Mrvl), then one more Sin (no layer set maps Sin)."""
    from support.models import Builder
    b = Builder()
    y = b.input("x", [1, 3, 8, 8])
    y = b.op("Relu", [b.conv(y, 3, 4, pads=[1, 1, 1, 1])], name="conv0")
    for k in range(cuts // 2):
        y = b.op("Sin", [y], name=f"sig{k}")
        y = b.op("Relu", [b.conv(y, 4, 4, pads=[1, 1, 1, 1])], name=f"conv{k + 1}")
    y = b.op("Sin", [y], name="last")
    return bm.save(b.model([y]), path)


def test_many_cuts_are_explained_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run(str(_fragmented(tmp_path / "frag.onnx", 8)), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert f"frag: 9 cuts: Sin x5; see {out / 'frag' / 'report.json'}" in done.stdout
    report = json.loads((out / "frag" / "report.json").read_text())
    assert report["summary"]["transitions"] == 9
    assert report["cut_by"] == [{"op_type": "Sin", "nodes": 5}]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["models"][0]["transitions"] == 9
    assert summary["models"][0]["mrvl_mac_share"] == 1.0   # Sin has no MACs


def test_few_cuts_print_no_cut_line(tmp_path: Path) -> None:
    done = run(str(_fragmented(tmp_path / "frag.onnx", 2)), "-o", str(tmp_path / "out"))
    assert done.returncode == 0 and "cuts:" not in done.stdout


def test_partition_control_flags(tmp_path: Path) -> None:
    model = _fragmented(tmp_path / "frag.onnx", 8)
    out = tmp_path / "out"
    done = run(str(model), "-o", str(out), "--max-subgraphs", "2", "--deny", "conv0")
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "frag" / "report.json").read_text())
    assert report["summary"]["mrvl_subgraphs"] == 2
    placement = {e["name"]: e for e in report["nodes"]}
    assert placement["conv0"]["reason"] == "denied by the user ('conv0')"
    assert any("beyond max_subgraphs" in e.get("reason", "") for e in report["nodes"])
    options = json.loads((out / "summary.json").read_text())["options"]
    assert (options["max_subgraphs"], options["deny"]) == (2, ["conv0"])
    bad = run(str(model), "-o", str(out), "--max-subgraphs", "-1")
    assert bad.returncode == 2 and "must be at least 0" in bad.stderr


def test_layer_set_flag_reaches_manifest_and_summary(good: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main([str(good), "-o", str(out), "--layer-set", "upstream-0.19", "-q"]) == 0
    manifest = json.loads((out / "cnn" / "manifest.json").read_text())
    assert manifest["options"]["layer_set"] == "upstream-0.19"
    summary = json.loads((out / "summary.json").read_text())
    validate(summary, "summary", label="summary.json")
    assert summary["options"]["layer_set"] == "upstream-0.19"
    bad = run(str(good), "-o", str(out), "--layer-set", "tvm-0.18")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_input_shape_not_matching_any_model_warns(tmp_path: Path, capsys) -> None:
    paths = [bm.save(bm.small_cnn(s), tmp_path / f"m{s}.onnx") for s in (1, 2)]
    out = tmp_path / "out"
    assert main([*map(str, paths), "-o", str(out), "--input-shape", "typo:1,3,8,8", "-q"]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and "typo" in err


def test_mrvl_verify_entry_point(good: Path, tmp_path: Path) -> None:
    pytest.importorskip("mrvl_convert.cli.verify",
                        reason="mrvl_convert.cli.verify not written yet (runtime helper)")
    out = tmp_path / "out"
    assert main([str(good), "-o", str(out), "-q"]) == 0
    done = subprocess.run([VERIFY, str(good), str(out / "cnn")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "PASS" in done.stdout
    missing = subprocess.run([VERIFY, str(good), str(tmp_path / "nowhere")], capture_output=True,
                             text=True, timeout=120)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
