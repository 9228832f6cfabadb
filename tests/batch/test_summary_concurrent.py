"""Several ``mrvl-convert`` runs writing into one OUT at once (``batch.summary`` and
``emit.publish`` under OUT's lock): every finished model keeps its summary row and every artifact
directory is whole, also when two runs publish the same model name."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List


from mrvl_convert.core.file_hashes import check_stage_files, recorded_hashes

from support.models import save_conv_relu

BIN = Path(sys.executable).parent


def _run_all(commands: List[List[str]]) -> List[subprocess.CompletedProcess]:
    env = dict(os.environ, _MRVL_CONVERT_TEST_WRITE_DELAY="0.2")  # widen the overlap
    procs = [subprocess.Popen(c, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for c in commands]
    done = []
    for proc, command in zip(procs, commands):
        out, err = proc.communicate(timeout=600)
        done.append(subprocess.CompletedProcess(command, proc.returncode, out, err))
    return done


def _assert_whole(artifact: Path) -> None:
    manifest = json.loads((artifact / "manifest.json").read_text(encoding="utf-8"))
    recorded = recorded_hashes(manifest, str(artifact / "manifest.json"))
    assert recorded, f"{artifact}: no hashes recorded"
    for name in recorded:
        assert (artifact / name).is_file(), f"{artifact}: {name} missing"
    check_stage_files(artifact, manifest, str(artifact / "manifest.json"))  # raises if mixed


def test_concurrent_runs_into_one_out_keep_every_row_and_whole_dirs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    models = [save_conv_relu(tmp_path / f"m{k}.onnx") for k in range(3)]
    # the same name from two runs, with different weights: a mixed directory would not hash
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    common = [save_conv_relu(tmp_path / "a" / "common.onnx", 4),
              save_conv_relu(tmp_path / "b" / "common.onnx", 8)]
    commands = [[str(BIN / "mrvl-convert"), str(m), "-o", str(out), "-q"]
                for m in models + common]
    results = _run_all(commands)
    for r in results:
        assert r.returncode == 0, r.stderr
        assert "Traceback" not in r.stderr
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    names = sorted(row["name"] for row in summary["models"])
    assert names == ["common", "m0", "m1", "m2"]
    for name in names:
        _assert_whole(out / name)
    leftovers = [p.name for p in out.iterdir() if p.name.startswith(".") and ".tmp-" in p.name]
    assert leftovers == []
