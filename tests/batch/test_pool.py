"""convert_many and the CLI over many models: good ones convert, bad ones are reported, the batch
survives internal errors, --fail-fast stops early, and the files do not depend on jobs/executor."""
from __future__ import annotations

import json
import subprocess
import sys
import concurrent.futures as cf
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List

import numpy as np
import onnx
import pytest

from mrvl_convert import MrvlConvertError, convert_many
from mrvl_convert.batch import BatchResult, Outcome, unique_names
from mrvl_convert.cli.convert import main as cli_main
from mrvl_convert.emit.validate import validate
from support import badmodels as bm

CLI = str(Path(sys.executable).with_name("mrvl-convert"))
GOOD = ("alpha", "beta", "gamma")
BAD_REASONS = {"garbage": "not an ONNX model", "cyclic": "cycle", "dynamic": "dynamic dim"}


@pytest.fixture(scope="module")
def mixed_dir(tmp_path_factory) -> Path:
    """models/{alpha,beta,gamma}.onnx (good, in two folders) + bad/{garbage,cyclic,dynamic}.onnx."""
    root = tmp_path_factory.mktemp("mixed") / "models"
    for seed, name in enumerate(GOOD):
        folder = root if seed < 2 else root / "more"
        bm.save(bm.small_cnn(seed, channels=4 + seed), folder / f"{name}.onnx")
    bm.bad_model_files(root / "bad")
    return root


