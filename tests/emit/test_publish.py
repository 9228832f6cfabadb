"""Files written into a directory that already exists (summary.json, quant_analysis.json) go
through a temp file renamed over the target: whole or not at all, with our error."""
from __future__ import annotations

import os

import pytest

from mrvl_convert.emit.publish import write_file_atomically
from mrvl_convert.errors import OutputDirError


def test_replaces_whole_and_leaves_no_temp(tmp_path):
    target = tmp_path / "doc.json"
    target.write_bytes(b"old")
    write_file_atomically(target, b"new contents")
    assert target.read_bytes() == b"new contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doc.json"]
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def test_a_directory_in_the_way_is_our_error(tmp_path):
    (tmp_path / "doc.json").mkdir()
    with pytest.raises(OutputDirError, match="doc.json: it is a directory"):
        write_file_atomically(tmp_path / "doc.json", b"x")


def test_a_missing_directory_is_our_error_and_nothing_is_made(tmp_path):
    with pytest.raises(OutputDirError, match="cannot write .*gone.*doc.json"):
        write_file_atomically(tmp_path / "gone" / "doc.json", b"x")
    assert list(tmp_path.iterdir()) == []


def _umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current
