"""Input values: an input pinned to one value for the conversion (``values={"sr": 16000}``, CLI
``--input-value sr=16000``).

Users of a model with a control input (a sample rate, a mode flag) fix it: what it decides is then
constant, and folding takes it away (an ``If`` whose condition it decides becomes the branch it
chooses; graphsurgeon's ``flatten_subgraphs``). The artifact still takes the input, as the
original model does, so the same feeds run both; it computes what the model computes for the
pinned value only (the manifest records it: ``options.values``).

Requires: a loaded model whose inputs have static shapes (``input_shapes.py``).
Ensures: every pinned value is an array of its input's exact element type and shape, equal to
the value given (no rounding, no wrapping: 16000.5 for an int64 input, 300 for a uint8 one, or
True for a float one is an OptionError naming the input); an unknown name, a value that is not a
number or a list of numbers, or one of the wrong shape is an OptionError naming the input.
``pin_inputs`` replaces every read of a pinned input, nested subgraphs' reads included, by a
constant of its value (named ``<input>_value``, or with a number where the model has that
name); the graph input stays.
"""
from __future__ import annotations

import numbers
from typing import Any, Dict, List, Mapping, Optional

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import subgraphs
from mrvl_convert.errors import OptionError

Values = Mapping[str, Any]


def check_values(values: object) -> Dict[str, Any]:
    """``values`` as given to ``convert``: a mapping of input names to a number or a (nested)
    list of numbers; returned as a plain dict (numpy arrays as lists), before the model is
    read."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise OptionError(f"values must be a dict of input name -> value, got "
                          f"{type(values).__name__}")
    checked: Dict[str, Any] = {}
    for name, value in values.items():
        if not isinstance(name, str) or not name:
            raise OptionError(f"values: an input name must be a non-empty string, got {name!r}")
        if isinstance(value, np.ndarray) or isinstance(value, np.generic):
            value = value.tolist()
        if not _numeric(value):
            raise OptionError(f"the value {value!r} given for it must be a number or a list of "
                              "numbers", tensor=name)
        checked[name] = value
    return checked


def input_values(proto: onnx.ModelProto, values: Values, shapes: Mapping[str, List[int]],
                 label: str) -> Dict[str, np.ndarray]:
    """Each pinned value as an array of its input's element type and (fixed) shape."""
    inputs = {i.name: i for i in proto.graph.input}
    arrays: Dict[str, np.ndarray] = {}
    for name, value in values.items():
        if name not in inputs:
            raise OptionError(f"--input-value names {name!r}, which is not a graph input "
                              f"(inputs: {', '.join(sorted(inputs)) or 'none'})", model=label,
                              tensor=name)
        elem = inputs[name].type.tensor_type.elem_type
        arrays[name] = _as_input(name, value, elem, shapes.get(name, []), label)
    return arrays


def pin_inputs(graph: gs.Graph, values: Mapping[str, np.ndarray]) -> List[str]:
    """Every read of each input of ``values``, in ``graph`` and its nested subgraphs, reads a
    constant ``<input>_value`` instead; returns the inputs pinned."""
    inputs = {t.name: t for t in graph.inputs}
    taken = set(graph.tensors())
    pinned = []
    for name, value in values.items():
        tensor = inputs.get(name)
        if tensor is None:
            continue
        label, k = f"{name}_value", 0
        while label in taken:  # a name of the model's own
            k += 1
            label = f"{name}_value_{k}"
        taken.add(label)
        # In the input's dtype: a float16 input is float32 in the loaded model (float16_model.py)
        constant = gs.Constant(label, np.array(value, dtype=tensor.dtype or None))
        for node in _all_nodes(graph):
            for i, read in enumerate(node.inputs):
                if read is tensor:
                    node.inputs[i] = constant
        pinned.append(name)
    return pinned


def describe(values: Mapping[str, np.ndarray]) -> str:
    """``sr=16000, mode=[1, 0]``: how reasons name the pinned inputs."""
    return ", ".join(f"{k}={np.asarray(v).tolist()}" for k, v in sorted(values.items()))


def _all_nodes(graph: gs.Graph) -> List[gs.Node]:
    nodes: List[gs.Node] = []
    for node in graph.nodes:
        nodes.append(node)
        for sub in subgraphs(node):
            nodes.extend(_all_nodes(sub))
    return nodes


def _numeric(value: object) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_numeric(v) for v in value)
    return isinstance(value, (numbers.Real, bool))


def _as_input(name: str, value: Any, elem: int, shape: List[int],
              label: str) -> np.ndarray:
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))
    except (KeyError, TypeError, ValueError):
        raise OptionError("the input's element type has no numpy dtype; it cannot be pinned",
                          model=label, tensor=name) from None
    try:
        given = np.asarray(value)
    except ValueError:  # ragged lists
        raise OptionError(f"the value {value!r} given for it must be numbers of a regular shape",
                          model=label, tensor=name) from None
    if given.dtype == object or given.dtype.kind not in "biuf":  # ints past 64 bits
        raise OptionError(f"the input is {dtype.name}: {value!r} is not a value of it",
                          model=label, tensor=name)
    array = _exact(name, given, dtype, label)
    if list(array.shape) != list(shape):
        if array.size == int(np.prod(shape, dtype=np.int64)) and array.size == 1:
            array = array.reshape(shape)
        else:
            raise OptionError(f"the value given has shape {list(array.shape)}; the input's shape "
                              f"is {list(shape)}", model=label, tensor=name)
    return array


def _exact(name: str, given: np.ndarray, dtype: np.dtype, label: str) -> np.ndarray:
    """``given`` as ``dtype``, or an OptionError when that changes a value (a float input
    rounds to its precision, as a feed of it would)."""
    if (given.dtype.kind == "b") != (dtype.kind == "b"):
        kind = "true/false" if dtype.kind == "b" else "numbers"
        raise OptionError(f"the input is {dtype.name}: give {kind}, not {given.tolist()!r}",
                          model=label, tensor=name)
    with np.errstate(all="ignore"):
        array = given.astype(dtype)
    if dtype.kind in "iu" and array.tolist() != given.tolist():
        raise OptionError(f"the input is {dtype.name}: {given.tolist()!r} is not a value of it "
                          "(a whole number in its range)", model=label, tensor=name)
    if dtype.kind == "f" and not np.array_equal(np.isfinite(array), np.isfinite(given)):
        raise OptionError(f"the input is {dtype.name}: {given.tolist()!r} is out of its range",
                          model=label, tensor=name)
    return array
