"""Files written into a directory that already exists (summary.json, quant_analysis.json) go
through a temp file renamed over the target: whole or not at all, with our error."""
from __future__ import annotations

import base64
import hashlib
import json
import os

import numpy as np
import pytest

from mrvl_convert.emit.mrvl_json import encode_const
from mrvl_convert.emit.base64_text import Base64Text
from mrvl_convert.emit.publish import StagingDir, dumps, write_file_atomically
from mrvl_convert.errors import ArtifactError, OutputDirError


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


def _consts() -> dict:
    return {"conv_const_0": encode_const(np.linspace(-2.5, 3.0, 24, dtype=np.float32)
                                         .reshape(2, 3, 4)),
            "é_const_1": encode_const(np.array([-3, 7, 0], np.int8)),
            "fc_const_2": encode_const(np.float32(0.5))}


def test_constants_json_is_the_compact_encoders_bytes(tmp_path):
    """write_consts copies each base64 text as is: the bytes write_json(compact) would write."""
    document = _consts()
    assert isinstance(document["conv_const_0"]["data_base64"], Base64Text)
    with StagingDir(tmp_path / "o") as staging:
        staging.write_consts("m-consts.json", document)
        data = (staging.path / "m-consts.json").read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        assert staging.digests["m-consts.json"] == {"m-consts.json": digest}
    assert data == dumps(document, compact=True)
    entry = json.loads(data)["conv_const_0"]
    assert np.array_equal(np.frombuffer(base64.b64decode(entry["data_base64"]), "<f4"),
                          np.linspace(-2.5, 3.0, 24, dtype=np.float32))


@pytest.mark.parametrize("field, value, where", [
    ("data_base64", "not*base64!", "conv_const_0/data_base64"),  # a plain str: validated whole
    ("min", None, "conv_const_0/min"),
    ("shape", [-1], "conv_const_0/shape/0"),
])
def test_constants_json_structure_is_still_validated(tmp_path, field, value, where):
    document = _consts()
    document["conv_const_0"][field] = value
    with pytest.raises(ArtifactError, match=f"m-consts.json does not match consts.schema.json "
                                            f"at {where}"):
        with StagingDir(tmp_path / "o") as staging:
            staging.write_consts("m-consts.json", document)
    assert not (tmp_path / "o").exists()


def _umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current
