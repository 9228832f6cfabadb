"""``emit/json_text.py``: the indented text the artifact's Nodes-JSON, manifest and report are
written with is the standard encoder's, byte for byte."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.emit.json_text import IndentedJSON
from support.models import conv_then_cpu_tail
from support.recurrent import crnn


def _standard(document) -> str:
    return json.JSONEncoder(indent=2, ensure_ascii=False).encode(document)


def _ours(document, block: int = 1 << 14) -> str:
    return "".join(IndentedJSON(block=block).iterencode(document))


@pytest.mark.parametrize("document", [
    [], {}, [[]], {"a": {}}, 0, "x", None, math.nan, -math.inf,
    {"shape": [[1, 3, 8, 8]], "empty": [], "deep": [[[1.5, -0.0]], [[]]], "t": (1, "é")},
    {1: "int key", 2.5: "float key", True: "bool", None: "none", "": [None, True, False]},
    [{"name": "a]b", "v": ["],\n  [", "\x00", "\"\\"]}, [{"q": "}"}, {"r": "{"}]],
])
def test_documents_as_the_standard_encoder_writes_them(document):
    for block in (1, 2, 1 << 14):
        assert _ours(document, block) == _standard(document)


def test_what_the_standard_encoder_refuses_is_refused():
    for document in ({"a": [np.float32(1)]}, [{"a": object()}], {(1, 2): 3}):
        with pytest.raises(TypeError):
            _standard(document)
        with pytest.raises(TypeError):
            _ours(document)


def test_artifact_json_files_are_the_standard_encoders_bytes(tmp_path):
    """Every indented JSON file of two conversions (a CNN with a CPU tail, an unrolled CRNN)
    read back and written by the standard encoder: the same bytes."""
    for k, model in enumerate((conv_then_cpu_tail(), crnn(steps=6, hidden=4))):
        out = tmp_path / f"m{k}"
        mrvl_convert.convert(model, out)
        written = [p for p in out.glob("*.json") if not p.name.endswith("-consts.json")]
        assert any(p.name.endswith("-nodes.json") for p in written)
        for path in written:
            text = path.read_text(encoding="utf-8")
            assert text == _standard(json.loads(text)) + "\n", path.name
