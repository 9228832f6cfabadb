"""Nodes-JSON and Constants-JSON for one Mrvl subgraph, in the upstream TVM Marvell conventions.

See docs/FORMATS.md. Beyond upstream, every layer carries ``source_nodes`` and ``rule``. This is
the one place where typed layer attributes become the lists of strings the format holds, through
each layer kind's own declarations (``mrvl_convert/layers``).
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np

from mrvl_convert.core.graph import dtype_name
from mrvl_convert.emit.base64_text import Base64Text
from mrvl_convert.layers import MARVELL, LayerKind, layer_kind
from mrvl_convert.layers import r4_shape
from mrvl_convert.ir.layout import Layer, MrvlSubgraph, OutputRef, slot_of

_EMPTY_CONST_SLOTS = ("kernel_const", "bias_const", "beta_const", "gamma_const", "var_const",
                      "mean_const")
# The rule name written for a layer that the layout pass inserted.
_LAYOUT_RULE = "layout"


def _s(values) -> List[str]:
    return [str(int(v)) for v in values]


def format_float(value: float) -> str:
    """Upstream writes min/max as the shortest round-trip double text with 17 significant digits."""
    return f"{float(value):.17g}"


# Integer constants of the int8 layers, as the newer codegen writes them ("int" + bits).
_INT_CONSTS = {np.dtype(np.int8): ("int8", "<i1"), np.dtype(np.int32): ("int32", "<i4")}


def encode_const(array: np.ndarray) -> Dict[str, Any]:
    if array.dtype in _INT_CONSTS:
        # The codegen writes min and max "0" for integer constants (it only scans floats).
        name, layout = _INT_CONSTS[array.dtype]
        data = np.ascontiguousarray(array, dtype=layout)
        return {"shape": [int(d) for d in data.shape], "dtype": name, "min": "0", "max": "0",
                "data_base64": Base64Text.of(data)}
    data = np.ascontiguousarray(array, dtype="<f4")
    return {"shape": [int(d) for d in data.shape], "dtype": "float32",
            "min": format_float(data.min()), "max": format_float(data.max()),
            "data_base64": Base64Text.of(data)}


def _func_suffix(layer: Layer) -> str:
    src, dst = layer.in_layouts[0].name, layer.out_layout.name
    return dst if src == dst else f"{src}2{dst}"


def _kind_attrs(kind: LayerKind, layer: Layer) -> Dict[str, List[str]]:
    """The layer's own attributes as strings, in the order its kind declares them."""
    unknown = set(layer.attrs) - {a.name for a in kind.attrs}
    if unknown:  # pragma: no cover - a lowering bug, never a user's
        raise ValueError(f"layer {layer.kind} has undeclared attributes {sorted(unknown)}")
    written = {}
    for a in kind.attrs:
        value = layer.attrs.get(a.name, a.fixed)
        if value is not None:
            written[a.name] = a.encode(value)
    return written


def _r4_attrs(layer: Layer, keep_last: bool = False) -> Dict[str, Any]:
    """The layout attributes of a layer written R4: 4-D shapes, NHWC, one shape per input."""
    def r4(shape):
        return _s(r4_shape(shape, keep_last))
    attrs: Dict[str, Any] = {"data_layout": ["NHWC"], "out_layout": ["NHWC"],
                             "data_layout_shape": r4(layer.in_layouts[0].physical_shape),
                             "out_layout_shape": r4(layer.out_layout.physical_shape)}
    if len(layer.inputs) + len(layer.consts) > 1:
        for i, layout in enumerate(layer.in_layouts):
            attrs[f"data_layout_shape_{i}"] = r4(layout.physical_shape)
    return attrs


def _nhwc_3d_attrs(layer: Layer, k: int) -> Dict[str, Any]:
    """A 3-D layer of a ``nhwc_3d`` kind (FC on [B, T, C]) as the codegen writes it: 4-D with
    a trailing 1, NHWC in and out."""
    return {"data_layout": ["NHWC"], "out_layout": ["NHWC"],
            "func_name": [f"n{k}_{layer.kind}_NHWC"],
            "data_layout_shape": _s(r4_shape(layer.in_layouts[0].physical_shape)),
            "out_layout_shape": _s(r4_shape(layer.out_layout.physical_shape))}


class _Encoded:
    """``encode_const`` of each array object once per subgraph: layers that share one array
    (an unrolled cell's steps, ``layers/fc.py``) share its base64 text, each under its own
    name. Holds the arrays, so no id is reused while it lives."""

    def __init__(self) -> None:
        self._made: Dict[int, Tuple[np.ndarray, Dict[str, Any]]] = {}

    def __call__(self, array: np.ndarray) -> Dict[str, Any]:
        if id(array) not in self._made:
            self._made[id(array)] = (array, encode_const(array))
        return dict(self._made[id(array)][1])


