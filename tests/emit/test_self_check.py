"""The converter checks what it writes against the schemas only under MRVL_CONVERT_SELF_CHECK
(the test suite sets it, ``tests/conftest.py``); without it the files are the same bytes, and
they pass the check made afterwards."""
from __future__ import annotations

import pytest

import mrvl_convert
from mrvl_convert.emit import publish
from mrvl_convert.emit.validate import SELF_CHECK_ENV, self_check, validate_tree
from support.models import small_cnn


def _files(out_dir):
    return {p.name: p.read_bytes() for p in sorted(out_dir.rglob("*")) if p.is_file()}


def test_the_suite_runs_with_the_self_check():
    assert self_check()


def test_without_the_self_check_nothing_is_checked_as_written_and_the_bytes_are_the_same(
        tmp_path, monkeypatch):
    model = small_cnn()
    checked = mrvl_convert.convert(model, tmp_path / "checked").out_dir
    monkeypatch.delenv(SELF_CHECK_ENV)
    assert not self_check()

    def refuse(*args, **kwargs):
        raise AssertionError("validated while writing")

    monkeypatch.setattr(publish, "validate", refuse)
    unchecked = mrvl_convert.convert(model, tmp_path / "unchecked").out_dir
    assert _files(unchecked) == _files(checked)
    assert validate_tree(unchecked) >= 3  # manifest, report, Nodes- and Constants-JSON


@pytest.mark.parametrize("value, on", [("", False), ("0", False), ("1", True), ("yes", True)])
def test_the_variable_turns_it_on(monkeypatch, value, on):
    monkeypatch.setenv(SELF_CHECK_ENV, value)
    assert self_check() is on
