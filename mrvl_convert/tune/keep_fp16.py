"""Mixed precision: int8 with the layers that quantize worst kept in fp16 (``--keep-fp16``).

The named float-model nodes (or, with ``auto``, the op nodes of the layers whose isolated SNR
is below the threshold, worst first, one Conv2D or FC layer a round for a bounded number of
rounds) are left out of quantization (``quantize_static``'s ``nodes_to_exclude``). The QDQ model then has a
float op between a DequantizeLinear and a QuantizeLinear: the converter makes it an fp16 Mrvl
layer with ``quant`` layers at the region boundary (int8 -> float32 in front, float32 -> int8
after), in the same accelerator stage. The float rules of Conv, Gemm and MatMul take a
dequantized input as they take any float32 one; the elementwise float rules refuse to sit
inside an int8 region (``float_region``), which does not arise here since an excluded node
has no QDQ pair around its own output.

The float model's nodes are named first (``load.name_nodes``), as the converter names them, so
that the names ``--keep-fp16`` takes, the names the report gives and the names
``quantize_static`` matches are the same ones.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from mrvl_convert.convert import convert_with
from mrvl_convert.errors import OptionError
from mrvl_convert.options import ConvertOptions
from mrvl_convert.quantize.keep import AUTO, analysis_feeds, named_copy
from mrvl_convert.quantize.recipe import quantize_int8
from mrvl_convert.verify.quant_analysis import (DEFAULT_THRESHOLD_DB, KEEPABLE_LAYERS,
                                                QuantAnalysis, analyze_quantization)

DEFAULT_ROUNDS = 3
PathLike = Union[str, "os.PathLike[str]"]


@dataclass
class Round:
    """One ``auto`` round: the worst layer found and the float-model nodes it gave back."""

    layer: str
    layer_name: str
    isolated_snr_db: float
    nodes: List[str]


@dataclass
class KeepFp16Result:
    """The QDQ model written, the float-model nodes left in float, the ``auto`` rounds and
    the analysis of the last conversion (``auto`` only)."""

    model: Path
    kept: List[str]
    rounds: List[Round] = field(default_factory=list)
    analysis: Optional[QuantAnalysis] = None


def quantize_keep_fp16(model: PathLike, out: PathLike, calibration: Mapping[str, np.ndarray],
                       keep_fp16: Union[str, Sequence[str]], *, inputs: Optional[Sequence[Dict]] = None,
                       threshold_db: Optional[float] = None, max_rounds: int = DEFAULT_ROUNDS,
                       options: Optional[ConvertOptions] = None,
                       method: str = "minmax") -> KeepFp16Result:
    """``model`` quantized to ``out`` as ``quantize_int8`` does, but the nodes ``keep_fp16``
    names left in float, and with ``"auto"`` among them, the worst layers too (module
    docstring). ``inputs``: the feeds the ``auto`` analysis runs (default: calibration
    samples); ``options``: the options of its conversions (of a QDQ model: their
    ``quantize`` is not used); ``method``: the calibration method
    (``quantize.CALIBRATION_METHODS``)."""
    if isinstance(keep_fp16, str):
        keep_fp16 = [keep_fp16]  # one name, not its letters
    if max_rounds < 0:
        raise OptionError(f"max_rounds must be >= 0, got {max_rounds}")
    out = Path(out)
    with tempfile.TemporaryDirectory(prefix="mrvl_keep_fp16_") as tmp:
        named = Path(tmp) / Path(model).name
        auto = AUTO in keep_fp16
        kept = [n for n in keep_fp16 if n != AUTO]
        named_copy(model, named, kept)
        quantize_int8(named, out, calibration, exclude=kept, method=method)
        result = KeepFp16Result(out, kept)
        if auto:
            threshold = DEFAULT_THRESHOLD_DB if threshold_db is None else threshold_db
            feeds = list(inputs) if inputs is not None else analysis_feeds(named, calibration)
            _auto(result, named, calibration, feeds, threshold, max_rounds,
                  replace(options or ConvertOptions(), quantize=None), Path(tmp), method)
    return result


def _auto(result: KeepFp16Result, named: Path, calibration: Mapping[str, np.ndarray],
          feeds: List[Dict], threshold: float, max_rounds: int, options: ConvertOptions,
          tmp: Path, method: str) -> None:
    """Convert, analyse, give the worst compute layer below the threshold back to float,
    quantize again; at most ``max_rounds`` times. The last analysis is the final model's."""
    for k in range(max_rounds + 1):
        artifact = tmp / f"round{k}"
        convert_with(result.model, artifact, options)
        result.analysis = analyze_quantization(named, artifact, feeds, threshold_db=threshold)
        if k == max_rounds:
            break
        worst = next((r for r in result.analysis.below_isolated
                      if r.layer_name in KEEPABLE_LAYERS and r.dtype == "int8" and r.op_nodes
                      and not set(r.op_nodes) <= set(result.kept)), None)
        if worst is None:
            break
        result.rounds.append(Round(worst.layer, worst.layer_name, worst.isolated_snr_db,
                                   list(worst.op_nodes)))
        result.kept += [n for n in worst.op_nodes if n not in result.kept]
        quantize_int8(named, result.model, calibration, exclude=result.kept, method=method)
