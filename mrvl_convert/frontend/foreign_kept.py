"""What a conversion keeps of ``foreign_int8.py``'s requantization for verify (issue 45,
finding 5), as ``--quantize int8`` keeps ``<name>.int8.onnx``.

A requantized foreign model's int8 layers are bit-equal by construction to the requantized QDQ
model, not to the model as given: judged against the given one, verify would count the
requantization's own cost (e.g. 1.7% of an output's peak) against the conversion. So the
artifact keeps the requantized QDQ model (``<name>.requantized.onnx``, the manifest's
``foreign_int8`` section); verify judges the artifact against it and reports the cost against
the model as given beside the verdict (``verify/quant_cost.py``), as an int8 verify reports
its cost against fp32.

Contract.
  Requires: the requantized model as ``bring_foreign_int8`` left it (before canonicalization
  changes it), report.json's ``foreign_int8`` section of it.
  Ensures: ``kept_model``: the manifest entry with the model's bytes under ``data`` (popped
  when written), or None (fp16 mode, or nothing rewritten: the given model is the reference).
  Nothing is changed.
"""
from __future__ import annotations

import hashlib
from typing import Any, Dict, Mapping, Optional

import onnx

SUFFIX = ".requantized.onnx"


def kept_model(section: Optional[Mapping[str, Any]], proto: onnx.ModelProto,
               name: str) -> Optional[Dict[str, Any]]:
    """The manifest's ``foreign_int8`` entry of a requantized model, with its bytes."""
    if not section or section.get("mode") != "requantize" or not (
            section.get("weights") or section.get("activations") or section.get("biases")):
        return None
    data = proto.SerializeToString()
    return {"mode": "requantize", "file": f"{name}{SUFFIX}",
            "sha256": hashlib.sha256(data).hexdigest(), "data": data}
