"""Array files a user hands in (calibration data, verify inputs), read as hostile input.

One reader for ``.npy`` and ``.npz``: every member's declared size is bounded, and its ``.npy``
header's shape checked against the bytes there are, before numpy allocates what the header asks
for; pickled objects are refused. ``check_samples`` then holds an array to the model input it
feeds: real floating-point values (or the input's own integer type for an integer input), all
finite, a shape that is one sample or a stack of samples of the input. Every refusal is an
:class:`InputFeedError` naming the file, the array and the input.
"""
from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import IO, Dict, Optional, Sequence, Union

import numpy as np

from mrvl_convert.errors import InputFeedError

PathLike = Union[str, "os.PathLike[str]"]

MAX_FILE_BYTES = 1 << 30      # one array file (or one .npz member, uncompressed)
MAX_TOTAL_BYTES = 4 << 30     # everything read from one .npz


def read_arrays(path: PathLike, what: str = "array file") -> Dict[str, np.ndarray]:
    """{array name: array} of an ``.npz``, or ``{file stem: array}`` of an ``.npy``."""
    source = Path(path)
    if not source.is_file():
        raise InputFeedError(f"{what} {source}: no such file")
    if _is_npy(source):
        return {source.stem: _read_npy(source, what)}
    check_npz_sizes(source, what)
    try:
        with np.load(source, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise InputFeedError(f"{what} {source}: not a readable .npz ({exc})") from None


def _is_npy(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(6) == b"\x93NUMPY"


def _read_npy(path: Path, what: str) -> np.ndarray:
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise InputFeedError(f"{what} {path}: {size} bytes, over the limit of {MAX_FILE_BYTES}")
    with open(path, "rb") as handle:
        check_npy_header(handle, size, f"{what} {path}")
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise InputFeedError(f"{what} {path}: not a readable .npy ({exc})") from None


def check_npz_sizes(path: Path, what: str, max_file: int = MAX_FILE_BYTES,
                    max_total: int = MAX_TOTAL_BYTES) -> None:
    """Every member's declared size bounded (zipfile never inflates past it) and its .npy
    header's shape within that size, before numpy allocates what the header asks for."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            big = next((m for m in members if m.file_size > max_file), None)
            if big is not None:
                raise InputFeedError(f"{what} {path}: member {big.filename} inflates "
                                     f"to {big.file_size} bytes, over the limit of "
                                     f"{max_file}")
            if sum(m.file_size for m in members) > max_total:
                raise InputFeedError(f"{what} {path}: inflates to more than "
                                     f"{max_total} bytes")
            for member in members:
                with archive.open(member) as stream:
                    check_npy_header(stream, member.file_size,
                                     f"{what} {path}: member {member.filename}")
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise InputFeedError(f"{what} {path}: not a readable .npz ({exc})") from None


def check_npy_header(stream: IO[bytes], size: int, label: str) -> None:
    """The .npy header of ``stream`` (``size`` bytes in all) declares no more data than there
    is, and no Python objects (which only pickle could read)."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(stream)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f".npy format version {version[0]}.{version[1]} is not read here")
        read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape, _, dtype = read(stream)
    except ValueError as exc:
        raise InputFeedError(f"{label}: not a readable .npy ({exc})") from None
    if dtype.hasobject:
        raise InputFeedError(f"{label}: holds Python objects (pickle), not numeric samples")
    need = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if need > size:
        raise InputFeedError(f"{label}: declares shape {list(shape)} ({need} bytes) but holds "
                             f"{size} bytes")


def check_samples(array: np.ndarray, *, source: str, array_name: str, input_name: str,
                  shape: Sequence[Optional[int]], integer: Optional[np.dtype] = None,
                  target: "np.dtype | type" = np.float32) -> None:
    """``array`` can feed the input ``input_name`` of ``shape`` (None: a free dimension): real
    floats (or, for an integer input, integers of at most its type), finite, one sample or a
    stack of samples; float values within the range of ``target``, the float type they are cast
    to. An InputFeedError naming the file, the array and the input if not."""
    where = f"{source}: array {array_name!r} for input {input_name!r}"
    kind = array.dtype.kind
    if integer is not None:
        if kind not in "iub" or not np.can_cast(array.dtype, integer):
            raise InputFeedError(f"{where}: holds {array.dtype}, the input takes {integer}",
                                 tensor=input_name)
    elif kind not in "fiub":
        raise InputFeedError(f"{where}: holds {array.dtype}; give real floating-point values",
                             tensor=input_name)
    if kind == "f" and not np.isfinite(array).all():
        raise InputFeedError(f"{where}: holds NaN or infinite values", tensor=input_name)
    limit = float(np.finfo(target).max) if integer is None else None
    if kind == "f" and array.size and limit is not None and float(np.abs(array).max()) > limit:
        raise InputFeedError(f"{where}: holds values beyond the range of {np.dtype(target)}",
                             tensor=input_name)
    if not (_fits(array.shape, shape) or _fits(array.shape[1:], shape)
            or (tuple(shape[:1]) == (1,) and _fits(array.shape[1:], shape[1:]))):
        raise InputFeedError(f"{where}: array of shape {list(array.shape)} does not fit input "
                             f"shape {list(shape)} (neither one sample nor a stack of samples)",
                             tensor=input_name)


def _fits(actual: Sequence[int], expected: Sequence[Optional[int]]) -> bool:
    return len(actual) == len(expected) and all(e is None or a == e
                                                for a, e in zip(actual, expected))
