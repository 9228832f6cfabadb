"""Marvell's JSON input and output files, as mlsim and the device read and write them.

Layouts (MarvellEmbeddedProcessors/MarvellMLTools: ``utils/compare_json.py`` reads every key of
an output file and flattens its value; ``scripts/bin2json.py`` writes ``{"outputs": [[...]]}``):

- ``<model>-input.json``: ``{"inputs": [[flat values], ...]}``, one flat list per model input in
  input order, the input's float values in NCHW (C) order;
- ``<model>-output.json``: ``{"<output name>": [[flat values]], ...}``. A file with the single
  key ``outputs`` (bin2json's) is read as the model's only output.

Reading is bounded before anything is allocated: the file's size against the element count the
model's shapes allow, JSON nesting depth and integer length (``core.artifact.read_json``), and
the number of values of each list against its tensor's shape; values must be finite numbers.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Dict, List, Mapping, Sequence

import numpy as np

from mrvl_convert.core.artifact import read_json
from mrvl_convert.errors import ArtifactError, InputFeedError
from mrvl_convert.runtime.stages import DTYPES, TensorSpec

# A JSON number of a float32 value is at most ~16 characters; allow digits to spare.
BYTES_PER_VALUE = 40
SINGLE_OUTPUT_KEY = "outputs"


def read_input_json(path: "str | os.PathLike[str]",
                    specs: Sequence[TensorSpec]) -> Dict[str, np.ndarray]:
    """One feed (input name -> array of the input's shape) from a Marvell ``-input.json``."""
    doc = _read(path, specs, "input file")
    lists = doc.get("inputs") if isinstance(doc, dict) else None
    if not isinstance(lists, list):
        raise InputFeedError(f"{path}: expected an object with an \"inputs\" list (one flat "
                             f"list per model input)")
    if len(lists) != len(specs):
        raise InputFeedError(f"{path}: {len(lists)} input lists, the model has {len(specs)} "
                             f"inputs ({', '.join(s.name for s in specs)})")
    return {spec.name: _array(values, spec, path) for spec, values in zip(specs, lists)}


def read_output_json(path: "str | os.PathLike[str]",
                     specs: Sequence[TensorSpec]) -> Dict[str, np.ndarray]:
    """Output name -> array of the output's shape, from a Marvell ``-output.json``."""
    doc = _read(path, specs, "output file")
    if not isinstance(doc, dict):
        raise InputFeedError(f"{path}: expected an object of output name -> values")
    if len(specs) == 1 and set(doc) == {SINGLE_OUTPUT_KEY} and specs[0].name not in doc:
        doc = {specs[0].name: doc[SINGLE_OUTPUT_KEY]}
    names = [s.name for s in specs]
    unknown = sorted(set(doc) - set(names))
    if unknown:
        raise InputFeedError(f"{path}: {', '.join(map(repr, unknown))} is not an output of the "
                             f"model (outputs: {', '.join(names)})")
    return {spec.name: _array(doc[spec.name], spec, path) for spec in specs if spec.name in doc}


def write_output_json(path: "str | os.PathLike[str]", outputs: Mapping[str, Any]) -> None:
    """Write outputs (name -> array, e.g. ``HybridSession`` results) as Marvell's
    ``-output.json``: each output one flat float list, wrapped in a list."""
    doc = {name: [np.asarray(value, dtype=np.float64).ravel().tolist()]
           for name, value in outputs.items()}
    try:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(doc, handle)
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot write the output file: "
                            f"{exc.strerror or exc}") from None


def _read(path: "str | os.PathLike[str]", specs: Sequence[TensorSpec], what: str) -> Any:
    elements = sum(_count(s) for s in specs)
    try:
        return read_json(path, what, max_bytes=4096 + BYTES_PER_VALUE * elements)
    except ArtifactError as exc:
        raise InputFeedError(str(exc)) from None


def _count(spec: TensorSpec) -> int:
    return int(np.prod(spec.shape, dtype=np.int64)) if spec.shape else 1


def _array(values: Any, spec: TensorSpec, path: "str | os.PathLike[str]") -> np.ndarray:
    want = _count(spec)
    flat: List[float] = []
    stack = [values]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            if len(flat) == want:
                raise InputFeedError(f"{path}: more than {want} values for shape "
                                     f"{list(spec.shape)}", tensor=spec.name)
            if not math.isfinite(item):
                raise InputFeedError(f"{path}: value {item} at flat index {len(flat)} is not "
                                     f"finite", tensor=spec.name)
            flat.append(float(item))
        else:
            raise InputFeedError(f"{path}: value at flat index {len(flat)} is "
                                 f"{type(item).__name__}, not a number", tensor=spec.name)
    if len(flat) != want:
        raise InputFeedError(f"{path}: {len(flat)} values, shape {list(spec.shape)} holds "
                             f"{want}", tensor=spec.name)
    dtype = DTYPES[spec.dtype][0] if spec.dtype in DTYPES else np.float32
    return np.asarray(flat, dtype=dtype).reshape(spec.shape)
