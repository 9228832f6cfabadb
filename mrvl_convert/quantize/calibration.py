"""Calibration samples for ``--quantize int8``, read as hostile input.

Three sources, each giving ``{model input name: samples stacked on axis 0}``:

- an ``.npz``: the array named after each model input (or, for a one-input model with no array
  of its name, the only float array: ``images`` beside integer ``labels``). Every other array is
  not used, and named in a ``CalibrationWarning`` (it is not refused: a dataset's ``.npz``
  often holds labels beside the images; the manifest records the warning);
- a directory of ``.npy`` / ``.pb`` (``onnx.TensorProto``) files: either the files themselves or
  one sub-directory per sample set, as the onnx backend tests lay them out
  (``test_data_set_0/input_0.pb``). A file is matched to a model input by its stem (the input's
  name, or ``input_<k>`` for the k-th input) or, for ``.pb``, by the tensor's own name;
  ``output_*`` files (expected outputs in that layout) are skipped. Sets are read in natural
  order (``set_2`` before ``set_10``) and stacked;
- in Python, also a mapping of arrays, one per model input (a key naming no input is warned
  of, as an ``.npz``'s array).

The inputs' sample counts must agree (the k-th sample of each input is one calibration sample).

Every path stays inside the directory given (symlinks pointing out are refused), every file and
the whole directory are bounded in size and count, ``.npy`` is read without pickle, ``.pb`` as a
TensorProto whose element count must match its bytes and whose data must be inline. Every
refusal is an :class:`InputFeedError` naming the file.
"""
from __future__ import annotations

import io
import os
import re
import warnings
import zipfile
from pathlib import Path
from types import MappingProxyType
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Union

import numpy as np
import onnx
from onnx import numpy_helper

from mrvl_convert.core.arrays import check_npy_header, check_npz_sizes, check_samples
from mrvl_convert.errors import CalibrationWarning, InputFeedError, ModelLoadError
from mrvl_convert.frontend.input_shapes import static_dim

PathLike = Union[str, "os.PathLike[str]"]

# Every CalibrationWarning starts so: a ``-W ignore:<prefix>`` filter names it in worker
# interpreters, where the CLI silences it (it prints the manifest's record instead).
CALIBRATION_PREFIX = "calibration data"
MAX_FILE_BYTES = 1 << 30      # one calibration file (or one .npz member, uncompressed)
MAX_TOTAL_BYTES = 4 << 30     # everything read from one source
MAX_FILES = 10_000            # files in one directory source, all sets together
_FLOAT_TYPES = MappingProxyType({onnx.TensorProto.FLOAT: np.float32,
                                 onnx.TensorProto.FLOAT16: np.float16,
                                 onnx.TensorProto.DOUBLE: np.float64})


def read_calibration(path: PathLike, inputs: Sequence[str]) -> Dict[str, np.ndarray]:
    """The samples of ``path`` (an ``.npz`` or a directory, see the module) per input name."""
    source = Path(path)
    if source.is_dir():
        return read_directory(source, inputs)
    if source.is_file():
        return read_npz(source, inputs)
    raise InputFeedError(f"calibration data {source}: no such file or directory")


def read_npz(path: Path, inputs: Sequence[str]) -> Dict[str, np.ndarray]:
    """The arrays of an ``.npz`` named as ``inputs``, or a one-input model's only float array
    (the module's rule); members are bounded by their declared uncompressed size before any is
    inflated. Every array not used is named in a ``CalibrationWarning``."""
    check_npz_sizes(path, "calibration file", MAX_FILE_BYTES, MAX_TOTAL_BYTES)
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise InputFeedError(f"calibration file {path}: not a readable .npz ({exc})") from None
    used = {name: name for name in inputs if name in arrays}
    floats = [key for key, value in arrays.items() if value.dtype.kind == "f"]
    if len(inputs) == 1 and not used and len(floats) == 1:
        used = {inputs[0]: floats[0]}
    if len(used) < len(inputs):
        raise InputFeedError(f"calibration file {path}: needs an array per model input "
                             f"({list(inputs)}); it holds {sorted(arrays)}")
    unused = sorted(set(arrays) - set(used.values()))
    if unused:
        taken = ", ".join(f"{array!r} for input {name!r}" for name, array in used.items())
        warn_calibration(f"{path}: array(s) {unused} named after no model input, not used "
                         f"(used: {taken})")
    return {name: arrays[array] for name, array in used.items()}


