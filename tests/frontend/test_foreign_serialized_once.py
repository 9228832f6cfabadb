"""The requantized model is serialized once: the measured bytes are the ones the artifact keeps."""
from __future__ import annotations

import copy
import hashlib

import onnx

import mrvl_convert
from mrvl_convert.frontend.foreign_cost import foreign_int8_section
from support.foreign_qdq import foreign_quantized, resnet_like


def test_the_section_hands_over_the_rewritten_models_bytes() -> None:
    model = foreign_quantized(resnet_like(), per_channel=True, activation="QUInt8")
    rewritten, section, serialized = foreign_int8_section(copy.deepcopy(model), "requantize")
    assert section["activations"] > 0 and "error" not in section["cost"]
    assert serialized == rewritten.SerializeToString()


def test_the_kept_file_is_the_model_the_manifest_names(tmp_path) -> None:
    model = foreign_quantized(resnet_like(seed=1), per_channel=False, activation="QUInt8")
    result = mrvl_convert.convert(model, tmp_path / "out", name="net")
    entry = result.manifest["foreign_int8"]
    kept = (tmp_path / "out" / entry["file"]).read_bytes()
    assert entry["file"] == "net.requantized.onnx"
    assert hashlib.sha256(kept).hexdigest() == entry["sha256"]
    assert onnx.load_from_string(kept).graph.node  # a whole model, not a stub


def test_nothing_foreign_hands_over_no_bytes() -> None:
    _, section, serialized = foreign_int8_section(resnet_like(), "requantize")
    assert section is None and serialized is None
