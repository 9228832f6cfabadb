"""core/collection.py: the cyclic collector is off while a conversion runs (its full
collections were about half of an unrolled cell's conversion time), and as it was after."""
from __future__ import annotations

import gc
import threading

import pytest

import mrvl_convert
from mrvl_convert.core.collection import paused_collection
from support.recurrent import crnn


@pytest.fixture
def collector():
    """The collector's state restored whatever a test does to it."""
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_a_conversion_runs_without_the_collector_and_restores_it(tmp_path, collector) -> None:
    gc.enable()
    seen = []
    mrvl_convert.convert(crnn(steps=3), tmp_path / "out",
                         on_stage=lambda stage: seen.append((stage, gc.isenabled())))
    assert [stage for stage, _ in seen] == ["load", "match", "lower", "emit"]
    assert not any(enabled for _, enabled in seen), seen
    assert gc.isenabled()


def test_a_failing_conversion_restores_the_collector(tmp_path, collector) -> None:
    gc.enable()
    with pytest.raises(mrvl_convert.MrvlConvertError):
        mrvl_convert.convert(tmp_path / "missing.onnx", tmp_path / "out")
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off(collector) -> None:
    gc.disable()
    assert paused_collection(gc.isenabled)() is False
    assert not gc.isenabled()


def test_an_overlapping_pause_leaves_the_collector_on(collector) -> None:
    """Two threads' conversions overlapping: the second finds it off and leaves it; the first
    turns it back on; it ends on either way."""
    gc.enable()
    inside, release = threading.Event(), threading.Event()

    @paused_collection
    def first() -> None:
        inside.set()
        release.wait(10)

    @paused_collection
    def second() -> None:
        release.set()
        thread.join(10)

    thread = threading.Thread(target=first)
    thread.start()
    inside.wait(10)
    second()
    assert gc.isenabled()
