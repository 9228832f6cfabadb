"""Input shapes: the model's declared ones, fixed by the user's where given.

A given shape must have the input's rank (``InputRankError`` otherwise) and may replace any dim,
dynamic or static: a model exported at ``[10, 3, 32, 32]`` can be converted for
``[1, 3, 320, 320]``, as onnxsim's ``--overwrite-input-shape`` and Polygraphy's
``--input-shapes`` allow. Replacing a static dim is said once (``InputShapeOverrideWarning``)
and recorded (``model.input_shape_overrides`` in the manifest).
"""
from __future__ import annotations

import numbers
import os
import sys
import warnings
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Union

import onnx

from mrvl_convert.errors import (InputRankError, InputShapeOverrideWarning, ShapeError,
                                 UnsupportedModelError)

Dim = Union[int, str, None]
# Every InputShapeOverrideWarning starts so: a ``-W ignore:<prefix>`` filter can name it without
# importing this package (as multiprocessing hands -W options to worker interpreters).
OVERRIDE_PREFIX = "input shape override"


@dataclass
class FixedInputs:
    shapes: Dict[str, List[int]] = field(default_factory=dict)   # every input -> its shape
    # input -> {"declared": [...], "used": [...]}, only inputs whose static dims were replaced
    overrides: Dict[str, Dict[str, List[Dim]]] = field(default_factory=dict)


def fix_input_shapes(proto: onnx.ModelProto, shapes: Mapping[str, Sequence[int]],
                     label: str) -> FixedInputs:
    """Write a static shape on every graph input of ``proto`` (the given one, else the declared
    one, which must then be static); a ShapeError naming the input otherwise."""
    inputs = {i.name: i for i in proto.graph.input}
    for name in shapes:
        if name not in inputs:
            raise ShapeError(f"--input-shape names {name!r}, which is not a graph input "
                             f"(inputs: {', '.join(sorted(inputs)) or 'none'})", model=label)
    fixed = FixedInputs()
    for name, value in inputs.items():
        if not value.type.HasField("tensor_type"):
            raise UnsupportedModelError("is not a tensor input", model=label, tensor=name)
        wanted = shapes.get(name)
        if wanted is not None:
            fixed.shapes[name] = _given(value, shape_override(name, wanted, label), label, fixed)
        else:
            fixed.shapes[name] = _declared(value, label)
    return fixed


def _given(value: onnx.ValueInfoProto, wanted: List[int], label: str,
           fixed: FixedInputs) -> List[int]:
    name, tensor_type = value.name, value.type.tensor_type
    dims = tensor_type.shape.dim
    if tensor_type.HasField("shape") and len(dims) != len(wanted):
        raise InputRankError(
            f"the input has rank {len(dims)} but the given shape {wanted} has rank "
            f"{len(wanted)} (declared {_declared_text(dims)}); give one size per dim",
            model=label, tensor=name)
    if any(d <= 0 for d in wanted):
        raise ShapeError(f"given shape {wanted} must have positive dims", model=label,
                         tensor=name)
    if any(static_dim(d) and d.dim_value != size for d, size in zip(dims, wanted)):
        declared = [_dim(d) for d in dims]
        fixed.overrides[name] = {"declared": declared, "used": list(wanted)}
        warnings.warn(f"{OVERRIDE_PREFIX}: model {label}: input {name!r} is declared {declared}; "
                      f"converting for the given shape {wanted}",
                      InputShapeOverrideWarning, stacklevel=_outside_package())
    tensor_type.shape.Clear()
    for size in wanted:
        tensor_type.shape.dim.add().dim_value = size
    return list(wanted)


def check_channels(proto: onnx.ModelProto, label: str, overridden: Sequence[str]) -> None:
    """ONNX shape inference does not compare a Conv's input channels with its weight's: after
    a given shape replaced static dims, a mismatch there is the given shape's (a ShapeError here,
    not an artifact whose CPU stage onnxruntime refuses)."""
    if not overridden:
        return
    shapes = {v.name: [d.dim_value if d.HasField("dim_value") else None
                       for d in v.type.tensor_type.shape.dim]
              for v in list(proto.graph.input) + list(proto.graph.value_info)}
    weights = {t.name: list(t.dims) for t in proto.graph.initializer}
    for node in proto.graph.node:
        if node.op_type != "Conv" or len(node.input) < 2 or node.input[1] not in weights:
            continue
        group = next((a.i for a in node.attribute if a.name == "group"), 1)
        given, weight = shapes.get(node.input[0]), weights[node.input[1]]
        if given and len(given) > 1 and given[1] and given[1] != weight[1] * group:
            raise ShapeError(
                f"the given shape of input(s) {', '.join(map(repr, overridden))} replaces static "
                f"dims, and the model does not fit it: node {node.name!r} gets {given[1]} "
                f"channels where its weight takes {weight[1] * group}", model=label,
                node=node.name, tensor=node.input[0])


