"""Small read-only helpers over graphsurgeon nodes and tensors, shared by rules and lowering."""
from __future__ import annotations

import functools
from typing import Any, Collection, Dict, List, Optional, Sequence, Set

import numpy as np
import onnx_graphsurgeon as gs


def is_const(tensor: Optional[gs.Tensor]) -> bool:
    return isinstance(tensor, gs.Constant)


def const_value(tensor: gs.Tensor) -> np.ndarray:
    return np.asarray(tensor.values)


def present(node: gs.Node, index: int) -> Optional[gs.Tensor]:
    """The node's input at ``index``, or None when it is absent (short list or empty name)."""
    if index >= len(node.inputs):
        return None
    tensor = node.inputs[index]
    if isinstance(tensor, gs.Variable) and not tensor.name:
        return None
    return tensor


def static_shape(tensor: gs.Tensor) -> Optional[List[int]]:
    shape = tensor.shape
    if shape is None:
        return None
    dims = []
    for d in shape:  # one loop, not a scan then a copy: called for every tensor, many times
        if not isinstance(d, (int, np.integer)) or d < 0:
            return None
        dims.append(int(d))
    return dims


def dtype_name(tensor: gs.Tensor) -> str:
    dtype = tensor.dtype
    if dtype is None:
        return "unknown"
    try:
        return _dtype_name(dtype) if _hashable(dtype) else np.dtype(dtype).name
    except TypeError:
        return str(dtype)


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


@functools.lru_cache(maxsize=64)
def _dtype_name(dtype: Any) -> str:
    """``np.dtype(dtype).name``, once per dtype (numpy makes the name in Python each time)."""
    return np.dtype(dtype).name


def activation_inputs(node: gs.Node) -> List[gs.Tensor]:
    return [t for t in node.inputs if isinstance(t, gs.Variable) and t.name]


def attr(node: gs.Node, name: str, default: Any = None) -> Any:
    value = node.attrs.get(name, default)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, bytes):
        return value.decode()
    return value


def pad_amounts(node: gs.Node) -> Optional[List[int]]:
    """Pad's `pads` (attribute before opset 11, input after), or None when not constant."""
    if "pads" in node.attrs:
        return [int(p) for p in attr(node, "pads")]
    pads = present(node, 1)
    if pads is None or not is_const(pads):
        return None
    return [int(p) for p in const_value(pads).reshape(-1)]


def pad_value(node: gs.Node) -> Optional[float]:
    if "value" in node.attrs:
        return float(attr(node, "value"))
    value = present(node, 2)
    if value is None:
        return 0.0
    if not is_const(value):
        return None
    return float(const_value(value).reshape(-1)[0]) if const_value(value).size else 0.0


def float_activation_issue(x: gs.Tensor, y: gs.Tensor) -> Optional[str]:
    """Why a node reading ``x`` and writing ``y`` is no float32 layer a frontend form may
    rewrite into float layers, or None: ``x`` a constant or not float32, or the node in an
    int8 (QDQ) region, where the QDQ model's steps are the reference."""
    if is_const(x) or x.dtype is None or np.dtype(x.dtype) != np.float32:
        return f"the input is not a float32 activation ({x.dtype})"
    if any(t.op == "DequantizeLinear" for t in x.inputs) \
            or any(t.op == "QuantizeLinear" for t in y.outputs):
        return "it is in an int8 (QDQ) region, where its float layers would not give the " \
               "int8 steps the QDQ model computes"
    return None


def squeeze_axes(node: gs.Node) -> Optional[List[int]]:
    if "axes" in node.attrs:
        return [int(a) for a in attr(node, "axes")]
    axes = present(node, 1)
    if axes is None:
        return []
    if not is_const(axes):
        return None
    return [int(a) for a in const_value(axes).reshape(-1)]


def conv_pads(node: gs.Node, in_shape: Sequence[int], kernel: Sequence[int],
              strides: Sequence[int], dilations: Sequence[int], out_shape: Sequence[int]) -> List[int]:
    """Explicit [top, left, bottom, right] pads for Conv / pools, resolving auto_pad."""
    auto_pad = attr(node, "auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", "", None):
        pads = attr(node, "pads", [0, 0, 0, 0])
        return [int(p) for p in pads]
    if auto_pad == "VALID":
        return [0, 0, 0, 0]
    begins, ends = [], []
    for axis in range(2):
        size, k, s, d, out = in_shape[2 + axis], kernel[axis], strides[axis], dilations[axis], \
            out_shape[2 + axis]
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        begins.append(big if auto_pad == "SAME_LOWER" else small)
        ends.append(small if auto_pad == "SAME_LOWER" else big)
    return [begins[0], begins[1], ends[0], ends[1]]


def subgraphs(node: gs.Node) -> List[gs.Graph]:
    """The graphs in a node's attributes (If branches, Loop and Scan bodies)."""
    found: List[gs.Graph] = []
    for value in node.attrs.values():
        items = value if isinstance(value, (list, tuple)) else [value]
        found.extend(v for v in items if isinstance(v, gs.Graph))
    return found


