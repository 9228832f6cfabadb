"""The hostile-input fuzz profile's classes for names, concurrent publishers and page text.

- names: any graph name or ``name=`` text becomes artifact files that stay inside OUT, with
  bounded names that start with neither ``-`` nor ``.``, and the text itself in the manifest;
- concurrent publishers: conversions publishing one name at once leave one whole artifact (every
  file hashing as the manifest says, from one run), and no staging directory;
- page text: whatever the node, op and tensor names, the ``--draw`` page holds its own three
  script elements and its graph data parses back to those names.

``pytest --hypothesis-profile thorough tests/system/test_fuzz_hostile_names.py`` runs more.
"""
from __future__ import annotations

import functools
import json
import re
import tempfile
import threading
from pathlib import Path
from typing import List

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.core.file_hashes import check_stage_files, recorded_hashes
from mrvl_convert.errors import InvalidModelError, MrvlConvertError
from mrvl_convert.frontend.names import MAX_NAME, safe_name

from support.html_scripts import Scripts

pytestmark = pytest.mark.system

# A conversion per example: a sixth of the profile's examples keeps the quick run short.
_SLOW = settings(max_examples=max(4, settings.default.max_examples // 6))
# Text as an attacker writes it: separators, dots and dashes, markup, line separators, any
# character protobuf can carry (no lone surrogates: a model's strings are UTF-8).
HOSTILE = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=0, max_size=300),
    st.lists(st.sampled_from(["..", "/", "\\", "-", ".", "</script>", "<!--", "&", "\u2028",
                              "\x00", " ", "é", "a" * 100, "NUL", "CON"]),
             min_size=1, max_size=12).map("".join))


def _cnn(graph_name: str = "g", seed: int = 0, node_names: List[str] = ()) -> onnx.ModelProto:
    names = list(node_names) + [f"n{k}" for k in range(3)]
    w = numpy_helper.from_array(
        np.random.default_rng(seed).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name=names[0], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Sin", ["c"], ["s"], name=names[1]),
             helper.make_node("Relu", ["s"], ["y"], name=names[2])]
    graph = helper.make_graph(
        nodes, graph_name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _assert_whole(artifact: Path) -> dict:
    manifest, path = _manifest(artifact)
    assert recorded_hashes(manifest, path)
    check_stage_files(artifact, manifest, path)  # raises on a mixed directory
    return manifest


@given(text=HOSTILE)
def test_safe_names_are_bounded_plain_and_stable(text: str) -> None:
    name = safe_name(text)
    assert 0 < len(name) <= MAX_NAME and re.fullmatch(r"[A-Za-z0-9_.-]+", name)
    assert not name.startswith(("-", ".")) and safe_name(name) == name


@given(a=HOSTILE, b=HOSTILE)
def test_long_names_sharing_a_beginning_stay_apart(a: str, b: str) -> None:
    prefix = "m" * (MAX_NAME + 10)
    if a != b:
        assert safe_name(prefix + a) != safe_name(prefix + b)


@_SLOW
@given(text=HOSTILE, as_graph_name=st.booleans())
def test_any_model_name_gives_files_inside_out_and_keeps_the_text(text: str,
                                                                  as_graph_name: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        model = _cnn(graph_name=text if as_graph_name else "g")
        if as_graph_name and not text:
            with pytest.raises(InvalidModelError, match="'graph' is required to be non-empty"):
                mrvl_convert.convert(model, out)
            assert not out.exists()
            return
        mrvl_convert.convert(model, out, name=None if as_graph_name else text)
        files = [p for p in Path(tmp).rglob("*")]
        assert all(p.resolve().is_relative_to(out.resolve()) or p == out for p in files)
        for path in out.iterdir():
            assert len(path.name.encode("utf-8")) <= 255
            assert not path.name.startswith(("-", "."))
        model_entry = _assert_whole(out)["model"]
        stem = safe_name(text) if text else model_entry["name"]
        assert model_entry["name"] == stem
        if text and stem != text:
            assert model_entry["name_original"] == text


@pytest.fixture(scope="module")
def slow_writes():
    """Every artifact file written a little late: the publishers' staging overlaps."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("_MRVL_CONVERT_TEST_WRITE_DELAY", "0.01")
        yield


@_SLOW
@given(runs=st.lists(st.integers(0, 3), min_size=2, max_size=4))
def test_concurrent_publishers_of_one_name_leave_one_whole_artifact(slow_writes,
                                                                     runs: List[int]) -> None:
    """Each entry of ``runs`` is one thread converting a model of that seed into OUT/same."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "same"
        errors: List[BaseException] = []

        def publish(seed: int) -> None:
            try:
                mrvl_convert.convert(_cnn(seed=seed), out, name="same")
            except MrvlConvertError:
                pass  # a clear error is allowed; anything else is not
            except BaseException as exc:  # noqa: BLE001 - collected and failed below
                errors.append(exc)

        threads = [threading.Thread(target=publish, args=(seed,)) for seed in runs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        _assert_whole(out)
        published = recorded_hashes(*_manifest(out))
        assert published in [dict(_solo_hashes(seed)) for seed in set(runs)]
        assert [p.name for p in Path(tmp).iterdir()] == ["same"]


def _manifest(artifact: Path):
    path = artifact / "manifest.json"
    return json.loads(path.read_text(encoding="utf-8")), str(path)


@functools.lru_cache(maxsize=None)  # four seeds, converted once each, not once per example
def _solo_hashes(seed: int) -> tuple:
    """What one run alone publishes (conversions are byte-identical run to run)."""
    with tempfile.TemporaryDirectory() as tmp:
        mrvl_convert.convert(_cnn(seed=seed), Path(tmp) / "same", name="same")
        return tuple(sorted(recorded_hashes(*_manifest(Path(tmp) / "same")).items()))


@_SLOW
@given(names=st.lists(HOSTILE, min_size=3, max_size=3, unique=True))
def test_the_page_keeps_its_scripts_whatever_the_node_names(names: List[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "m"
        mrvl_convert.convert(_cnn(node_names=names), out, name="m", draw=True)
        page = (out / "m.html").read_text(encoding="utf-8")
    parser = Scripts()
    parser.feed(page)
    parser.close()
    assert [a for a, _ in parser.found] == [{"type": "application/json", "id": "graph-data"},
                                            {}, {}]
    data = json.loads(parser.found[0][1])
    drawn = json.dumps(data, ensure_ascii=False)
    for name in names:
        if name:
            assert json.dumps(name, ensure_ascii=False)[1:-1] in drawn
