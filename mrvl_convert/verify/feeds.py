"""Verify inputs a user hands in: an .npz (or .npy) split into one feed per sample, read and
checked by ``core.arrays`` (bounded sizes, dtype, finite values, shape)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from mrvl_convert.core.arrays import check_samples, read_arrays
from mrvl_convert.errors import InputFeedError
from mrvl_convert.runtime.stages import DTYPES, TensorSpec

if TYPE_CHECKING:
    import onnx


def load_npz_feeds(path: str, specs: Sequence[TensorSpec], limit: Optional[int] = None,
                   warn: Optional[Callable[[str], None]] = None) -> List[Dict[str, np.ndarray]]:
    """Split the arrays of an .npz into per-sample feeds.

    An array named after an input is one sample if it has the input's shape, or a stack of
    samples if its trailing dimensions are the input's shape or (batch-1 inputs) the input's
    shape without the batch dimension. A model with one input may take its array from a file
    with any key, as long as exactly one array fits (e.g. ``images`` next to ``labels``).
    ``warn`` is told, in one line, of the arrays not used (``labels``).
    """
    return stacked_feeds(read_arrays(path, "verify inputs"), specs, path, limit, warn)


def stacked_feeds(arrays: Mapping[str, np.ndarray], specs: Sequence[TensorSpec], path: str,
                  limit: Optional[int] = None, warn: Optional[Callable[[str], None]] = None
                  ) -> List[Dict[str, np.ndarray]]:
    """``load_npz_feeds`` of arrays already read (``path`` names where they came from)."""
    stacks = {}
    picked: List[str] = []
    for spec in specs:
        if spec.name in arrays:
            stacks[spec.name] = _as_stack(arrays[spec.name], spec, path, spec.name)
        elif len(specs) == 1:
            fits = [k for k, a in arrays.items() if _fits(a, spec)]
            if len(fits) != 1:
                raise InputFeedError(f"{path}: no array named {spec.name!r} and {len(fits)} "
                                     f"arrays fit shape {list(spec.shape)}", tensor=spec.name)
            stacks[spec.name] = _as_stack(arrays[fits[0]], spec, path, fits[0])
            picked.append(fits[0])
        else:
            raise InputFeedError(f"{path}: no array named after this input", tensor=spec.name)
    used = {spec.name for spec in specs if spec.name in arrays} | set(picked)
    unused = sorted(set(arrays) - used)
    if unused and warn is not None:
        warn(f"warning: {path}: arrays {', '.join(map(repr, unused))} are named after no model "
             "input; not used")
    counts = {len(s) for s in stacks.values()}
    if len(counts) != 1:
        raise InputFeedError(f"{path}: the inputs hold different numbers of samples {counts}")
    count = min(counts.pop(), limit or 1 << 62)
    return [{name: stack[k] for name, stack in stacks.items()} for k in range(count)]


def _fits(array: np.ndarray, spec: TensorSpec) -> bool:
    shape = tuple(array.shape)
    return (shape == spec.shape or shape[1:] == spec.shape
            or (spec.shape[:1] == (1,) and shape[1:] == spec.shape[1:]))


def _as_stack(array: np.ndarray, spec: TensorSpec, path: str, key: str) -> List[np.ndarray]:
    dtype = DTYPES[spec.dtype][0]
    integer = np.dtype(dtype) if np.dtype(dtype).kind in "iub" else None
    check_samples(array, source=path, array_name=key, input_name=spec.name,
                  shape=spec.shape, integer=integer,
                  target=np.float32 if integer is not None else np.dtype(dtype))
    shape = tuple(array.shape)
    if shape == spec.shape:
        return [array.astype(dtype)]
    if shape[1:] == spec.shape:
        return [a.astype(dtype) for a in array]
    if spec.shape[:1] == (1,) and shape[1:] == spec.shape[1:]:
        return [array[k:k + 1].astype(dtype) for k in range(shape[0])]
    raise InputFeedError(f"{path}: array of shape {list(shape)} does not fit input shape "
                         f"{list(spec.shape)}", tensor=spec.name)


def model_feeds(path: str, proto: "onnx.ModelProto") -> Optional[List[Dict[str, np.ndarray]]]:
    """The samples of ``path`` (verify inputs) as feeds of ``proto``'s inputs (a loaded model:
    static shapes), or None when they do not fit it (verify then says why): what another
    quantizer's requantization cost is measured on at conversion (``foreign_cost.measure``)."""
    from onnx import helper
    inits = {i.name for i in proto.graph.initializer}
    specs = [TensorSpec(i.name, tuple(d.dim_value for d in i.type.tensor_type.shape.dim),
                        np.dtype(helper.tensor_dtype_to_np_dtype(
                            i.type.tensor_type.elem_type)).name)
             for i in proto.graph.input if i.name not in inits]
    try:
        return load_npz_feeds(path, specs)
    except InputFeedError:
        return None
