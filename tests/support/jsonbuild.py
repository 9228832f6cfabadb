"""Build Nodes-JSON + Constants-JSON pairs by hand (docs/FORMATS.md), for simulator tests.

Independent of the converter on purpose: these tests pin the simulator to the written contract.
"""
from __future__ import annotations

import base64
import json
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

LAYOUT_BY_RANK = {1: "C", 2: "NC", 3: "NCW", 4: "NCHW", 5: "NCDHW"}


def _strs(values: Sequence[Any]) -> List[str]:
    return [str(int(v)) if isinstance(v, (bool, int, np.integer)) else str(v) for v in values]


def const_entry(array: np.ndarray) -> Dict[str, Any]:
    array = np.ascontiguousarray(array, dtype="<f4")
    return {"shape": list(array.shape), "dtype": "float32",
            "min": "%.17g" % float(array.min(initial=0.0)),
            "max": "%.17g" % float(array.max(initial=0.0)),
            "data_base64": base64.b64encode(array.tobytes()).decode("ascii")}


class SubgraphBuilder:
    """Append input nodes and layers; ``docs()`` returns (nodes_json, consts_json)."""

    def __init__(self, symbol: str = "tvmgen_mrvl_main_0") -> None:
        self.symbol = symbol
        self.nodes: List[Dict[str, Any]] = []
        self.shapes: List[List[int]] = []
        self.consts: Dict[str, Dict[str, Any]] = {}
        self.arg_nodes: List[int] = []

    def input(self, name: str, shape: Sequence[int], layout: Optional[str] = None) -> int:
        shape = [int(d) for d in shape]
        self.nodes.append({"op": "input", "name": name, "inputs": [],
                           "input_id": [str(len(self.arg_nodes))],
                           "attrs": {"shape": [shape], "dtype": ["float32"],
                                     "layer_name": ["input"],
                                     "data_layout": [layout or LAYOUT_BY_RANK[len(shape)]]}})
        self.shapes.append(shape)
        self.arg_nodes.append(len(self.nodes) - 1)
        return len(self.nodes) - 1

    def layer(self, layer_name: str, inputs: Sequence[int], shape: Sequence[int],
              attrs: Optional[Dict[str, Any]] = None,
              consts: Optional[Dict[str, np.ndarray]] = None,
              source_nodes: Optional[Sequence[str]] = None) -> int:
        """``consts`` maps an attribute (``kernel_const_name``, ...) to its array; the constant
        is named ``<layer>_const_<i>`` in the order given (kernel 0, bias 1)."""
        index = len(self.nodes)
        k = sum(1 for n in self.nodes if n["op"] == "tvm_op")
        name = f"{self.symbol}_{k}"
        out = [int(d) for d in shape]
        first = self.shapes[inputs[0]] if inputs else []
        full = {"layer_name": [layer_name], "num_inputs": str(len(inputs) + len(consts or {})),
                "num_outputs": "1", "shape": [out], "dtype": ["float32"],
                "func_name": [f"n{k}_{layer_name}"],
                "data_layout_shape": _strs(first), "out_layout_shape": _strs(out),
                "source_nodes": list(source_nodes if source_nodes is not None else [f"onnx_{k}"]),
                "rule": ["test"]}
        for key, value in (attrs or {}).items():
            full[key] = _strs(value) if isinstance(value, (list, tuple)) else [str(value)]
        for i, (key, array) in enumerate((consts or {}).items()):
            const_name = f"{name}_const_{i}"
            self.consts[const_name] = const_entry(array)
            full[key] = [const_name]
        self.nodes.append({"op": "tvm_op", "name": name,
                           "inputs": [[i, 0, 0] for i in inputs], "attrs": full})
        self.shapes.append(out)
        return index

    def docs(self, heads: Sequence[int]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        nodes = {"symbol": self.symbol, "nodes": self.nodes, "arg_nodes": list(self.arg_nodes),
                 "heads": [[h, 0, 0] for h in heads],
                 "attrs": {"shape": ["list_shape", list(self.shapes)],
                           "dltype": ["list_str", ["float32"] * len(self.nodes)]},
                 "batch_size": str(self.shapes[self.arg_nodes[0]][0] if self.arg_nodes else 1),
                 "num_subgraph_inputs": str(len(self.arg_nodes)),
                 "num_subgraph_outputs": str(len(heads))}
        return nodes, self.consts

    def write(self, directory: str, heads: Sequence[int],
              stem: Optional[str] = None) -> Tuple[str, str]:
        stem = stem or self.symbol
        nodes, consts = self.docs(heads)
        return write_pair(directory, stem, nodes, consts)


def write_pair(directory: str, stem: str, nodes: Dict[str, Any],
               consts: Dict[str, Any]) -> Tuple[str, str]:
    os.makedirs(directory, exist_ok=True)
    nodes_path = os.path.join(directory, f"{stem}-nodes.json")
    consts_path = os.path.join(directory, f"{stem}-consts.json")
    with open(nodes_path, "w") as f:
        json.dump(nodes, f)
    with open(consts_path, "w") as f:
        json.dump(consts, f)
    return nodes_path, consts_path


# ------------------------------------------------------------ NCHW -> NHWC wrappers
def nhwc(shape: Sequence[int]) -> List[int]:
    n, c, h, w = shape
    return [n, h, w, c]


def to_nhwc(b: SubgraphBuilder, x: int) -> int:
    return b.layer("layout_transform", [x], nhwc(b.shapes[x]),
                   {"src_layout": ["NCHW"], "dst_layout": ["NHWC"]}, source_nodes=[])


def to_nchw(b: SubgraphBuilder, x: int) -> int:
    n, h, w, c = b.shapes[x]
    return b.layer("layout_transform", [x], [n, c, h, w],
                   {"src_layout": ["NHWC"], "dst_layout": ["NCHW"]}, source_nodes=[])


def conv2d(b: SubgraphBuilder, x: int, weight_oihw: np.ndarray, bias: Optional[np.ndarray],
           out_hw: Tuple[int, int], *, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1),
           group: int = 1, relu: bool = False, source_nodes=None) -> int:
    """A Conv2D layer from ONNX-style parameters (OIHW weights, pads [t, l, b, r])."""
    o, _, kh, kw = weight_oihw.shape
    n = b.shapes[x][0]
    attrs = {"strides": strides, "padding": pads, "dilation": dilations, "groups": [group],
             "channels": [o], "kernel_size": (kh, kw), "kernel_layout": ["OHWI"],
             "bias_layout": ["---O"], "composite_name": ["mrvl.conv2d_nhwc2nhwc"],
             "data_layout": ["NHWC"], "out_layout": ["NHWC"]}
    if relu:
        attrs["activation_type"] = ["relu"]
    # The bias is required (FORMATS.md); the emitter writes zeros for a Conv without one.
    bias = np.zeros(o, np.float32) if bias is None else bias
    consts = {"kernel_const_name": weight_oihw.transpose(0, 2, 3, 1),
              "bias_const_name": bias.reshape(1, 1, 1, o)}
    return b.layer("Conv2D", [x], [n, out_hw[0], out_hw[1], o], attrs, consts, source_nodes)