def _outside_package() -> int:
    """The ``stacklevel`` of the first caller outside mrvl_convert: the warning points at the
    user's ``convert(...)`` line, however deep in the package it is raised."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _declared(value: onnx.ValueInfoProto, label: str) -> List[int]:
    name, tensor_type = value.name, value.type.tensor_type
    if not tensor_type.HasField("shape"):
        raise ShapeError("has no shape; give one with --input-shape "
                         f"{name}:1,3,224,224 (shapes={{{name!r}: [...]}})", model=label,
                         tensor=name)
    dims = tensor_type.shape.dim
    for axis, dim in enumerate(dims):
        if not static_dim(dim):
            raise ShapeError(f"{_unsized(axis, dim)}; fix it with {_shape_hint(name, dims)}",
                             model=label, tensor=name)
    return [d.dim_value for d in dims]


def _dim(dim: onnx.TensorShapeProto.Dimension) -> Dim:
    if dim.HasField("dim_value"):
        return dim.dim_value
    return dim.dim_param or None


def _declared_text(dims: Sequence[onnx.TensorShapeProto.Dimension]) -> str:
    return "[" + ", ".join(str(_dim(d)) if _dim(d) is not None else "?" for d in dims) + "]"


def _unsized(axis: int, dim: onnx.TensorShapeProto.Dimension) -> str:
    """Why a dim has no size: a 0 is named as written (an empty tensor, or some exporters'
    unknown), not called dynamic."""
    if dim.HasField("dim_value") and dim.dim_value == 0:
        return (f"has dim {axis} of size 0 (an empty tensor, or an unknown size some exporters "
                "write as 0)")
    symbol = dim.dim_param or (str(dim.dim_value) if dim.HasField("dim_value") else "?")
    return f"has dynamic dim {axis} ({symbol!r})"


def _shape_hint(name: str, dims: Sequence[onnx.TensorShapeProto.Dimension]) -> str:
    """``--input-shape x:1,3,320,320 (shapes={'x': [1, 3, 320, 320]})`` when only the batch is
    unknown (batch 1); otherwise the unknown sizes as ``<symbol>`` placeholders."""
    parts = [str(d.dim_value) if static_dim(d)
             else "1" if axis == 0 else f"<{d.dim_param or 'size'}>"
             for axis, d in enumerate(dims)]
    if all(p.isdigit() for p in parts):
        return (f"--input-shape {name}:{','.join(parts)} "
                f"(shapes={{{name!r}: [{', '.join(parts)}]}})")
    return (f"--input-shape {name}:{','.join(parts)}, each <...> replaced by a size "
            f"(shapes={{{name!r}: [...]}})")


def shape_override(name: str, dims: object, label: Optional[str] = None) -> List[int]:
    """A user-given shape (``shapes={name: dims}``) as a list of ints, or a ShapeError naming the
    input: no strings, no floats (1.5 is not truncated to 1), no bools."""
    ok = isinstance(dims, (list, tuple)) or (hasattr(dims, "__len__") and hasattr(dims, "dtype"))
    values = list(dims) if ok else []
    if not ok or not all(isinstance(d, numbers.Integral) and not isinstance(d, bool)
                         for d in values):
        raise ShapeError(f"the given shape {dims!r} must be a list of whole numbers, e.g. "
                         "[1, 3, 224, 224]", model=label, tensor=name)
    return [int(d) for d in values]


def static_dim(dim: onnx.TensorShapeProto.Dimension) -> bool:
    """A dim with a size. Exporters write a dynamic dim as a dim_param, or (Paddle) as
    ``dim_value: -1``; both are dynamic, and 0 is no size either."""
    return dim.HasField("dim_value") and dim.dim_value > 0
