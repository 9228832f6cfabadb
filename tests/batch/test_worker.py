"""A batch worker (``mrvl_convert.batch.worker``): Ctrl-C stops the model it converts and skips
the jobs it already holds; the state lives on its SIGINT handler, not in a module global."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mrvl_convert.batch import plan_jobs, worker
from mrvl_convert.batch.worker import INTERRUPTED, convert_one, init_worker, interrupted
from mrvl_convert.emit.publish import StagingDir

from support.models import save_conv_relu

BIN = Path(sys.executable).parent


@pytest.fixture
def own_sigint():
    """The test plays a pool worker: its SIGINT handler is put back afterwards."""
    previous = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_worker_converts_until_ctrl_c(tmp_path: Path, own_sigint) -> None:
    [job] = plan_jobs([save_conv_relu(tmp_path / "m.onnx")], tmp_path / "out")
    init_worker()
    assert not interrupted()
    outcome = convert_one(job)
    assert outcome.ok, outcome.error
    assert (tmp_path / "out" / "m" / "manifest.json").is_file()


def test_after_ctrl_c_a_worker_skips_the_jobs_it_holds(tmp_path: Path, own_sigint) -> None:
    [job] = plan_jobs([save_conv_relu(tmp_path / "m.onnx")], tmp_path / "out")
    init_worker()
    with pytest.raises(KeyboardInterrupt):  # what stops the model the worker converts
        signal.raise_signal(signal.SIGINT)
    assert interrupted()
    outcome = convert_one(job)
    assert (outcome.status, outcome.error) == ("skipped", INTERRUPTED)
    assert not (tmp_path / "out" / "m").exists()


def test_ctrl_c_is_not_remembered_outside_a_pool_worker(tmp_path: Path, own_sigint) -> None:
    """In the calling process (jobs=1) Ctrl-C is the caller's: no handler of ours, no state."""
    [job] = plan_jobs([save_conv_relu(tmp_path / "m.onnx")], tmp_path / "out")
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    assert not interrupted()
    assert convert_one(job).ok


def test_ctrl_c_on_a_pool_run_writes_no_model_and_exits_130(tmp_path: Path) -> None:
    """Ctrl-C reaches the whole process group: the parent cancels the queued models, each
    worker stops its model and skips the one it already holds (without that, it would convert
    and publish it while the parent waits for the pool to shut down)."""
    models = [save_conv_relu(tmp_path / f"m{k}.onnx") for k in range(4)]
    out = tmp_path / "out"
    env = dict(os.environ, _MRVL_CONVERT_TEST_WRITE_DELAY="3")  # every file write: 3 s
    proc = subprocess.Popen([str(BIN / "mrvl-convert"), *map(str, models), "-o", str(out),
                             "-j", "2", "-q"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not any(".tmp-" in p.name for p in (out.iterdir() if out.exists() else [])):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "interrupted; models not finished were not written" in err
    assert "Traceback" not in err
    left = sorted(p.name for p in out.iterdir())
    assert not [n for n in left if ".tmp-" in n]  # no staging directory left
    # A model that finished before the interrupt keeps its row (and only such a model).
    rows = (json.loads((out / "summary.json").read_text())["models"]
            if "summary.json" in left else [])
    assert {r["name"] for r in rows} == {n for n in left if n != "summary.json"}


def test_ctrl_c_turned_into_another_error_stops_the_model(tmp_path: Path, own_sigint,
                                                         monkeypatch) -> None:
    """Ctrl-C inside an import (onnxruntime's, imported lazily) comes out as ImportError: the
    model was interrupted, it did not fail (a "failed" row would be written for it)."""
    [job] = plan_jobs([save_conv_relu(tmp_path / "m.onnx")], tmp_path / "out")

    def interrupted_import(*args, **kwargs):
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            raise ImportError("initialization failed")  # as pybind11's module init does

    monkeypatch.setattr(worker, "convert_with", interrupted_import)
    init_worker()
    with pytest.raises(KeyboardInterrupt):
        convert_one(job)
    assert interrupted()


def test_ctrl_c_after_a_model_is_published_keeps_its_outcome(tmp_path: Path, own_sigint,
                                                             monkeypatch) -> None:
    """Its directory is in place: the model is finished, its outcome reaches the summary;
    the worker's next job is skipped."""
    first, second = plan_jobs([save_conv_relu(tmp_path / f"m{k}.onnx") for k in range(2)],
                              tmp_path / "out")
    swap = StagingDir._swap

    def swap_then_ctrl_c(self):
        swap(self)
        signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(StagingDir, "_swap", swap_then_ctrl_c)
    init_worker()
    try:
        outcome = convert_one(first)
    except KeyboardInterrupt:  # caught: it would end the whole test session
        pytest.fail("Ctrl-C after the swap lost the outcome of a model published")
    assert outcome.ok, outcome.error
    assert (tmp_path / "out" / "m0" / "manifest.json").is_file()
    assert interrupted()
    skipped = convert_one(second)
    assert (skipped.status, skipped.error) == ("skipped", INTERRUPTED)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["m0"]
