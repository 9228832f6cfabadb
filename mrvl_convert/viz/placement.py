"""``<model>.placement.onnx``: the model with every node's placement in its metadata, for Netron.

Only ``metadata_props`` are added (node and model level); the graph, its weights and so its
outputs are those of the model as convert loaded it (nodes named, input shapes fixed).
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

import onnx

from mrvl_convert.errors import ArtifactError

_NODE_KEYS = ("placement", "stage", "rule", "layer", "reason")


def annotate(proto: onnx.ModelProto, report: Mapping[str, Any],
             estimate: Optional[Mapping[str, Any]] = None) -> onnx.ModelProto:
    """A copy of ``proto`` whose nodes carry ``mrvl.placement``, ``mrvl.stage``, ... metadata."""
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    nodes = model.graph.node
    for entry in report["nodes"]:
        if "derived_from" in entry:   # a decided If's branch node: not a node of this model
            continue
        index = entry["index"]
        if index >= len(nodes) or nodes[index].op_type != entry["op_type"]:
            raise ArtifactError(f"report entry {entry['name']!r} does not match node {index} "
                                "of the model it is drawn on")
        _set(nodes[index].metadata_props, {f"mrvl.{k}": entry[k] for k in _NODE_KEYS
                                           if k in entry})
    summary = report["summary"]
    props = {"mrvl.summary": ", ".join(f"{k}={v}" for k, v in summary.items()),
             "mrvl.policy": report["policy"]}
    if estimate is not None:
        props["mrvl.estimate_us"] = (f"ESTIMATE {estimate['mrvl_microseconds']} us on the "
                                     f"accelerator ({estimate['tiles']} tiles, profile "
                                     f"{estimate['profile']['name']})")
    _set(model.metadata_props, props)
    return model


def _set(props, values: Mapping[str, Any]) -> None:
    existing = {p.key: p for p in props}
    for key, value in values.items():
        entry = existing.get(key) or props.add()
        entry.key, entry.value = key, str(value)