def warn_calibration(text: str) -> None:
    """A ``CalibrationWarning`` starting with ``CALIBRATION_PREFIX``."""
    warnings.warn(f"{CALIBRATION_PREFIX} {text}", CalibrationWarning, stacklevel=3)


# ---- a directory of .npy / .pb -----------------------------------------------------------------

def read_directory(root: Path, inputs: Sequence[str]) -> Dict[str, np.ndarray]:
    """Every sample set under ``root`` (itself, or its sub-directories), stacked per input."""
    base = root.resolve()
    entries = _entries(root, base)
    sets = [d for d in entries if d.is_dir()] or [root]
    loose = [e for e in entries if e.suffix in (".npy", ".pb") and sets != [root]]
    if loose:
        raise InputFeedError(f"calibration file {loose[0]}: next to sample-set directories; "
                             "put it in one of them")
    per_input: Dict[str, List[np.ndarray]] = {name: [] for name in inputs}
    budget = _Budget(root)
    for folder in sets:
        found = _read_set(folder, base, inputs, budget)
        missing = [name for name in inputs if name not in found]
        if missing:
            raise InputFeedError(f"calibration data {folder}: no file for model input "
                                 f"{missing[0]!r} (name it {missing[0]}.npy, "
                                 f"input_{list(inputs).index(missing[0])}.pb, ...)",
                                 tensor=missing[0])
        for name, array in found.items():
            per_input[name].append(array)
    return {name: _stack(arrays, root, name) for name, arrays in per_input.items()}


class _Budget:
    """Counts files and bytes read from one source against MAX_FILES / MAX_TOTAL_BYTES."""

    def __init__(self, root: Path) -> None:
        self.root, self.files, self.bytes = root, 0, 0

    def take(self, path: Path, size: int) -> None:
        self.files += 1
        self.bytes += size
        if self.files > MAX_FILES:
            raise InputFeedError(f"calibration data {self.root}: more than {MAX_FILES} files")
        if size > MAX_FILE_BYTES or self.bytes > MAX_TOTAL_BYTES:
            raise InputFeedError(f"calibration file {path}: {size} bytes; the limit is "
                                 f"{MAX_FILE_BYTES} per file and {MAX_TOTAL_BYTES} in all")


def _natural(path: Path) -> List[Union[int, str]]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path.name)]


def _entries(folder: Path, base: Path) -> List[Path]:
    """The entries of ``folder`` in natural order; a symlink resolving outside ``base`` (or
    anything else that would leave it) is refused."""
    try:
        entries = sorted(folder.iterdir(), key=_natural)
    except OSError as exc:
        raise InputFeedError(f"calibration data {folder}: cannot list it "
                             f"({exc.strerror or exc})") from None
    for entry in entries:
        real = Path(os.path.realpath(entry))
        if real != base and base not in real.parents:
            raise InputFeedError(f"calibration file {entry}: resolves to {real}, outside the "
                                 f"calibration directory {base}")
    return entries


def _read_set(folder: Path, base: Path, inputs: Sequence[str], budget: _Budget
              ) -> Dict[str, np.ndarray]:
    found: Dict[str, np.ndarray] = {}
    for entry in _entries(folder, base):
        if entry.is_dir() or entry.suffix not in (".npy", ".pb") or \
                entry.name.startswith("output_"):
            continue
        if not entry.is_file():  # a FIFO or device would block or never end
            raise InputFeedError(f"calibration file {entry}: not a regular file")
        array, tensor_name = _read_file(entry, budget)
        name = _input_for(entry, tensor_name, inputs)
        if name in found:
            raise InputFeedError(f"calibration file {entry}: a second file for model input "
                                 f"{name!r} in {folder}", tensor=name)
        found[name] = array
    return found


def _input_for(path: Path, tensor_name: str, inputs: Sequence[str]) -> str:
    if path.stem in inputs:
        return path.stem
    match = re.fullmatch(r"input_(\d+)", path.stem)
    if match and int(match.group(1)) < len(inputs):
        return inputs[int(match.group(1))]
    if tensor_name in inputs:
        return tensor_name
    raise InputFeedError(f"calibration file {path}: names no model input (inputs: "
                         f"{list(inputs)}; name the file after one, or input_<k>)")


def _read_file(path: Path, budget: _Budget) -> "tuple[np.ndarray, str]":
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            budget.take(path, size)
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise InputFeedError(f"calibration file {path}: cannot read it "
                             f"({exc.strerror or exc})") from None
    if len(data) > size:  # grew while we read it
        budget.take(path, len(data))
    if path.suffix == ".npy":
        return _npy(path, data), ""
    return _tensor(path, data)


