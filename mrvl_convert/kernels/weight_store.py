"""The big float32 constants of one graph-engine segment, and who holds them.

Why: onnxruntime keeps its own form of a segment's weights (NCHWc-reordered for Conv). If the
segment hands it our arrays (``add_external_initializers``), those arrays must stay alive for the
session's whole life, and they are alive while onnxruntime builds its own form: that creation
is the hybrid's memory peak, and our copy sat on top of it. So a segment with many weights
``spill``s them: one file in a private temporary directory, the segment's model beside it naming
that file as external data, and onnxruntime opens the model from its path and reads the weights
itself. Our arrays are then dropped. The file stays open (its directory is removed once the
session exists), so a kernel that later needs a weight for the numpy path (``reader``: a range
rerun, ``run_layers``) reads it back, the same bytes.

- requires: C-contiguous float32 arrays, added under unique names;
- ensures: ``get(name)`` gives the values added, before and after ``spill``, as a fresh
  writable array after it.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Callable, Dict, List, Tuple

import numpy as np

# onnxruntime maps external data into memory when its offset is a multiple of the page size.
_ALIGN = 4096
WEIGHTS_FILE = "weights.bin"
MODEL_FILE = "segment.onnx"


class WeightStore:
    """Named float32 arrays, in memory until ``spill`` and in one open file after it."""

    def __init__(self) -> None:
        self._arrays: Dict[str, np.ndarray] = {}
        self._places: Dict[str, Tuple[int, Tuple[int, ...]]] = {}  # name -> (offset, shape)
        self._file: Any = None
        self._lock = threading.Lock()

    def add(self, name: str, value: np.ndarray) -> None:
        assert value.dtype == np.float32 and value.flags.c_contiguous and name not in self
        self._arrays[name] = value

    def __contains__(self, name: str) -> bool:
        return name in self._arrays or name in self._places

    def __len__(self) -> int:
        return len(self._arrays) + len(self._places)

    def names(self) -> List[str]:
        return list(self._arrays) + list(self._places)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._arrays.values()) + \
            sum(4 * int(np.prod(shape)) for _, shape in self._places.values())

    @property
    def spilled(self) -> bool:
        return self._file is not None

    def drop_after(self, count: int) -> None:
        """Forget every array added after the first ``count`` (an emission undone)."""
        assert not self.spilled
        for name in list(self._arrays)[count:]:
            del self._arrays[name]

    def arrays(self) -> Dict[str, np.ndarray]:
        """The arrays held in memory (none once spilled): what onnxruntime is handed."""
        return dict(self._arrays)

    def get(self, name: str) -> np.ndarray:
        value = self._arrays.get(name)
        if value is not None:
            return value
        offset, shape = self._places[name]
        out = np.empty(shape, np.float32)
        with self._lock:
            self._file.seek(offset)
            got = self._file.readinto(memoryview(out).cast("B"))
        if got != out.nbytes:
            raise OSError(f"{WEIGHTS_FILE}: {name} read back short ({got} of {out.nbytes} "
                          "bytes)")
        return out

    def reader(self, name: str) -> Callable[[], np.ndarray]:
        """What a kernel keeps to get ``name`` later, holding no array itself."""
        assert name in self
        return lambda: self.get(name)

    def items(self) -> List[Tuple[str, np.ndarray]]:
        return [(name, self.get(name)) for name in self.names()]

    def spill(self, directory: str, model: bytes) -> str:
        """Write the arrays to ``directory``/weights.bin and ``model`` (whose external tensors
        name the arrays) beside it, pointing there; the model's path. The arrays are dropped
        only once both files are written: an ``OSError`` leaves the store as it was."""
        from onnx import ModelProto

        proto = ModelProto()
        proto.ParseFromString(model)
        places: Dict[str, Tuple[int, Tuple[int, ...]]] = {}
        handle = open(os.path.join(directory, WEIGHTS_FILE), "w+b")
        try:
            for name, value in self._arrays.items():
                offset = -(-handle.tell() // _ALIGN) * _ALIGN
                handle.seek(offset)
                handle.write(memoryview(value).cast("B"))
                places[name] = (offset, value.shape)
            handle.flush()
            for tensor in proto.graph.initializer:
                if tensor.name in places:
                    point(tensor, WEIGHTS_FILE, places[tensor.name][0])
            path = os.path.join(directory, MODEL_FILE)
            with open(path, "wb") as f:
                f.write(proto.SerializeToString())
        except BaseException:
            handle.close()
            raise
        self._file, self._places, self._arrays = handle, places, {}
        return path


def point(tensor: Any, location: str, offset: int) -> None:
    """Name ``location`` at ``offset`` as the float32 tensor's external data (replacing any)."""
    length = 4 * int(np.prod(tensor.dims))
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", str(offset)),
                       ("length", str(length))):
        tensor.external_data.add(key=key, value=value)
