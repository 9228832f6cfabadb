"""The built-in rule files are read once per process and stamp (mtime, size, inode): a
conversion no longer reads and hashes 14 files twice; an edited file is read again."""
from __future__ import annotations

import hashlib
from pathlib import Path

from mrvl_convert.options import ConvertOptions
from mrvl_convert.rules import loader
from mrvl_convert.rules.loader import builtin_digests, builtin_paths, load_rules


def _counting_reads(monkeypatch):
    seen = []
    real = loader._read_text

    def counting(path, label):
        seen.append(label)
        return real(path, label)

    monkeypatch.setattr(loader, "_read_text", counting)
    return seen


def test_a_second_load_reads_no_builtin_file(monkeypatch):
    first = load_rules()
    seen = _counting_reads(monkeypatch)
    assert load_rules() == first
    assert load_rules(layer_set="upstream-0.19")  # builtin.yaml, read for marvell already
    ConvertOptions().manifest_entry({})  # the manifest's rule digests
    assert seen == []


def test_the_manifest_digests_are_the_files_bytes():
    for path, digest in builtin_digests():
        assert digest == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [p for p, _ in builtin_digests()] == builtin_paths()
    entry = ConvertOptions().manifest_entry({})
    assert [s["sha256"] for s in entry["rules"]] == [d for _, d in builtin_digests()]


def test_an_edited_file_is_read_again(tmp_path: Path):
    path = tmp_path / "rules.yaml"
    path.write_text("format_version: 1\n", encoding="utf-8")
    text, digest = loader._builtin_file(str(path), loader._stamp(path))
    assert text == "format_version: 1\n"
    path.write_text("format_version: 1\ncomposites: []\n", encoding="utf-8")
    text, digest2 = loader._builtin_file(str(path), loader._stamp(path))
    assert text.endswith("composites: []\n")
    assert digest2 == hashlib.sha256(path.read_bytes()).hexdigest() != digest


def test_a_folder_listing_follows_its_files(tmp_path: Path):
    (tmp_path / "b.yaml").write_text("x", encoding="utf-8")
    assert loader._yaml_files(str(tmp_path), loader._stamp(tmp_path)) == (tmp_path / "b.yaml",)
    (tmp_path / "a.yaml").write_text("x", encoding="utf-8")
    (tmp_path / "c.txt").write_text("x", encoding="utf-8")
    assert loader._yaml_files(str(tmp_path), loader._stamp(tmp_path)) == (
        tmp_path / "a.yaml", tmp_path / "b.yaml")
    assert loader._yaml_files(str(tmp_path / "gone"), loader._stamp(tmp_path / "gone")) == ()