def _npy(path: Path, data: bytes) -> np.ndarray:
    check_npy_header(io.BytesIO(data), len(data), f"calibration file {path}")
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise InputFeedError(f"calibration file {path}: not a readable .npy ({exc})") from None
    if not isinstance(array, np.ndarray) or array.dtype.kind not in "biuf":
        raise InputFeedError(f"calibration file {path}: holds {getattr(array, 'dtype', '?')}, "
                             "not numeric samples")
    return array


def _tensor(path: Path, data: bytes) -> "tuple[np.ndarray, str]":
    """A TensorProto with inline float data whose element count its bytes can hold."""
    tensor = onnx.TensorProto()
    try:
        tensor.ParseFromString(data)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise InputFeedError(f"calibration file {path}: not an onnx.TensorProto ({exc})") from None
    if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.external_data:
        raise InputFeedError(f"calibration file {path}: refers to external data; give the "
                             "values inline")
    if tensor.data_type not in _FLOAT_TYPES:
        raise InputFeedError(f"calibration file {path}: tensor {tensor.name!r} has data type "
                             f"{tensor.data_type}, not float/float16/double")
    dims = list(tensor.dims)
    count = int(np.prod(dims, dtype=np.int64)) if dims else 1
    if any(d < 0 for d in dims) or count > MAX_FILE_BYTES:
        raise InputFeedError(f"calibration file {path}: tensor dims {dims} out of bounds")
    stored = _stored_elements(tensor)
    if stored != count:
        raise InputFeedError(f"calibration file {path}: tensor {tensor.name!r} declares dims "
                             f"{dims} ({count} elements) but holds {stored}")
    return numpy_helper.to_array(tensor).astype(np.float32, copy=False), tensor.name


def _stored_elements(tensor: onnx.TensorProto) -> int:
    if tensor.raw_data:
        return len(tensor.raw_data) // np.dtype(_FLOAT_TYPES[tensor.data_type]).itemsize
    if tensor.data_type == onnx.TensorProto.FLOAT:
        return len(tensor.float_data)
    if tensor.data_type == onnx.TensorProto.DOUBLE:
        return len(tensor.double_data)
    return len(tensor.int32_data)  # float16 stored as int32 words


def _stack(arrays: List[np.ndarray], root: Path, name: str) -> np.ndarray:
    shapes = {a.shape[1:] for a in arrays if a.ndim}
    if len(shapes) > 1 or any(a.ndim == 0 for a in arrays):
        raise InputFeedError(f"calibration data {root}: the samples of input {name!r} differ in "
                             f"shape ({sorted(str(list(a.shape)) for a in arrays)[:4]})",
                             tensor=name)
    return np.concatenate(arrays, axis=0)


