"""Nodes kept in float when quantizing: named as the converter names them, checked up front.

Shared by the recipe (``Quantization.keep_fp16``) and ``tune.keep_fp16`` (which picks them).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import onnx

from mrvl_convert.core.tensors import load_external, model_dir
from mrvl_convert.errors import OptionError
from mrvl_convert.frontend.load import name_nodes
from mrvl_convert.quantize.calibration import calibration_feeds, load_proto

AUTO = "auto"
ANALYSIS_SAMPLES = 8
PathLike = Union[str, "os.PathLike[str]"]


def analysis_feeds(model: PathLike, calibration: Mapping[str, np.ndarray],
                   count: int = ANALYSIS_SAMPLES) -> List[Dict[str, np.ndarray]]:
    """Up to ``count`` feeds cut from the calibration samples (in the model's batch size)."""
    reader = calibration_feeds(load_proto(model), calibration, str(model))
    feeds = []
    while len(feeds) < count:
        feed = reader.get_next()
        if feed is None:
            break
        feeds.append(feed)
    return feeds


def named_copy(model: PathLike, path: Optional[Path], keep: Sequence[str]) -> None:
    """Save ``model`` to ``path`` (None: only check) with every node named as the converter
    names it (the names ``keep`` and report.json use; an OptionError for a name it does not
    have). External data is read only from files inside the model's directory (``_tensors``)."""
    proto = load_proto(model)
    load_external(proto, model_dir(model), str(model))
    nodes = name_nodes(proto)
    unknown = [n for n in keep if n not in nodes]
    if unknown:
        raise OptionError(f"--keep-fp16 {unknown[0]}: {model} has no node of this name "
                          f"(nodes are named as in report.json, e.g. "
                          f"{', '.join(list(nodes)[:4])})")
    if path is not None:
        onnx.save(proto, str(path))