def tree(root: Path) -> Dict[str, bytes]:
    """Every artifact file below root (summary.json aside: it holds timings)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "summary.json"}


def untimed(summary: dict) -> dict:
    """summary.json without its timing fields, the only ones allowed to differ between runs."""
    copy = json.loads(json.dumps(summary))
    copy.pop("seconds")
    for entry in copy["models"]:
        entry.pop("seconds")
    return copy


def check_mixed(out: Path, result: List[Outcome]) -> None:
    by_name = {o.name: o for o in result}
    assert set(by_name) == set(GOOD) | set(BAD_REASONS)
    for name in GOOD:
        assert by_name[name].status == "ok", by_name[name].error
        assert (out / name / "manifest.json").is_file()
        assert by_name[name].counts["mrvl_nodes"] == 5
    for name, reason in BAD_REASONS.items():
        outcome = by_name[name]
        assert outcome.status == "failed" and reason in outcome.error
        assert outcome.model in outcome.error and not outcome.internal
        assert not (out / name).exists()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_mixed_directory_through_cli(mixed_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert cli_main([str(mixed_dir), "-o", str(out), "--jobs", "2"]) == 1
    captured = capsys.readouterr()
    summary = json.loads((out / "summary.json").read_text())
    validate(summary, "summary", label="summary.json")
    assert summary["totals"] == {"models": 6, "ok": 3, "failed": 3, "verify_failed": 0,
                                 "skipped": 0}
    entries = {e["name"]: e for e in summary["models"]}
    for name, reason in BAD_REASONS.items():
        assert reason in entries[name]["error"]
    errors = captured.err.strip().splitlines()
    assert len(errors) == 3 and "Traceback" not in captured.err
    for name in BAD_REASONS:
        assert sum(f"{name}.onnx" in line for line in errors) == 1
    assert sum(line.startswith(("ok ", "failed ")) for line in captured.out.splitlines()) == 6
    check_mixed(out, [Outcome(e["model"], e["name"], e["status"], str(out / e["name"]),
                              {"mrvl_nodes": e["mrvl_nodes"]}, 0.0, e["error"], e["error_type"])
                      for e in summary["models"]])


def test_mixed_directory_through_subprocess(mixed_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run([CLI, str(mixed_dir / "*.onnx"), str(mixed_dir / "bad"), "-o", str(out),
                           "-j", "1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert len(done.stderr.strip().splitlines()) == 3 and "Traceback" not in done.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == ["alpha", "beta", "summary.json"]   # the quoted glob is not recursive


def test_convert_many_api(mixed_dir: Path, tmp_path: Path) -> None:
    seen: List[str] = []
    models = sorted(mixed_dir.rglob("*.onnx"))
    result = convert_many(models, tmp_path / "out", jobs=1, progress=lambda o: seen.append(o.name))
    assert isinstance(result, BatchResult) and len(result) == 6
    assert [o.model for o in result] == [str(m) for m in models]   # input order
    assert sorted(seen) == sorted(o.name for o in result)
    check_mixed(tmp_path / "out", result)
    assert not result.all_ok and len(result.ok) == 3 and len(result.failed) == 3


def test_jobs_do_not_change_files(mixed_dir: Path, tmp_path: Path) -> None:
    models = sorted(mixed_dir.rglob("*.onnx"))
    one = convert_many(models, tmp_path / "one", jobs=1)
    two = convert_many(models, tmp_path / "two", jobs=2)
    assert [(o.name, o.status, o.counts, o.error) for o in one] == \
           [(o.name, o.status, o.counts, o.error) for o in two]
    files = tree(tmp_path / "one")
    assert len(files) >= 12 and files == tree(tmp_path / "two")
    summaries = [json.loads((tmp_path / d / "summary.json").read_text()) for d in ("one", "two")]
    assert untimed(summaries[0]) == untimed(summaries[1])


def test_fail_fast_inline(mixed_dir: Path, tmp_path: Path, capsys) -> None:
    models = [mixed_dir / "bad" / "garbage.onnx", mixed_dir / "alpha.onnx", mixed_dir / "beta.onnx"]
    out = tmp_path / "out"
    code = cli_main([*map(str, models), "-o", str(out), "--fail-fast", "-j", "1", "-q"])
    assert code == 1
    summary = json.loads((out / "summary.json").read_text())
    assert [e["status"] for e in summary["models"]] == ["failed", "skipped", "skipped"]
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_fail_fast_on_an_executor(mixed_dir: Path, tmp_path: Path) -> None:
    good = [mixed_dir / f"{n}.onnx" for n in ("alpha", "beta")]
    models = [mixed_dir / "bad" / "garbage.onnx"] + good * 4   # 9 models, names deduplicated
    with ThreadPoolExecutor(max_workers=1) as pool:
        result = convert_many(models, tmp_path / "out", executor=pool, fail_fast=True)
    assert result[0].status == "failed"
    assert len(result.skipped) >= len(models) - 2   # at most one started before the failure
    assert all(not (tmp_path / "out" / o.name).exists() for o in result.skipped)


def test_without_fail_fast_everything_runs(mixed_dir: Path, tmp_path: Path) -> None:
    models = [mixed_dir / "bad" / "garbage.onnx", mixed_dir / "alpha.onnx"]
    with ThreadPoolExecutor(max_workers=1) as pool:
        result = convert_many(models, tmp_path / "out", executor=pool)
    assert [o.status for o in result] == ["failed", "ok"]


def test_internal_error_fails_one_model_loudly(mixed_dir: Path, tmp_path: Path, monkeypatch,
                                              capsys) -> None:
    import mrvl_convert.frontend.canonicalize as canonicalize_module
    real = canonicalize_module.canonicalize

    def buggy(loaded, *args, **kwargs):
        if loaded.name == "beta":
            raise KeyError("simulated bug")
        return real(loaded, *args, **kwargs)
    monkeypatch.setattr(sys.modules["mrvl_convert.convert"], "canonicalize", buggy)
    out = tmp_path / "out"
    models = [mixed_dir / "alpha.onnx", mixed_dir / "beta.onnx"]
    assert cli_main([*map(str, models), "-o", str(out), "-j", "1", "-q"]) == 1
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert "internal error KeyError" in first and "beta.onnx" in first
    assert "Traceback" in err and "simulated bug" in err   # a bug is never swallowed silently
    summary = json.loads((out / "summary.json").read_text())
    beta = summary["models"][1]
    assert beta["internal_error"] and "simulated bug" in beta["traceback"]
    assert summary["models"][0]["status"] == "ok" and (out / "alpha" / "manifest.json").is_file()


def test_same_stem_gets_distinct_names(tmp_path: Path) -> None:
    paths = [bm.save(bm.small_cnn(s), tmp_path / d / "model.onnx") for s, d in enumerate("ab")]
    paths.append(bm.save(bm.small_cnn(9), tmp_path / "c" / "Model.onnx"))
    assert unique_names(paths) == ["model", "model_2", "Model_3"]
    result = convert_many(paths, tmp_path / "out", jobs=1)
    assert [o.name for o in result] == ["model", "model_2", "Model_3"] and result.all_ok
    assert unique_names([Path("summary.json.onnx")]) == ["summary.json_2"]


def test_input_shape_applies_only_where_the_input_exists(tmp_path: Path) -> None:
    x = bm.save(bm.dynamic_batch("x"), tmp_path / "x_model.onnx")
    data = bm.save(bm.dynamic_batch("data"), tmp_path / "data_model.onnx")
    shapes = {"x": [2, 3, 8, 8], "data": [1, 3, 8, 8]}
    result = convert_many([x, data], tmp_path / "out", jobs=1, shapes=shapes)
    assert result.all_ok, [o.error for o in result]
    assert [o.ignored_shapes for o in result] == [("data",), ("x",)]
    manifest = json.loads((tmp_path / "out" / "x_model" / "manifest.json").read_text())
    assert manifest["model"]["inputs"][0]["shape"] == [2, 3, 8, 8]


def test_output_dir_that_cannot_be_made(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(MrvlConvertError, match="is a file"):
        convert_many([bm.save(bm.small_cnn(), tmp_path / "m.onnx")], tmp_path / "file" / "out")


def test_verify_with_the_real_compare(tmp_path: Path, capsys) -> None:
    model = bm.save(bm.small_cnn(), tmp_path / "cnn.onnx")
    out = tmp_path / "out"
    assert cli_main([str(model), "-o", str(out), "--verify"]) == 0, capsys.readouterr().err
    assert "verify cnn: PASS over 8 samples: 8 random" in capsys.readouterr().out
    assert json.loads((out / "summary.json").read_text())["models"][0]["verified"] is True


def test_verify_fails_when_fp16_overflows(tmp_path: Path, capsys) -> None:
    """Weights that push activations past 65504 pass conversion but fail the fp16 comparison."""
    proto = bm.small_cnn()
    for init in proto.graph.initializer:
        if len(init.dims) == 4:  # conv weights, scaled far out of float16 range
            array = onnx.numpy_helper.to_array(init) * np.float32(1e5)
            init.CopyFrom(onnx.numpy_helper.from_array(array, init.name))
    model = bm.save(proto, tmp_path / "hot.onnx")
    out = tmp_path / "out"
    assert cli_main([str(model), "-o", str(out), "--verify", "-q"]) == 3   # converted, not verified
    entry = json.loads((out / "summary.json").read_text())["models"][0]
    assert entry["status"] == "verify_failed" and entry["error_type"] == "VerifyError"
    assert "fp16 overflows in the model itself" in entry["error"]  # the first of its causes
    assert entry["verified"] is False and entry["out_dir"] == "hot"   # kept for inspection
    assert (out / "hot" / "manifest.json").is_file()
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_dask_cluster_executor(mixed_dir: Path, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed", reason="dask[distributed] is a test extra")
    models = sorted(mixed_dir.rglob("*.onnx"))
    local = convert_many(models, tmp_path / "local", jobs=1)
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        result = convert_many(models, tmp_path / "dask", executor=client.get_executor())
    assert [(o.name, o.status, o.error) for o in result] == \
           [(o.name, o.status, o.error) for o in local]
    assert tree(tmp_path / "dask") == tree(tmp_path / "local")


class DeadWorkerExecutor(cf.Executor):
    """Every job's future fails as if its worker process had died."""

    def submit(self, fn, *args, **kwargs) -> cf.Future:
        future: cf.Future = cf.Future()
        future.set_exception(cf.process.BrokenProcessPool("a worker process died"))
        return future


def test_dead_worker_is_a_failure_not_a_crash(tmp_path: Path) -> None:
    models = [bm.save(bm.small_cnn(s), tmp_path / f"m{s}.onnx") for s in (1, 2)]
    result = convert_many(models, tmp_path / "out", executor=DeadWorkerExecutor())
    assert [o.status for o in result] == ["failed", "failed"]
    for outcome, model in zip(result, models):
        assert outcome.error_type == "BrokenProcessPool" and outcome.internal
        assert str(model) in outcome.error and "worker process died" in outcome.error
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["totals"]["failed"] == 2
