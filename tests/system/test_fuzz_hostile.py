"""Hostile documents, generated: any value anywhere in a real artifact's JSON files, or any spot of
the built-in rule file, replaced by something an attacker or a broken tool would write (paths out
of the directory, huge or odd numbers, deep nesting, YAML aliases, other dtypes).

Whatever the change, every reader the library has for such a document (``HybridSession``,
``estimate_artifact``, ``load_rule_file``) either works or raises the library's own error; it
never raises anything else, never opens a file outside the directory it was given (an audit hook
records every open), and never grows the process' peak memory by more than
``hostile.RSS_LIMIT_MB``. The thorough profile runs many more examples
(``pytest --hypothesis-profile thorough tests/system/test_fuzz_hostile.py``).
"""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from mrvl_convert import HybridSession, MrvlConvertError, convert
from mrvl_convert.estimate import estimate_artifact
from mrvl_convert.rules.loader import builtin_path, load_rule_file
from support import hostile
from support.badmodels import cnn_with_cpu_tail
from support.strategies.hostile import (HOSTILE_JSON, HOSTILE_YAML, PLACEHOLDER, locations,
                                        plant_placeholder)

pytestmark = pytest.mark.system

DOCUMENTS = ("manifest.json", "cnn_mrvl_0-nodes.json", "cnn_mrvl_0-consts.json")


@pytest.fixture(scope="module")
def artifact() -> Iterator[Path]:
    tmp = Path(tempfile.mkdtemp(prefix="hostile_art_"))
    convert(cnn_with_cpu_tail(), tmp / "cnn", name="cnn")
    assert sorted(p.name for p in (tmp / "cnn").glob("*.json")) == sorted(
        list(DOCUMENTS) + ["report.json"])
    yield tmp / "cnn"
    shutil.rmtree(tmp, ignore_errors=True)


def _drop_hashes(art: Path) -> None:
    """The manifest rewritten too, as an attacker would: its hashes would refuse a changed
    stage file before the reader under test sees it."""
    manifest = json.loads((art / "manifest.json").read_text())
    for stage in manifest["stages"]:
        del stage["sha256"]
    (art / "manifest.json").write_text(json.dumps(manifest))


def _feed() -> dict:
    return {"x": np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)}


def _read_everything(art: Path) -> None:
    """Each reader separately: one refusing must not hide another misbehaving."""
    for reader in (lambda: HybridSession(art).run(None, _feed()), lambda: estimate_artifact(art)):
        try:
            reader()
        except MrvlConvertError as exc:
            note(f"refused: {exc}")


@given(data=st.data())
def test_hostile_value_anywhere_in_an_artifact(artifact: Path, data) -> None:
    name = data.draw(st.sampled_from(DOCUMENTS), label="document")
    doc = json.loads((artifact / name).read_text())
    path = data.draw(st.sampled_from(locations(doc)), label="where")
    raw = data.draw(st.sampled_from(HOSTILE_JSON), label="value")
    with tempfile.TemporaryDirectory() as tmp:
        outside = hostile.make_outside(Path(tmp))
        art = Path(tmp) / "art"
        shutil.copytree(artifact, art)
        (art / "link.json").symlink_to(outside / "canary.json")
        if name != "manifest.json":
            _drop_hashes(art)
        plant_placeholder(doc, path)
        text = json.dumps(doc).replace(json.dumps(PLACEHOLDER), raw.replace("{outside}",
                                                                             str(outside)))
        (art / name).write_text(text)
        before = hostile.peak_rss_mb()
        with hostile.opened_files() as opened:
            _read_everything(art)
        hostile.assert_not_opened(opened, outside)
        assert hostile.peak_rss_mb() - before < hostile.RSS_LIMIT_MB


@given(data=st.data())
def test_hostile_text_anywhere_in_a_rule_file(data) -> None:
    lines = Path(builtin_path()).read_text(encoding="utf-8").splitlines(keepends=True)
    at = data.draw(st.integers(0, len(lines)), label="line")
    insert = data.draw(st.sampled_from(HOSTILE_YAML), label="text")
    indent = data.draw(st.sampled_from(["", "  ", "    "]), label="indent")
    with tempfile.TemporaryDirectory() as tmp:
        outside = hostile.make_outside(Path(tmp))
        path = Path(tmp) / "rules" / "mine.yaml"
        path.parent.mkdir()
        text = "".join(lines[:at]) + "".join(indent + line for line in
                                             insert.splitlines(keepends=True)) + "".join(lines[at:])
        path.write_text(text, encoding="utf-8")
        before = hostile.peak_rss_mb()
        with hostile.opened_files() as opened:
            try:
                load_rule_file(path)
            except MrvlConvertError as exc:
                note(f"refused: {exc}")
                assert str(path) in str(exc)
        hostile.assert_not_opened(opened, outside)
        assert hostile.peak_rss_mb() - before < hostile.RSS_LIMIT_MB


def test_readers_accept_the_untouched_artifact(artifact: Path) -> None:
    """The property's baseline: with nothing changed, both readers work."""
    assert HybridSession(artifact).run(None, _feed())[0].shape == (1, 10)
    assert estimate_artifact(artifact)["stages"][0]["kind"] == "mrvl"


def test_estimate_refuses_a_stage_file_outside_the_artifact(artifact: Path, tmp_path) -> None:
    outside = hostile.make_outside(tmp_path)
    art = tmp_path / "art"
    shutil.copytree(artifact, art)
    manifest = json.loads((art / "manifest.json").read_text())
    manifest["stages"][0]["nodes_json"] = "link.json"   # the schema allows the name
    (art / "link.json").symlink_to(outside / "canary.json")
    (art / "manifest.json").write_text(json.dumps(manifest))
    with hostile.opened_files() as opened, pytest.raises(MrvlConvertError, match="symlink"):
        estimate_artifact(art)
    hostile.assert_not_opened(opened, outside)


# Found by the thorough profile (fixed): a list where a constant's dtype goes raised TypeError
# in the simulator; an int8 input node feeding a float32 layer compiled and ran.
@pytest.mark.parametrize("document,path,raw", [
    ("cnn_mrvl_0-consts.json", None, "[4294967296, 4294967296]"),
    ("cnn_mrvl_0-nodes.json", ("nodes", 0, "attrs", "dtype"), '["int8"]'),
])
def test_found_by_the_thorough_profile(artifact: Path, tmp_path: Path, document, path, raw) -> None:
    art = tmp_path / "art"
    shutil.copytree(artifact, art)
    _drop_hashes(art)
    doc = json.loads((art / document).read_text())
    plant_placeholder(doc, path or (next(iter(doc)), "dtype"))
    (art / document).write_text(json.dumps(doc).replace(json.dumps(PLACEHOLDER), raw))
    with pytest.raises(MrvlConvertError, match="dtype"):
        HybridSession(art).run(None, _feed())
