"""Which Marvell codegen an artifact needs: whether every Mrvl layer is one that upstream TVM
v0.19's codegen emits, and if not, which kinds go beyond it.

Marvell's released flow pins upstream TVM (``legacy-v0.19.post``), whose codegen emits twelve
layer kinds (the catalogue's kinds whose ``layer_sets`` hold ``upstream-0.19``: Conv2D, FC, the
four pools, Sum2D, Concat, reshape, nn.batch_flatten, squeeze, layout_transform) in float only
(so any int8 layer is beyond it), with relu as the one fused activation and FC over a 2-D
input. The default ``--layer-set marvell`` follows one commit of a public fork of the newer
codegen; a layer beyond the twelve may not compile with the released ``mrvl-tmlc``. A model
whose layers are all of the twelve needs only the released codegen, whichever set converted it.

Read from the Nodes-JSON documents as written (``layer_name``, ``composite_name``, the int8
attributes, ``activation_type``, ``data_layout``), so it speaks of the artifact itself.

Contract: requires Nodes-JSON documents that validate against ``nodes.schema.json``; ensures
``needs`` is deterministic (kinds sorted, most layers first) and names each kind beyond v0.19
with its layer count and the composites that made it.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional

from mrvl_convert.core.artifact import first_value
from mrvl_convert.layers import CATALOGUE, MARVELL, UPSTREAM

#: layer_name of every kind upstream TVM v0.19's codegen emits (the twelve).
UPSTREAM_KINDS = frozenset(name for name, kind in CATALOGUE.items()
                           if UPSTREAM in kind.layer_sets)
_UPSTREAM_ACTIVATIONS = ("", "none", "relu")
INT8_LAYERS = "int8 layers"  # one kind for them all: their composites tell them apart
# Attributes only an int8 layer carries (layers/qnn): its scales and ranges.
_INT8_PREFIXES = ("q_min_", "q_max_")


def is_int8(attrs: Mapping[str, Any]) -> bool:
    """A Nodes-JSON layer that computes in int8: it carries a scale or an int8 range, or its
    output is int8 (an int8 pool or data movement writes no scale of its own)."""
    if first_value(attrs.get("dtype")) == "int8":
        return True
    return any(key.endswith("_scale") or key.startswith(_INT8_PREFIXES) for key in attrs)


def beyond_upstream(attrs: Mapping[str, Any]) -> Optional[str]:
    """The kind of a Nodes-JSON layer that upstream v0.19's codegen does not emit, as the user
    reads it ("Sigmoid", "Conv2D+sigmoid", "FC on a 3-D tensor"; every int8 layer, quantize and
    dequantize ones included, is "int8 layers": v0.19 emits float layers only); None for a
    layer it emits."""
    if is_int8(attrs):
        return INT8_LAYERS
    name = str(first_value(attrs.get("layer_name")))
    if name not in UPSTREAM_KINDS:
        return name
    activation = str(first_value(attrs.get("activation_type")) or "").lower()
    if activation not in _UPSTREAM_ACTIVATIONS:
        return f"{name}+{activation}"
    if name == "FC" and first_value(attrs.get("data_layout")) == "NHWC":
        return "FC on a 3-D tensor"
    return None


def needs(nodes_documents: Iterable[Mapping[str, Any]]) -> Dict[str, Any]:
    """The manifest's ``codegen``: ``layer_set`` the lowest layer set whose codegen emits every
    Mrvl layer (``upstream-0.19`` or ``marvell``), ``beyond_upstream`` each kind beyond v0.19
    with its layer count and the composites that made it, most layers first."""
    counts: Dict[str, int] = {}
    composites: Dict[str, set] = {}
    for document in nodes_documents:
        for node in document["nodes"]:
            if node["op"] != "tvm_op":
                continue
            kind = beyond_upstream(node["attrs"])
            if kind is None:
                continue
            counts[kind] = counts.get(kind, 0) + 1
            composite = first_value(node["attrs"].get("composite_name"))
            composites.setdefault(kind, set()).update([composite] if composite else [])
    beyond: List[Dict[str, Any]] = [
        {"kind": kind, "layers": n, "composites": sorted(composites[kind])}
        for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    return {"layer_set": MARVELL if beyond else UPSTREAM, "beyond_upstream": beyond}
