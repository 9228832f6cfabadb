"""Nodes-JSON and Constants-JSON for one Mrvl subgraph, in the upstream TVM Marvell conventions.

See docs/FORMATS.md. Beyond upstream, every layer carries ``source_nodes`` and ``rule``.
"""
from __future__ import annotations

import base64
from typing import Any, Dict, List, Tuple

import numpy as np

from ..layout import Layer, MrvlSubgraph

_EMPTY_CONST_SLOTS = ("kernel_const", "bias_const", "beta_const", "gamma_const", "var_const",
                      "mean_const")
_CONST_ATTR = {"kernel": "kernel", "bias": "bias", "operand": "input"}


def _s(values) -> List[str]:
    return [str(int(v)) for v in values]


def format_float(value: float) -> str:
    """Upstream writes min/max as the shortest round-trip double text with 17 significant digits."""
    return f"{float(value):.17g}"


def encode_const(array: np.ndarray) -> Dict[str, Any]:
    data = np.ascontiguousarray(array, dtype="<f4")
    return {"shape": [int(d) for d in data.shape], "dtype": "float32",
            "min": format_float(data.min()), "max": format_float(data.max()),
            "data_base64": base64.b64encode(data.tobytes()).decode("ascii")}


def _func_suffix(layer: Layer) -> str:
    src, dst = layer.in_layouts[0].name, layer.out_layout.name
    if layer.kind == "layout_transform":
        return f"{layer.attrs['src_layout'][0]}2{layer.attrs['dst_layout'][0]}"
    return dst if src == dst else f"{src}2{dst}"


def _layer_node(sub: MrvlSubgraph, k: int, layer: Layer, node_index: int,
                consts: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    name = f"{sub.name}_{k}"
    first_in = layer.in_layouts[0]
    attrs: Dict[str, Any] = {
        "layer_name": [layer.kind],
        "composite_name": [layer.composite],
        "func_name": [f"n{k}_{layer.kind}_{_func_suffix(layer)}"],
        "func_node_name": [sub.name],
        "num_inputs": str(len(layer.inputs) + len(layer.consts)),
        "num_outputs": "1",
        "shape": [layer.out_layout.physical_shape],
        "dtype": ["float32"],
        "data_layout": [first_in.name],
        "data_layout_shape": _s(first_in.physical_shape),
        "out_layout": [layer.out_layout.name],
        "out_layout_shape": _s(layer.out_layout.physical_shape),
        "from_tuple_idx": ["-1"],
        "mrvl_nodes_idx": [node_index],
    }
    for slot in _EMPTY_CONST_SLOTS:
        attrs[slot] = {}
    attrs.update(layer.attrs)
    for i, (role, array) in enumerate(layer.consts):
        const_name = f"{name}_const_{i}"
        encoded = encode_const(array)
        consts[const_name] = encoded
        prefix = _CONST_ATTR[role]
        attrs[f"{prefix}_const_name"] = [const_name]
        attrs[f"{prefix}_const"] = {"dtype": "float32", "max": encoded["max"],
                                    "min": encoded["min"], "name": const_name,
                                    "shape": encoded["shape"]}
    attrs["source_nodes"] = list(layer.source_nodes)
    attrs["rule"] = [layer.rule]
    return {"op": "tvm_op", "name": name,
            "inputs": [[int(i), 0, 0] for i in layer.inputs], "attrs": attrs}


def build(sub: MrvlSubgraph) -> Tuple[Dict[str, Any], Dict[str, Dict[str, Any]]]:
    nodes: List[Dict[str, Any]] = []
    shapes: List[List[int]] = []
    for k, (tensor, layout) in enumerate(zip(sub.input_tensors, sub.input_layouts)):
        nodes.append({"op": "input", "name": tensor.name, "inputs": [], "input_id": [str(k)],
                      "attrs": {"shape": [layout.physical_shape], "dtype": ["float32"],
                                "layer_name": ["input"], "data_layout": [layout.name]}})
        shapes.append(layout.physical_shape)
    consts: Dict[str, Dict[str, Any]] = {}
    for k, layer in enumerate(sub.layers):
        nodes.append(_layer_node(sub, k, layer, len(nodes), consts))
        shapes.append(layer.out_layout.physical_shape)
    batch = sub.input_layouts[0].shape[0] if sub.input_layouts and sub.input_layouts[0].shape \
        else 1
    doc = {
        "symbol": sub.name,
        "nodes": nodes,
        "arg_nodes": list(range(len(sub.input_tensors))),
        "heads": [[int(h), 0, 0] for h in sub.heads],
        "attrs": {"shape": ["list_shape", shapes], "dltype": ["list_str", ["float32"] * len(nodes)]},
        "batch_size": str(batch),
        "num_subgraph_inputs": str(len(sub.input_tensors)),
        "num_subgraph_outputs": str(len(sub.heads)),
    }
    return doc, consts
