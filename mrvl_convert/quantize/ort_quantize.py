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

from mrvl_convert.frontend.float_pairs import drop_float_pairs
from mrvl_convert.frontend.folded_shapes import fill_unknown_shapes
from mrvl_convert.quantize.relu_ranges import relu_inputs_share_output_scale
from mrvl_convert.quantize.scope_order import ordered_for_branches
from mrvl_convert.rules.float_spans import builtin_float_forms

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
    onnxruntime this package supports. The ops no int8 layer takes (a LayerNorm's or GELU's
    pieces, attention's Softmax) are then left in float, as ``--keep-fp16`` leaves a node: the
    QDQ pairs between them dropped (``frontend/float_pairs.py``), so they run as fp16 layers
    inside the int8 region, as whole as the float model. Why that pass and not
    ``nodes_to_exclude``: which nodes are float is known from the QDQ graph (a MatMul of two
    activations, the pieces between them), and quantize_static would still quantize an excluded
    node's tensors for its quantized neighbours; one pass serves our recipe and other
    quantizers' models alike, and the QDQ model kept for verify is the one it leaves."""
    from onnxruntime.quantization import quantize_static
    quantize_static(source, out, reader, **options)
    written = onnx.load(out)
    reordered = ordered_for_branches(written)  # its sort misses what an If's branch reads
    shared = relu_inputs_share_output_scale(written)
    if float_pairs_dropped(shared) or shared is not written or reordered:
        onnx.save(shared, out)


def float_pairs_dropped(model: onnx.ModelProto) -> bool:
    """``model`` (in place) without the QDQ pairs between ops of no int8 form; whether any
    went. Shapes are inferred on a copy first (those onnx cannot tell, folded as the converter
    folds them: ``frontend/folded_shapes.py``): a MatMul's rank tells an int8 FC from
    attention's product of two activations, and a float composite's rule needs static shapes."""
    inferred = onnx.shape_inference.infer_shapes(model)
    del model.graph.value_info[:]
    model.graph.value_info.extend(inferred.graph.value_info)
    # a shape the model computes at run time (a torch export's Range, Slice of position ids)
    # is unknown to onnx; the float spans' rules need it static, as the converter folds it
    fill_unknown_shapes(model)
    return bool(drop_float_pairs(model, *builtin_float_forms()))


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