def _layer_node(sub: MrvlSubgraph, k: int, layer: Layer, node_index: int,
                consts: Dict[str, Dict[str, Any]], layer_set: str,
                encode: _Encoded) -> Dict[str, Any]:
    name = f"{sub.name}_{k}"
    kind = layer_kind(layer.kind)
    first_in = layer.in_layouts[0]
    attrs: Dict[str, Any] = {
        "layer_name": [layer.kind],
        "composite_name": [layer.rule or kind.composite],
        "func_name": [f"n{k}_{layer.kind}_{_func_suffix(layer)}"],
        "func_node_name": [sub.name],
        "num_inputs": str(len(layer.inputs) + len(layer.consts)),
        "num_outputs": str(1 + len(layer.extra_outputs)),
        "shape": [o.physical_shape for o in [layer.out_layout, *layer.extra_outputs]],
        "dtype": [layer.dtype],
        "data_layout": [first_in.name],
        "data_layout_shape": _s(first_in.physical_shape),
        "out_layout": [layer.out_layout.name],
        "out_layout_shape": _s(layer.out_layout.physical_shape),
        "from_tuple_idx": _tuple_idx(layer),
        "mrvl_nodes_idx": [node_index],
    }
    if layer.extra_outputs:  # one shape per output, as the newer codegen writes a split
        for i, out in enumerate([layer.out_layout, *layer.extra_outputs]):
            attrs[f"out_layout_shape_{i}"] = _s(out.physical_shape)
    r4 = layer_set in kind.r4 and not (kind.r4_keeps_2d and len(first_in.shape) == 2)
    if r4:
        attrs.update(_r4_attrs(layer, kind.r4_keeps_last))
    if kind.nhwc_3d and len(first_in.shape) == 3:
        attrs.update(_nhwc_3d_attrs(layer, k))
    for slot in _EMPTY_CONST_SLOTS:
        attrs[slot] = {}
    attrs.update(_kind_attrs(kind, layer))
    for i, (role, array) in enumerate(layer.consts):
        const_name = f"{name}_const_{i}"
        encoded = encode(array)
        consts[const_name] = encoded
        prefix = kind.const(role).prefix
        attrs[f"{prefix}_const_name"] = [const_name]
        attrs[f"{prefix}_const"] = {"dtype": encoded["dtype"], "max": encoded["max"],
                                    "min": encoded["min"], "name": const_name,
                                    "shape": encoded["shape"]}
        if r4 and prefix == "input":
            attrs["input_const_shape"] = _s(r4_shape(encoded["shape"], kind.r4_keeps_last))
    attrs["source_nodes"] = list(layer.source_nodes)
    attrs["rule"] = [layer.rule or _LAYOUT_RULE]
    return {"op": "tvm_op", "name": name,
            "inputs": [[int(i), slot_of(i), 0] for i in layer.inputs], "attrs": attrs}


def _tuple_idx(layer: Layer) -> List[str]:
    """``from_tuple_idx``: per input, the output of a multi-output layer it reads (-1: none);
    one "-1" when no input comes from one, as upstream v0.19 writes it."""
    if not any(isinstance(i, OutputRef) for i in layer.inputs):
        return ["-1"]
    return [str(i.slot) if isinstance(i, OutputRef) else "-1" for i in layer.inputs]


def _input_dtype(tensor) -> str:
    """int8 for a tensor of an int8 region that crosses into the stage, float32 otherwise."""
    return "int8" if dtype_name(tensor) == "int8" else "float32"


def build(sub: MrvlSubgraph, layer_set: str = MARVELL
          ) -> Tuple[Dict[str, Any], Dict[str, Dict[str, Any]]]:
    """The Nodes-JSON and Constants-JSON documents of one Mrvl subgraph, written as the
    ``layer_set``'s codegen writes them."""
    nodes: List[Dict[str, Any]] = []
    shapes: List[List[int]] = []
    for k, (tensor, layout) in enumerate(zip(sub.input_tensors, sub.input_layouts)):
        nodes.append({"op": "input", "name": tensor.name, "inputs": [], "input_id": [str(k)],
                      "attrs": {"shape": [layout.physical_shape], "dtype": [_input_dtype(tensor)],
                                "layer_name": ["input"], "data_layout": [layout.name]}})
        shapes.append(layout.physical_shape)
    consts: Dict[str, Dict[str, Any]] = {}
    encode = _Encoded()
    for k, layer in enumerate(sub.layers):
        nodes.append(_layer_node(sub, k, layer, len(nodes), consts, layer_set, encode))
        shapes.append(layer.out_layout.physical_shape)
    batch = sub.input_layouts[0].shape[0] if sub.input_layouts and sub.input_layouts[0].shape \
        else 1
    doc = {
        "symbol": sub.name,
        "nodes": nodes,
        "arg_nodes": list(range(len(sub.input_tensors))),
        "heads": [[int(h), slot_of(h), 0] for h in sub.heads],
        "attrs": {"shape": ["list_shape", shapes],
                  "dltype": ["list_str", [_input_dtype(t) for t in sub.input_tensors]
                             + [layer.dtype for layer in sub.layers]]},
        "batch_size": str(batch),
        "num_subgraph_inputs": str(len(sub.input_tensors)),
        "num_subgraph_outputs": str(len(sub.heads)),
    }
    return doc, consts
