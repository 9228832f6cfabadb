"""onnxruntime's ``quantize_static`` as the recipe (``recipe.py``) calls it: quiet, with its
Relus' and Clips' input scales made the same at every supported onnxruntime, and keeping its
calibration ranges in a file where the installed onnxruntime can.
"""
from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
from pathlib import Path
from typing import Any, Iterator, Optional, Union

import onnx

from mrvl_convert.quantize.relu_ranges import relu_inputs_share_output_scale

PathLike = Union[str, "os.PathLike[str]"]


def cached_ranges(quantize: Any, ranges: Optional[PathLike]) -> Any:
    """``quantize`` keeping its calibration ranges in ``ranges`` (None, or an onnxruntime
    without ``calibration_cache_path``: calibrates each time)."""
    import inspect
    from onnxruntime.quantization import quantize_static
    if ranges is None or "calibration_cache_path" not in inspect.signature(
            quantize_static).parameters:
        return quantize
    return functools.partial(quantize, calibration_cache_path=str(ranges))


def quantize_static_shared_relu(source: str, out: str, reader: Any, **options: Any) -> None:
    """quantize_static, its Relus' and Clips' inputs then given their outputs' scales as
    onnxruntime >= 1.19 gives them (``quantize/relu_ranges.py``): the same QDQ model at every
    onnxruntime this package supports."""
    from onnxruntime.quantization import quantize_static
    quantize_static(source, out, reader, **options)
    written = onnx.load(out)
    shared = relu_inputs_share_output_scale(written)
    if shared is not written:
        onnx.save(shared, out)


class _DropQuantizerRecords(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "quantization" not in Path(record.pathname).parts


@contextlib.contextmanager
def quantizer_quiet() -> Iterator[None]:
    """quantize_static prints its histogram progress and logs advice ("consider
    pre-processing") through the root logger for every model: neither is the user's business
    here, and a batch would repeat them per model. Errors still raise."""
    root = logging.getLogger()
    # its own records on the root logger; a module logger's reach the root's handlers
    listeners = [root, *root.handlers]
    drop = _DropQuantizerRecords()
    for listener in listeners:
        listener.addFilter(drop)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        for listener in listeners:
            listener.removeFilter(drop)
