"""A wrong weight planted in an artifact, as a hand-edited Constants-JSON would hold it (the
manifest's hash refreshed): a verdict that still passes it judges nothing."""
from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Optional

import numpy as np


def plant_wrong_weight(art: Path, source_node: str, layer: Optional[str] = None) -> None:
    """One output channel of the kernel of the artifact's layer made of ``source_node`` (its
    first source node, in an fp16 artifact), or of the layer named ``layer``, doubled in the
    Constants-JSON."""
    report = json.loads((art / "report.json").read_text())
    layer = layer or next((f["layer"] for f in report.get("int8_forms", [])
                           if f["source_nodes"] == [source_node]), None)
    manifest = json.loads((art / "manifest.json").read_text())
    stage = manifest["stages"][0]
    nodes = json.loads((art / stage["nodes_json"]).read_text())
    consts = json.loads((art / stage["consts_json"]).read_text())
    node = next(n for n in nodes["nodes"] if n.get("name") == layer or (
        layer is None and n.get("attrs", {}).get("source_nodes", [None])[:1] == [source_node]))
    entry = consts[node["attrs"]["kernel_const_name"][0]]
    dtype = np.dtype(entry.get("dtype", "float32"))
    values = np.frombuffer(base64.b64decode(entry["data_base64"]), dtype).copy()
    values = values.reshape(entry["shape"])
    if dtype.kind == "f":
        values[0] *= 2.0
        entry.update(min=str(float(values.min())), max=str(float(values.max())))
    else:  # an int8 kernel (symmetric, within +-127): its first channel negated
        values[0] = -values[0]
    entry.update(data_base64=base64.b64encode(values.tobytes()).decode())
    text = json.dumps(consts)
    (art / stage["consts_json"]).write_text(text)
    stage["sha256"][stage["consts_json"]] = hashlib.sha256(text.encode()).hexdigest()
    (art / "manifest.json").write_text(json.dumps(manifest))
