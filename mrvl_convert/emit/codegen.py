"""Which Marvell codegen an artifact needs: whether every Mrvl layer is one that upstream TVM
v0.19's codegen emits, and if not, which kinds go beyond it.

Marvell's released flow pins upstream TVM (``legacy-v0.19.post``), whose codegen emits twelve
layer kinds (the catalogue's kinds whose ``layer_sets`` hold ``upstream-0.19``: Conv2D, FC, the
four pools, Sum2D, Concat, reshape, nn.batch_flatten, squeeze, layout_transform) in float only
(so any int8 layer is beyond it), with relu as the one fused activation and FC over a 2-D
input. The default ``--layer-set marvell`` follows one commit of a public fork of the newer
codegen; a layer beyond the twelve may not compile with the released ``mrvl-tmlc``. A model
whose layers are all of the twelve needs only the released codegen, whichever set converted it.

A layer a rule made needs only v0.19 if and only if ``--layer-set upstream-0.19``'s rules accept
its composite as it stands (``rules.other_sets.set_verdicts``, passed in as ``upstream``): the
same rule checks that set converts with, never a second opinion by layer name. A broadcasting
Sum2D is a Sum2D by name but v0.19's rule refuses it, and the report says so with the rule's
reason. Layers the layout pass made (no rule) and documents with no verdicts (what upstream
itself wrote) are judged by name and activation, as v0.19's codegen writes them.

int8: every int8 layer is beyond v0.19 (float only). The newer codegen (princekumar70/tvm
@9446d803b92cdc8c4996a11f52b8f13dec1a02a3 python/tvm/relay/op/contrib/mrvl.py
``mrvl_pattern_table``) has int8 composites for conv2d, fc, add, mul, avg and global avg pool,
tanh, sigmoid, requantize and quantize/dequantize, and lets max pooling, layout_transform and
the byte-moving kinds (reshape, split, strided_slice, resize2d...) take int8 data; its
conv2d_transpose, concatenate and subtract checks take float32 only and it has no int8 mean. So
an int8 Conv2DTranspose, Concat, Sub or ReduceMean is a kind no public codegen emits as such
(``NO_PUBLIC_INT8``): the report names it with ``no_public_codegen``. An int8 FC on a 3-D token
tensor (``mrvl.qnn_fc_tokens``, written NHWC ``[B, T, C, 1]`` as the float FC on tokens is) is
named apart, ``INT8_FC_3D``: v0.19's FC takes a 2-D input in float only.

Read from the Nodes-JSON documents as written (``layer_name``, ``composite_name``,
``source_nodes``, the int8 attributes, ``activation_type``, ``data_layout``), so it speaks of
the artifact itself.

Contract: requires Nodes-JSON documents that validate against ``nodes.schema.json``; ensures
``needs`` is deterministic (kinds sorted, most layers first) and names each kind beyond v0.19
with its layer count and the composites that made it.
"""
from __future__ import annotations

import functools
from types import MappingProxyType
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from mrvl_convert.core.artifact import first_value
from mrvl_convert.layers import CATALOGUE, MARVELL, UPSTREAM

#: layer_name of every kind upstream TVM v0.19's codegen emits (the twelve).
UPSTREAM_KINDS = frozenset(name for name, kind in CATALOGUE.items()
                           if UPSTREAM in kind.layer_sets)
_UPSTREAM_ACTIVATIONS = ("", "none", "relu")
INT8_LAYERS = "int8 layers"  # one kind for them all: their composites tell them apart
# Attributes only an int8 layer carries (layers/qnn): its scales and ranges.
_INT8_PREFIXES = ("q_min_", "q_max_")
#: (composite_name, layer_name) of the int8 layers no public codegen emits as such, and the kind
#: the report names (the newer mrvl.py's checks take float32 only for these ops; it has no int8
#: mean). The requant layers a qnn_concat writes in front of its inputs are the codegen's own.
NO_PUBLIC_INT8: Mapping[Tuple[str, str], str] = MappingProxyType({
    ("mrvl.qnn_conv2d_transpose", "Conv2DTranspose"): "int8 Conv2DTranspose",
    ("mrvl.qnn_subtract", "Sub"): "int8 Sub",
    ("mrvl.qnn_concat", "Concat"): "int8 Concat",
    ("mrvl.qnn_reduce_mean", "ReduceMean"): "int8 ReduceMean",
})
#: An int8 FC over the last axis of [B, T, C] (its Nodes-JSON ``data_layout`` NHWC).
INT8_FC_3D = "int8 FC on a 3-D tensor"
_LAYOUT_RULE = "layout"  # the ``rule`` emit writes for a layer the layout pass made


def is_int8(attrs: Mapping[str, Any]) -> bool:
    """A Nodes-JSON layer that computes in int8: it carries a scale or an int8 range, or its
    output is int8 (an int8 pool or data movement writes no scale of its own)."""
    if first_value(attrs.get("dtype")) == "int8":
        return True
    return _int8_keys(tuple(attrs))


@functools.lru_cache(maxsize=256)
def _int8_keys(keys: Tuple[str, ...]) -> bool:
    """A scale or an int8 range among a layer's attribute names: one answer per set of names
    (a layer kind's), asked of every layer several times per conversion."""
    return any(key.endswith("_scale") or key.startswith(_INT8_PREFIXES) for key in keys)


