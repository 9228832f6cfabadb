"""``emit/json_text.py`` on generated documents: its indented text is the standard encoder's
(``json.JSONEncoder(indent=2, ensure_ascii=False)``), byte for byte, whatever the nesting,
scalars, keys, indent and block size (a small block hands text out between flat containers)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from mrvl_convert.emit.json_text import IndentedJSON
from support.strategies.speed import documents

pytestmark = pytest.mark.system


@given(documents(), st.sampled_from([1, 3, 1 << 14]), st.sampled_from([1, 2, 4]))
def test_indented_text_is_the_standard_encoders(document, block, indent):
    want = json.JSONEncoder(indent=indent, ensure_ascii=False).encode(document)
    assert "".join(IndentedJSON(indent, block).iterencode(document)) == want