def fc(b: SubgraphBuilder, x: int, weight_oi: np.ndarray, bias: Optional[np.ndarray],
       relu: bool = False, source_nodes=None) -> int:
    attrs = {"kernel_layout": ["OI"], "bias_layout": ["-O"], "data_layout": ["NC"],
             "out_layout": ["NC"]}
    if relu:
        attrs["activation_type"] = ["relu"]
    bias = np.zeros(weight_oi.shape[0], np.float32) if bias is None else bias
    consts = {"kernel_const_name": weight_oi, "bias_const_name": bias.reshape(1, -1)}
    return b.layer("FC", [x], [b.shapes[x][0], weight_oi.shape[0]], attrs, consts, source_nodes)


def pool(b: SubgraphBuilder, x: int, layer_name: str, out_hw: Tuple[int, int], kernel, *,
         strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), ceil_mode=False,
         count_include_pad=False) -> int:
    n, _, _, c = b.shapes[x]
    attrs = {"pool_size": kernel, "kernel_layout_shape": kernel, "strides": strides,
             "padding": pads, "dilation": dilations, "ceil_mode": [int(ceil_mode)],
             "data_layout": ["NHWC"], "out_layout": ["NHWC"]}
    if layer_name == "Avgpool2D":
        attrs["count_include_pad"] = [int(count_include_pad)]
    return b.layer(layer_name, [x], [n, out_hw[0], out_hw[1], c], attrs)