def beyond_upstream(attrs: Mapping[str, Any]) -> Optional[str]:
    """The kind of a Nodes-JSON layer that upstream v0.19's codegen does not emit, as the user
    reads it ("Sigmoid", "Conv2D+sigmoid", "FC on a 3-D tensor"; every int8 layer, quantize and
    dequantize ones included, is "int8 layers": v0.19 emits float layers only); None for a
    layer it emits."""
    return INT8_LAYERS if is_int8(attrs) else _beyond_float(attrs)


def _beyond_float(attrs: Mapping[str, Any]) -> Optional[str]:
    """``beyond_upstream`` of a layer known not to be int8."""
    name = str(first_value(attrs.get("layer_name")))
    if name not in UPSTREAM_KINDS:
        return name
    activation = str(first_value(attrs.get("activation_type")) or "").lower()
    if activation not in _UPSTREAM_ACTIVATIONS:
        return f"{name}+{activation}"
    if name == "FC" and first_value(attrs.get("data_layout")) == "NHWC":
        return "FC on a 3-D tensor"
    return None


def _verdicts(layers: List[Mapping[str, Any]], upstream: Mapping[str, Optional[str]]
              ) -> List[Optional[str]]:
    """Per rule-made layer of one document, None where v0.19's rules accept its composite, else
    why. A decomposition's partial layers name no source node: they share the verdict of the
    layer after them of the same composite, the one that stands for the composite's nodes."""
    verdicts: List[Optional[str]] = []
    later: Dict[str, Optional[str]] = {}
    for attrs in reversed(layers):
        composite = str(first_value(attrs.get("composite_name")))
        sources = attrs.get("source_nodes") or []
        if sources:
            verdict = next((upstream.get(n, f"no composite holds node {n}") for n in sources
                            if upstream.get(n, "") is not None), None)
            later[composite] = verdict
        else:
            verdict = later.get(composite, "the layer names no source node")
        verdicts.append(verdict)
    return verdicts[::-1]


def _judge(attrs: Mapping[str, Any], verdict: Optional[str], judged: bool
           ) -> Tuple[Optional[str], str, bool]:
    """(kind beyond v0.19 or None, the v0.19 rule's reason where it refused, whether no public
    codegen emits the kind as such) of one Nodes-JSON layer; ``judged``: ``verdict`` is v0.19's
    rules' on its composite."""
    name = str(first_value(attrs.get("layer_name")))
    if is_int8(attrs):
        key = (str(first_value(attrs.get("composite_name"))), name)
        if name == "FC" and first_value(attrs.get("data_layout")) == "NHWC":
            return INT8_FC_3D, "", False
        return NO_PUBLIC_INT8.get(key, INT8_LAYERS), "", key in NO_PUBLIC_INT8
    by_name = _beyond_float(attrs)  # is_int8 said no just above: asked once a layer
    if not judged:
        return by_name, "", False
    reason = verdict
    if reason is None:
        return None, "", False  # v0.19's rules accept the very composite
    if by_name is not None:
        return by_name, "", False  # the kind itself says why
    return f"{name} beyond v0.19's rules", reason, False


def needs(nodes_documents: Iterable[Mapping[str, Any]],
          upstream: Optional[Mapping[str, Optional[str]]] = None) -> Dict[str, Any]:
    """The manifest's ``codegen``: ``layer_set`` the lowest layer set whose codegen emits every
    Mrvl layer (``upstream-0.19`` or ``marvell``), ``beyond_upstream`` each kind beyond v0.19
    with its layer count and the composites that made it, most layers first; ``reasons`` the
    v0.19 rules' refusals where the name alone would not tell, ``no_public_codegen`` on a kind
    no public codegen emits as such. ``upstream``: node name -> None where v0.19's rules accept
    the composite holding it, else why (``rules.other_sets.set_verdicts``)."""
    counts: Dict[str, int] = {}
    composites: Dict[str, set] = {}
    reasons: Dict[str, set] = {}
    no_public: set = set()
    for document in nodes_documents:
        layers = [node["attrs"] for node in document["nodes"] if node["op"] == "tvm_op"]
        verdicts = _verdicts(layers, upstream) if upstream is not None else [None] * len(layers)
        for attrs, verdict in zip(layers, verdicts):
            judged = upstream is not None and first_value(attrs.get("rule")) not in (
                None, _LAYOUT_RULE)
            kind, reason, unemitted = _judge(attrs, verdict, judged)
            if kind is None:
                continue
            counts[kind] = counts.get(kind, 0) + 1
            composite = first_value(attrs.get("composite_name"))
            composites.setdefault(kind, set()).update([composite] if composite else [])
            if reason:
                reasons.setdefault(kind, set()).add(reason)
            if unemitted:
                no_public.add(kind)
    beyond: List[Dict[str, Any]] = []
    for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        entry: Dict[str, Any] = {"kind": kind, "layers": n, "composites": sorted(composites[kind])}
        if kind in reasons:
            entry["reasons"] = sorted(reasons[kind])
        if kind in no_public:
            entry["no_public_codegen"] = True
        beyond.append(entry)
    return {"layer_set": MARVELL if beyond else UPSTREAM, "beyond_upstream": beyond}
