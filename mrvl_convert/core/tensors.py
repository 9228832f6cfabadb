"""Every TensorProto a model holds, its external data read from inside the model's directory, and
its stored size checked against its shape.

onnx's own helpers resolve a Constant node's external data against the working directory when
the model came as a ModelProto, and raise ValueError/OSError of several kinds on a bad location;
here every tensor (initializers, Constant values, any tensor attribute, subgraph and function
bodies) goes through one rule: ``_paths.confined``, and one error family.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Dict, Iterator, Optional, Tuple

import numpy as np
import onnx
from onnx import TensorProto

from mrvl_convert.core.paths import confined
from mrvl_convert.errors import ModelLoadError

# (tensor, the node holding it as an attribute or None for an initializer)
Located = Tuple[TensorProto, Optional[str]]

# Typed fields of a TensorProto and how many entries one element takes in them.
_TYPED_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data",
                 "uint64_data")
_COMPLEX = (TensorProto.COMPLEX64, TensorProto.COMPLEX128)
# Two elements per byte (or per int32 entry): not worth a special count here.
_PACKED = tuple(getattr(TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2")
                if hasattr(TensorProto, n))


def all_tensors(proto: onnx.ModelProto) -> Iterator[Located]:
    """Initializers and tensor attributes of the graph, its subgraphs and its local functions."""
    yield from _graph_tensors(proto.graph)
    for function in proto.functions:
        for node in function.node:
            yield from _node_tensors(node)


def _graph_tensors(graph: onnx.GraphProto) -> Iterator[Located]:
    for tensor in graph.initializer:
        yield tensor, None
    for sparse in graph.sparse_initializer:
        yield sparse.values, None
        yield sparse.indices, None
    for node in graph.node:
        yield from _node_tensors(node)


def _node_tensors(node: onnx.NodeProto) -> Iterator[Located]:
    for attribute in node.attribute:
        if attribute.HasField("t"):
            yield attribute.t, node.name
        for tensor in attribute.tensors:
            yield tensor, node.name
        sparse = list(attribute.sparse_tensors)
        if attribute.HasField("sparse_tensor"):
            sparse.append(attribute.sparse_tensor)
        for item in sparse:
            yield item.values, node.name
            yield item.indices, node.name
        graphs = list(attribute.graphs) + ([attribute.g] if attribute.HasField("g") else [])
        for sub in graphs:
            yield from _graph_tensors(sub)


def is_external(tensor: TensorProto) -> bool:
    return tensor.data_location == TensorProto.EXTERNAL


def _where(tensor: TensorProto, node: Optional[str], label: str) -> Dict[str, str]:
    where = {"model": label, "tensor": tensor.name or "<unnamed>"}
    if node:
        where["node"] = node
    return where


def external_files(proto: onnx.ModelProto, base: Optional[Path], label: str) -> int:
    """Check every externally stored tensor's file (inside ``base``, holding the bytes asked
    for) without reading it; returns how many there are. ``base`` None (a ModelProto in memory)
    has no directory to read from: external data there is an error, never a read from the CWD."""
    refs = [_external_ref(t, node, base, label) for t, node in all_tensors(proto) if is_external(t)]
    return len(refs)


def _external_ref(tensor: TensorProto, node: Optional[str], base: Optional[Path],
                  label: str) -> Tuple[Path, int, Optional[int]]:
    """(file inside ``base``, offset, length) of one external tensor, checked."""
    where = _where(tensor, node, label)
    if base is None:
        raise ModelLoadError("keeps its data in an external file, but the model was given "
                             "as a ModelProto with no directory: pass the model's path", **where)
    info = {e.key: e.value for e in tensor.external_data}
    target = confined(base, info.get("location", ""), what="external data location",
                      error=ModelLoadError, **where)
    if not target.is_file():
        raise ModelLoadError(f"external data file {info.get('location')!r} is missing "
                             f"(looked in {base})", **where)
    offset = _number(info.get("offset", "0"), "offset", where)
    length = _number(info["length"], "length", where) if "length" in info else None
    size = target.stat().st_size
    if offset > size or (length is not None and offset + length > size):
        raise ModelLoadError(f"external data {info.get('location')!r} holds {size} bytes, "
                             f"fewer than offset {offset} + length {length} asks for", **where)
    return target, offset, length


def _number(text: str, key: str, where: Dict[str, str]) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 20:
        raise ModelLoadError(f"external data {key} {text[:40]!r} is not a byte count", **where)
    return int(text)


def load_external(proto: onnx.ModelProto, base: Optional[Path], label: str) -> None:
    """Read every external tensor's bytes into raw_data (only from checked files)."""
    for tensor, node in all_tensors(proto):
        if not is_external(tensor):
            continue
        target, offset, length = _external_ref(tensor, node, base, label)
        try:
            with open(target, "rb") as handle:
                handle.seek(offset)
                data = handle.read() if length is None else handle.read(length)
        except OSError as exc:
            raise ModelLoadError(f"cannot read external data: {exc.strerror or exc}",
                                 **_where(tensor, node, label)) from None
        tensor.raw_data = data
        tensor.data_location = TensorProto.DEFAULT
        del tensor.external_data[:]


def check_sizes(proto: onnx.ModelProto, label: str) -> None:
    """Each tensor's stored data holds exactly the elements its dims say (numpy would raise a
    bare ValueError on reshape, or read a prefix silently)."""
    for tensor, node in all_tensors(proto):
        if is_external(tensor):
            continue
        if any(d < 0 for d in tensor.dims):
            raise ModelLoadError(f"has negative dims {list(tensor.dims)}",
                                 **_where(tensor, node, label))
        count = math.prod(tensor.dims)
        stored, unit = _stored(tensor)
        if stored is None:
            continue
        if stored != count * unit:
            raise ModelLoadError(
                f"stores {stored} {'bytes' if tensor.HasField('raw_data') else 'values'} but its "
                f"dims {list(tensor.dims)} need {count * unit}", **_where(tensor, node, label))


def _stored(tensor: TensorProto) -> Tuple[Optional[int], int]:
    """(amount stored, amount one element needs), or (None, 0) when it cannot be told."""
    if tensor.data_type in _PACKED:
        return None, 0
    if tensor.HasField("raw_data"):
        try:
            itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
        except (KeyError, TypeError, ValueError):
            return None, 0
        return len(tensor.raw_data), itemsize
    lengths = [len(getattr(tensor, f)) for f in _TYPED_FIELDS]
    return sum(lengths), (2 if tensor.data_type in _COMPLEX else 1)


def model_dir(path: Optional["str | os.PathLike[str]"]) -> Optional[Path]:
    return None if path is None else Path(path).parent.resolve()
