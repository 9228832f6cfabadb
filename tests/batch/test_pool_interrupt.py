"""Ctrl-C during a batch (``batch.pool``): the models finished so far have their summary rows and
their "ok" lines, the others neither (and no artifact directory)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.models import save_conv_relu

BIN = Path(sys.executable).parent


def _artifacts(out: Path) -> set:
    return {p.name for p in out.iterdir()
            if not p.name.startswith(".") and (p / "manifest.json").is_file()}


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_ctrl_c_keeps_the_rows_and_lines_of_finished_models(tmp_path: Path, jobs: str) -> None:
    models = [save_conv_relu(tmp_path / f"m{k}.onnx") for k in range(5)]
    out = tmp_path / "out"
    env = dict(os.environ, _MRVL_CONVERT_TEST_WRITE_DELAY="0.5")
    proc = subprocess.Popen([str(BIN / "mrvl-convert"), *map(str, models), "-o", str(out),
                             "-j", jobs], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not (out.exists() and _artifacts(out)):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C
        stdout, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    written = _artifacts(out)
    assert written and len(written) < len(models), (written, stdout)
    rows = json.loads((out / "summary.json").read_text(encoding="utf-8"))["models"]
    assert {r["name"] for r in rows} == written
    assert all(r["status"] == "ok" for r in rows)
    ok_lines = {line.split()[1] for line in stdout.splitlines() if line.startswith("ok ")}
    assert ok_lines == written
    assert not [p for p in out.iterdir() if ".tmp-" in p.name]


def test_ctrl_c_just_after_a_publish_keeps_that_models_row_in_process(tmp_path: Path,
                                                                      monkeypatch) -> None:
    """jobs=1 converts in this process: a Ctrl-C that lands right after the first model's
    directory took its place still gives that model its row (it was held until recorded),
    and the next model is not started."""
    from mrvl_convert.batch import pool
    from mrvl_convert.emit import publish

    models = [save_conv_relu(tmp_path / f"m{k}.onnx") for k in range(3)]
    swap = publish.StagingDir._swap

    def swap_then_ctrl_c(self) -> None:
        swap(self)
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(publish.StagingDir, "_swap", swap_then_ctrl_c)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        pool.convert_many(models, out, jobs=1)
    assert _artifacts(out) == {"m0"}
    rows = json.loads((out / "summary.json").read_text(encoding="utf-8"))["models"]
    assert [(r["name"], r["status"]) for r in rows] == [("m0", "ok")]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
