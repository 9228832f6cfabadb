"""What a conversion keeps of ``foreign_int8.py``'s rewrite for verify (issue 45, finding 5),
as ``--quantize int8`` keeps ``<name>.int8.onnx``.

A requantized foreign model's int8 layers are bit-equal by construction to the requantized QDQ
model, not to the model as given: judged against the given one, verify would count the
requantization's own cost (e.g. 1.7% of an output's peak) against the conversion. So the
artifact keeps the requantized QDQ model (``<name>.requantized.onnx``, the manifest's
``foreign_int8`` section); verify judges the artifact against it and reports the cost against
the model as given beside the verdict (``verify/quant_cost.py``), as an int8 verify reports
its cost against fp32. A model run in fp16 (``--foreign-int8 fp16``, or requantize of a model
with no int8 MAC) keeps its float form (``<name>.float.onnx``, QDQ nodes removed) the same way:
judged against the given QDQ model, the quantizer's own rounding would fail the verdict. So
does a model whose only rewrite is ``quantize_dynamic``'s MatMulIntegers, ConvIntegers or
DynamicQuantizeLSTMs as float ones (``foreign_dynamic.py``, ``foreign_dynamic_ops.py``).

Contract.
  Requires: the requantized model as ``bring_foreign_int8`` left it (before canonicalization
  changes it), report.json's ``foreign_int8`` section of it.
  Ensures: ``kept_model``: the manifest entry with the model's bytes under ``data`` (popped
  when written), or None (nothing rewritten: the given model is the reference);
  ``kept_reference``: the file an artifact keeps (what every verdict on it is judged against:
  ``mrvl-verify`` and ``--keep-fp32 auto``'s rounds alike), or None.
  Nothing is changed.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

import onnx

from mrvl_convert.core.artifact import read_json

SUFFIXES = {"requantize": ".requantized.onnx", "fp16": ".float.onnx"}
# what verify calls the model kept, and what the rewrite that made it costs
WORDS = {"requantize": ("the requantized QDQ model", "requantization"),
         "fp16": ("the model without its QDQ nodes", "removing its QDQ nodes")}


def kept_model(section: Optional[Mapping[str, Any]], proto: onnx.ModelProto,
               name: str, serialized: Optional[bytes] = None) -> Optional[Dict[str, Any]]:
    """The manifest's ``foreign_int8`` entry of a requantized model, with its bytes
    (``serialized``: ``proto``'s, when the caller has them already)."""
    requantized = section and (section.get("weights") or section.get("activations")
                               or section.get("biases"))
    dynamic = section and any(section.get(k) for k in ("dynamic", "dynamic_convs",
                                                        "dynamic_lstms"))
    if not requantized and not dynamic:
        return None
    # only dynamic int8 layers made float ones (run in fp16): the model kept is a float
    # form, judged against the given one verify would count the run-time quantization of
    # their inputs the rewrite removed (``foreign_dynamic.py``'s bound) against the conversion
    mode = "fp16" if (section.get("mode") == "fp16" or section.get("fp16_because")
                      or not requantized) else "requantize"
    data = proto.SerializeToString() if serialized is None else serialized
    return {"mode": mode, "file": f"{name}{SUFFIXES[mode]}",
            "sha256": hashlib.sha256(data).hexdigest(), "data": data}


def kept_reference(artifact_dir: "str | os.PathLike[str]") -> Optional[Path]:
    """The model kept in ``artifact_dir`` for verify (its manifest's ``foreign_int8`` file),
    None when the artifact keeps none (or the file is missing)."""
    section = read_json(Path(artifact_dir) / "manifest.json", "manifest").get(
        "foreign_int8") or {}
    kept = Path(artifact_dir) / section.get("file", "")
    return kept if section.get("file") and kept.is_file() else None
