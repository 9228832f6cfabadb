"""The user's pinned input shapes (``--input-shape`` / ``shapes=``) on the float model the
quantizer calibrates, and the inputs' declarations given back to the QDQ model it writes.

Requires: a float model whose inputs ``shapes`` names (the frontend's ``fix_input_shapes``
rules: one positive size per dim). Ensures: ``pin`` writes those shapes on the inputs and
drops every inferred shape (they were the declared shape's: a Reshape of a dynamic batch that
shape inference sized 0 fails onnxruntime's augmented model), so calibration runs, and cuts
its samples, at the shapes the conversion uses (a ``[frames, bins]`` input pinned to
``[100, 80]`` takes 100 rows a feed, not 1); ``restore`` gives the QDQ model the inputs (and outputs) as the
source declared them, so the conversion pins (and records an override of a static dim) as it
does for a float model. No value changes: only shape declarations. ``whole_samples``: where a
pinned axis 0 was dynamic and is pinned above 1 (``[frames, bins]``: no batch axis), samples
stacked on that axis are grouped in whole samples on a new axis 0, so the calibration's
hold-out (``calibration_choice``) and its feeds take whole samples, never some of a sample's
frames.
"""
from __future__ import annotations

import warnings
from typing import Any, Dict, Mapping, Optional, Sequence

import numpy as np

import onnx

from mrvl_convert.errors import InputShapeOverrideWarning
from mrvl_convert.frontend.input_shapes import fix_input_shapes, static_dim


def pin(proto: onnx.ModelProto, shapes: Optional[Mapping[str, Sequence[int]]], label: str
        ) -> Dict[str, onnx.TypeProto]:
    """``shapes`` written on ``proto``'s inputs (in place), inferred shapes dropped; returns
    the inputs' and outputs' declared types to ``restore`` (empty when nothing is pinned)."""
    if not shapes:
        return {}
    declared = {t.name: _copy(t.type) for t in [*proto.graph.input, *proto.graph.output]}
    with warnings.catch_warnings():  # the conversion warns of an override, once
        warnings.simplefilter("ignore", InputShapeOverrideWarning)
        fix_input_shapes(proto, shapes, label)
    del proto.graph.value_info[:]
    for output in proto.graph.output:
        output.type.tensor_type.ClearField("shape")
    return declared


def restore(model: onnx.ModelProto, declared: Mapping[str, onnx.TypeProto]) -> onnx.ModelProto:
    """``model`` (the QDQ model) with the inputs and outputs named in ``declared`` typed as
    declared (an output without its shape fails onnx's full check)."""
    for tensor in [*model.graph.input, *model.graph.output]:
        if tensor.name in declared:
            tensor.type.CopyFrom(declared[tensor.name])
    if declared:
        del model.graph.value_info[:]
    return model


def _copy(kind: onnx.TypeProto) -> onnx.TypeProto:
    copy = onnx.TypeProto()
    copy.CopyFrom(kind)
    return copy


def unbatched(declared: Mapping[str, onnx.TypeProto],
              shapes: Optional[Mapping[str, Sequence[int]]]) -> Dict[str, int]:
    """Inputs whose axis 0 is no batch: declared dynamic, pinned above 1; -> the pinned size."""
    found = {}
    for name, kind in declared.items():
        dims = kind.tensor_type.shape.dim
        wanted = list((shapes or {}).get(name, ()))
        if dims and wanted and not static_dim(dims[0]) and wanted[0] > 1:
            found[name] = wanted[0]
    return found


def whole_samples(calibration: Mapping[str, Any], rows: Mapping[str, int]) -> Dict[str, Any]:
    """``calibration`` with each input of ``rows`` stacked on axis 0 (a whole number of
    samples of ``rows[name]`` rows) grouped as ``[samples, rows, ...]``; any other form is
    handed on as given (the feeds refuse or warn of it)."""
    grouped: Dict[str, Any] = dict(calibration)
    for name, count in rows.items():
        given = grouped.get(name)
        if given is None:
            continue
        array = np.asarray(given)
        if array.ndim >= 1 and array.shape[0] % count == 0 and array.shape[0] >= count:
            grouped[name] = array.reshape((array.shape[0] // count, count) + array.shape[1:])
    return grouped