def load_proto(model: "PathLike") -> onnx.ModelProto:
    try:
        return onnx.load(str(model), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, OSError, ...
        raise ModelLoadError(f"cannot read ONNX model {model}: {exc}") from None


def calibration_feeds(proto: onnx.ModelProto, calibration: Mapping[str, np.ndarray], label: str):
    """An onnxruntime ``CalibrationDataReader`` handing the samples out in feeds of the model's
    batch size; ``samples_given`` / ``samples_used`` say how many samples there are and how
    many the feeds hold (fewer when the count is not a multiple of a static batch size)."""
    from onnxruntime.quantization import CalibrationDataReader

    inits = {i.name for i in proto.graph.initializer}
    inputs = [i for i in proto.graph.input if i.name not in inits]
    _check_keys(calibration, [i.name for i in inputs], label)
    per_input = {tensor.name: _batches(tensor, calibration[tensor.name], label)
                 for tensor in inputs}
    counts = {name: given for name, (_, given, _) in per_input.items()}
    if len(set(counts.values())) > 1:
        raise InputFeedError(f"{label}: the inputs' calibration sample counts differ ({counts}); "
                             "the k-th sample of every input makes one calibration sample")
    feeds = [dict(zip(per_input, batch)) for batch in zip(*(b for b, _, _ in per_input.values()))]
    given = next(iter(counts.values()), 0)
    used = min((u for _, _, u in per_input.values()), default=0)
    if used < given:
        batch = len(next(iter(feeds[0].values())))
        warn_calibration(f"of {label}: {used} of the {given} samples used: the model takes "
                         f"batches of {batch}, and only whole batches are fed")

    class _Feeds(CalibrationDataReader):
        samples_given, samples_used = given, used

        def __init__(self) -> None:
            self._it: Iterator[Dict[str, np.ndarray]] = iter(feeds)

        def get_next(self) -> Optional[Dict[str, np.ndarray]]:
            return next(self._it, None)

    return _Feeds()


def _check_keys(calibration: Mapping[str, object], inputs: Sequence[str], label: str) -> None:
    missing = [name for name in inputs if name not in calibration]
    if missing:
        raise InputFeedError(f"{label}: no calibration samples for input {missing[0]!r}",
                             tensor=missing[0])
    extra = sorted(set(calibration) - set(inputs))
    if extra:
        warn_calibration(f"of {label}: samples {extra} named after no model input, not used")


def _batches(tensor: onnx.ValueInfoProto, given: np.ndarray, label: str
             ) -> "tuple[List[np.ndarray], int, int]":
    """One input's samples cut in batches of its static batch size (1 if dynamic), the count
    of samples given and the count the batches hold."""
    dims = tensor.type.tensor_type.shape.dim
    given = np.asarray(given)
    if given.ndim == len(dims) + 1 and all(static_dim(d) for d in dims):
        return _whole(tensor, given, label), given.shape[0], given.shape[0]
    # Samples are concatenated along the batch axis, so that axis is free here.
    check_samples(given, source=label, array_name=tensor.name, input_name=tensor.name,
                  shape=[None] + [d.dim_value if static_dim(d) else None for d in dims[1:]])
    samples = _as_declared(tensor, given, label)
    batch = dims[0].dim_value if dims and static_dim(dims[0]) else 1
    if samples.ndim != len(dims) or samples.shape[0] < batch:
        raise InputFeedError(f"{label}: calibration samples of shape {list(samples.shape)} "
                             f"do not stack inputs of rank {len(dims)}", tensor=tensor.name)
    starts = range(0, samples.shape[0] - batch + 1, batch)
    return ([samples[start:start + batch] for start in starts], samples.shape[0],
            len(starts) * batch)


def _whole(tensor: onnx.ValueInfoProto, given: np.ndarray, label: str) -> List[np.ndarray]:
    """Samples stacked on a new axis 0 (an input whose axis 0 is no batch: ``[frames, bins]``
    at its pinned shape), each fed whole."""
    shape = [d.dim_value for d in tensor.type.tensor_type.shape.dim]
    check_samples(given, source=label, array_name=tensor.name, input_name=tensor.name,
                  shape=[None] + shape)
    samples = _as_declared(tensor, given, label)
    return [samples[k] for k in range(samples.shape[0])]


def _as_declared(tensor: onnx.ValueInfoProto, given: np.ndarray, label: str) -> np.ndarray:
    """``given`` in the element type ``tensor`` declares (onnxruntime refuses any other: a
    uint8 image, int64 token ids); a value that type cannot hold (a fraction or an
    out-of-range number for an integer input, a finite value beyond a float type's range) is
    refused, not wrapped or rounded into another sample."""
    elem = tensor.type.tensor_type.elem_type
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))
    except (KeyError, ValueError, TypeError):
        raise InputFeedError(f"{label}: input {tensor.name!r} has element type {elem}, which "
                             "calibration samples cannot be given in", tensor=tensor.name) from None
    if given.dtype == dtype:
        return given
    if given.dtype.kind not in "biuf" or dtype.kind not in "biuf":
        raise InputFeedError(f"{label}: calibration samples of input {tensor.name!r} are "
                             f"{given.dtype}; the input takes {dtype}", tensor=tensor.name)
    with np.errstate(all="ignore"):
        cast = given.astype(dtype)
        kept = _holds(given, cast, dtype)
    if not kept.all():
        bad = given.reshape(-1)[int(np.argmin(kept.reshape(-1)))]
        raise InputFeedError(f"{label}: a calibration sample of input {tensor.name!r} holds "
                             f"{bad!r}, which the input's type {dtype} cannot represent",
                             tensor=tensor.name)
    return cast


def _holds(given: np.ndarray, cast: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Where ``cast`` stands for ``given``: exactly for an integer or bool type, within the
    float type's range (rounded to its nearest value) for a float one."""
    if dtype.kind == "f":
        return np.isfinite(cast) | ~np.isfinite(given)
    back = cast.astype(given.dtype)
    # float64 compare: an int64 beyond 2^53 given as float cannot round-trip either
    return np.asarray(back == given) & np.isfinite(given.astype(np.float64))
