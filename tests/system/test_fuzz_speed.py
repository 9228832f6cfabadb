"""The shortcuts of conversion on generated inputs: ``emit/json_text.py``'s indented text is the
standard encoder's (``json.JSONEncoder(indent=2, ensure_ascii=False)``), byte for byte, whatever
the nesting, scalars, keys, indent and block size (a small block hands text out between flat
containers); ``batch_runs`` decided at a stage's boundary writes the artifact the full scan
writes; the report's derived nodes found by their origin's index as by a scan."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings, strategies as st

import mrvl_convert
from mrvl_convert.emit.documents import by_origin, derived_from
from mrvl_convert.emit.json_text import IndentedJSON
from mrvl_convert.rules import batch_axis
from support.strategies.speed import any_batch_models, documents

pytestmark = pytest.mark.system


@given(documents(), st.sampled_from([1, 3, 1 << 14]), st.sampled_from([1, 2, 4]))
def test_indented_text_is_the_standard_encoders(document, block, indent):
    want = json.JSONEncoder(indent=indent, ensure_ascii=False).encode(document)
    assert "".join(IndentedJSON(indent, block).iterencode(document)) == want


_FEW = settings(max_examples=max(2, settings.default.max_examples // 10), deadline=None)


def _files(out: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.iterdir())}


@_FEW
@given(case=any_batch_models())
def test_batch_runs_decided_at_the_boundary_as_by_the_full_scan(case, tmp_path_factory):
    """``batch_axis._fits_at_its_boundary`` (the stage's inputs and outputs decide ``None``)
    only spares the scan: the artifact is byte for byte the one of the full scan."""
    out = tmp_path_factory.mktemp("runs")
    mrvl_convert.convert(case.model, out / "short")
    with mock.patch.object(batch_axis, "_fits_at_its_boundary", lambda *args: False):
        mrvl_convert.convert(case.model, out / "full")
    assert _files(out / "short") == _files(out / "full")


@given(st.dictionaries(st.text("abcd", min_size=1, max_size=3),
                       st.text("abcd", min_size=1, max_size=2), max_size=12),
       st.lists(st.text("abcd", min_size=1, max_size=2), max_size=3))
def test_nodes_derived_from_an_origin_by_the_index_as_by_the_scan(derived, names):
    """``emit/documents.derived_from`` over ``by_origin``'s index: what scanning every derived
    node for each model node (the report's entries) found, in the same order."""
    want = [added for added, origin in derived.items() if origin in names]
    assert derived_from(by_origin(derived), names) == want