def local_names(graph: gs.Graph) -> Set[str]:
    """The names of ``graph._local_tensors()`` (what its nodes write, its inputs, its
    constants), without building graphsurgeon's checked map of every tensor first; an omitted
    optional tensor's "" is not one (graphsurgeon's walks take it without a name test)."""
    names = {t.name for node in graph.nodes for t in node.outputs}
    names.update(t.name for t in graph.inputs)
    names.update(t.name for t in graph.outputs if isinstance(t, gs.Constant))
    names.update(t.name for node in graph.nodes for t in node.inputs if isinstance(t, gs.Constant))
    names.discard("")
    return names


def outer_inputs(node: gs.Node) -> List[gs.Tensor]:
    """Tensors of the enclosing scope that the node's subgraphs read (recursively): inputs of the
    node as much as its listed ones, though ONNX does not list them."""
    found: Dict[str, gs.Tensor] = {}
    for sub in subgraphs(node):
        local = {t.name for t in sub.inputs}
        for inner in sub.nodes:
            local.update(t.name for t in inner.outputs)
        for inner in sub.nodes:
            for tensor in list(inner.inputs) + outer_inputs(inner):
                if tensor.name and tensor.name not in local and not isinstance(tensor, gs.Constant):
                    found.setdefault(tensor.name, tensor)
    return list(found.values())


def all_inputs(node: gs.Node) -> List[gs.Tensor]:
    """The node's listed inputs, then the outer-scope tensors its subgraphs read."""
    return list(node.inputs) + outer_inputs(node)


def nested_owners(graph: gs.Graph) -> Dict[int, gs.Node]:
    """id(node inside a subgraph, at any depth) -> the top-level node that holds it: a tensor's
    consumers list such inner nodes, which belong to their owner's stage."""
    owners: Dict[int, gs.Node] = {}
    for node in graph.nodes:
        stack = subgraphs(node)
        while stack:
            sub = stack.pop()
            for inner in sub.nodes:
                owners[id(inner)] = node
                stack.extend(subgraphs(inner))
    return owners


def scale_of(node: gs.Node) -> float:
    """The one float32 scale of a symmetric per-tensor Q/DQ node (``qdq_issue`` passed)."""
    return float(np.float32(const_value(node.inputs[1]).reshape(-1)[0]))


def producer(tensor: gs.Tensor) -> Optional[gs.Node]:
    return tensor.inputs[0] if tensor.inputs else None


def same_value(a: gs.Tensor, b: gs.Tensor) -> bool:
    """One value: the same tensor, or two DequantizeLinear copies of one quantized tensor with
    the same scale, zero point and axis. canonicalize gives each reader of a DequantizeLinear
    its own copy (``frontend/qdq.py``), so a form reading x twice (a GELU's x / sqrt 2 and its
    gate, a norm's mean and x * s) reads two copies in a QDQ model: they compute equal floats."""
    if a is b:
        return True
    da, db = producer(a), producer(b)
    if da is None or db is None or not da.op == db.op == "DequantizeLinear" \
            or da.attrs != db.attrs or len(da.inputs) != len(db.inputs):
        return False
    return all(x is y or (is_const(x) and is_const(y) and np.array_equal(
        const_value(x), const_value(y)) and const_value(x).dtype == const_value(y).dtype)
        for x, y in zip(da.inputs, db.inputs))


def only_reader(tensor: gs.Tensor, outputs: Collection[str]) -> Optional[gs.Node]:
    """The one node reading ``tensor``, or None (several, none, or ``tensor`` is named in
    ``outputs``: a model output a rewrite must keep)."""
    if tensor.name in outputs or len(tensor.outputs) != 1:
        return None
    return tensor.outputs[0]


def sole_consumer(node: gs.Node) -> Optional[gs.Node]:
    """The one node reading ``node``'s first output, or None when none or several do."""
    consumers = node.outputs[0].outputs
    return consumers[0] if len(consumers) == 1 else None


def reduce_axes(node: gs.Node) -> Optional[List[int]]:
    """The node's reduced axes, normalised and sorted (all axes when none are given), or None
    when they are computed at run time."""
    rank = len(static_shape(node.inputs[0]) or [])
    if "axes" in node.attrs:
        axes = [int(a) for a in attr(node, "axes")]
    else:
        tensor = present(node, 1)
        if tensor is not None and not is_const(tensor):
            return None
        axes = [] if tensor is None else [int(a) for a in const_value(tensor).reshape(-1)]
    if not axes and not int(attr(node, "noop_with_empty_axes", 0)):
        axes = list(range(rank))
    return sorted({a % rank for a in axes}) if rank else None


def softmax_axis(node: gs.Node, rank: int, opset: Optional[int]) -> int:
    """A Softmax's axis, normalised to 0 <= axis < rank. Its default is 1 before opset 13 (and
    the op then runs over all axes from there on, flattened), -1 from opset 13 on."""
    opset = int(opset or 13)
    axis = int(attr(node, "axis", -1 if opset >= 13 else 1))
    return axis + rank if axis < 0 else axis
