"""Mixed precision: int8 with the layers that quantize worst kept in fp16 (``--keep-fp16``).

The named float-model nodes (or, with ``auto``, the op nodes of the layers whose isolated SNR
is below the threshold, worst first, one Conv2D or FC layer a round for a bounded number of
rounds) are left out of quantization (``quantize_static``'s ``nodes_to_exclude``). The QDQ
model then has a float op between a DequantizeLinear and a QuantizeLinear: the converter makes
it an fp16 Mrvl layer with ``quant`` layers at the region boundary (int8 -> float32 in front,
float32 -> int8 after), in the same accelerator stage. The float rules of Conv, Gemm and
MatMul take a dequantized input as they take any float32 one; the elementwise float rules
refuse to sit inside an int8 region (``float_region``), which does not arise here since an
excluded node has no QDQ pair around its own output.

With a target top-1 agreement (``min_agreement``, ``--min-agreement``) ``auto`` is a search
judged out of sample (issue 40): the calibration samples are split once
(``core.samples.remedy_split``); the **choice** part calibrates every trial model, ranks the
layers and decides each step, the **held-out** part only judges, so the figure reported is on
samples that chose nothing.

- rank: the int8 Conv2D/FC layers, first by the noise their isolated SNR says they add per
  multiply-accumulate (``verify/quant_analysis.py``), then by their measured sensitivity: the
  output noise the model loses with that layer alone in fp16, on the choice samples, per
  multiply-accumulate (``tune/prefix_search.py``);
- bisect: the shortest prefix of that ranking whose choice-sample top-1 agreement reaches the
  target, in at most ``max_rounds`` tries (the whole ranking first);
- judge: the agreement of the chosen model on the held-out samples. ``reached`` is that figure
  against the target; not reaching it is an outcome the result states, not an error. Each
  prefix's held-out figure is recorded too (the curve of agreement against int8 MAC share), but
  never decides anything.

The float model's nodes are named first (``load.name_nodes``), as the converter names them, so
that the names ``--keep-fp16`` takes, the names the report gives and the names
``quantize_static`` matches are the same ones.

- requires: a float model, its calibration samples (with a target: at least 2, and an output
  with a last axis of 2 or more), the conversion options its trial models take (shapes);
- ensures: ``out`` is the QDQ model with ``result.kept`` left in float (with a target: the
  kept model the verdict is of, calibrated on the choice samples); with a target, ``reached``
  and every figure reported on the held-out samples come from samples that decided nothing.
"""
from __future__ import annotations

import functools
import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from mrvl_convert.convert import convert_with
from mrvl_convert.errors import OptionError
from mrvl_convert.options import ConvertOptions
from mrvl_convert.quantize.keep import AUTO, analysis_feeds, named_copy
from mrvl_convert.quantize.recipe import quantize_int8
from mrvl_convert.tune.keep_result import KeepFp16Result, Round
from mrvl_convert.tune.target_search import _ranked, _round, search  # noqa: F401 (_ranked)
from mrvl_convert.verify.quant_analysis import (DEFAULT_THRESHOLD_DB, KEEPABLE_LAYERS,
                                                QuantAnalysis, analyze_quantization)
from mrvl_convert.verify.quant_report import LayerQuality

DEFAULT_ROUNDS = 3
DEFAULT_TARGET_ROUNDS = 8  # with min_agreement: prefixes tried (quantize, convert, measure each)
PathLike = Union[str, "os.PathLike[str]"]


def quantize_keep_fp16(model: PathLike, out: PathLike, calibration: Mapping[str, np.ndarray],
                       keep_fp16: Union[str, Sequence[str]], *,
                       inputs: Optional[Sequence[Dict]] = None,
                       threshold_db: Optional[float] = None, max_rounds: Optional[int] = None,
                       options: Optional[ConvertOptions] = None, method: str = "minmax",
                       min_agreement: Optional[float] = None, equalize: bool = False,
                       bias_correction: bool = False, recipes: bool = True) -> KeepFp16Result:
    """``model`` quantized to ``out`` as ``quantize_int8`` does, but the nodes ``keep_fp16``
    names left in float, and with ``"auto"`` among them, the worst layers too (module
    docstring). ``inputs``: the feeds the ``auto`` analysis runs without a target (default:
    calibration samples); ``options``: the options of its conversions (of a QDQ model: their
    ``quantize`` is not used; their ``shapes`` fix the model's free dims); ``method``: the
    calibration method (``quantize.CALIBRATION_METHODS``); ``min_agreement``: the top-1
    agreement with the fp32 model ``auto`` searches for, judged on held-out calibration
    samples (module docstring; ``max_rounds`` then defaults to ``DEFAULT_TARGET_ROUNDS``;
    ``out`` is then calibrated on the choice samples, the model the verdict is of);
    ``equalize``, ``bias_correction``: as ``quantize_int8``; ``recipes``: with a target, try
    the recipes of ``tune/layer_recipes.py`` before keeping any layer in fp16."""
    if isinstance(keep_fp16, str):
        keep_fp16 = [keep_fp16]  # one name, not its letters
    _check_target(min_agreement, AUTO in keep_fp16, inputs)
    if max_rounds is None:
        max_rounds = DEFAULT_ROUNDS if min_agreement is None else DEFAULT_TARGET_ROUNDS
    if max_rounds < 0:
        raise OptionError(f"max_rounds must be >= 0, got {max_rounds}")
    out = Path(out)
    options = replace(options or ConvertOptions(), quantize=None)
    with tempfile.TemporaryDirectory(prefix="mrvl_keep_fp16_") as tmp:
        named = Path(tmp) / Path(model).name
        auto = AUTO in keep_fp16
        kept = [n for n in keep_fp16 if n != AUTO]
        named_copy(model, named, kept)
        result = KeepFp16Result(out, kept, min_agreement=min_agreement)
        threshold = DEFAULT_THRESHOLD_DB if threshold_db is None else threshold_db
        if auto and min_agreement is not None:
            search(result, named, calibration, threshold, max_rounds, options, Path(tmp),
                   functools.partial(quantize_int8, method=method, equalize=equalize,
                                     bias_correction=bias_correction),
                   {"equalize": equalize, "bias_correction": bias_correction}, recipes)
            return result
        quantize = functools.partial(quantize_int8, named, out, calibration, method=method,
                                     equalize=equalize, bias_correction=bias_correction)
        quantize(exclude=kept)
        if auto:
            feeds = list(inputs) if inputs is not None else analysis_feeds(named, calibration)
            _auto(result, named, quantize, feeds, threshold, max_rounds, options, Path(tmp))
    return result


def _check_target(min_agreement: Optional[float], auto: bool, inputs: Optional[Sequence]
                  ) -> None:
    if min_agreement is None:
        return
    if not auto:
        raise OptionError("min_agreement (--min-agreement) is only used with keep_fp16 'auto'")
    if not 0.0 < min_agreement <= 1.0:
        raise OptionError(f"min_agreement must be in (0, 1], got {min_agreement}")
    if inputs is not None:
        raise OptionError("min_agreement: the search chooses on one part of the calibration "
                          "samples and judges on the other; it takes no other inputs")


def _auto(result: KeepFp16Result, named: Path, quantize: Callable[..., Path],
          feeds: List[Dict], threshold: float, max_rounds: int, options: ConvertOptions,
          tmp: Path) -> None:
    """Without a target: convert, analyse, give the worst compute layer below the threshold
    back to float, quantize again; at most ``max_rounds`` times. The last analysis is the
    final model's."""
    for k in range(max_rounds + 1):
        artifact = tmp / f"round{k}"
        convert_with(result.model, artifact, options)
        result.analysis = analyze_quantization(named, artifact, feeds, threshold_db=threshold)
        worst = _candidate(result.analysis, result.kept) if k < max_rounds else None
        if worst is None:
            break
        result.rounds.append(_round(worst))
        result.kept += [n for n in worst.op_nodes if n not in result.kept]
        quantize(exclude=result.kept)


def _candidate(analysis: QuantAnalysis, kept: Sequence[str]) -> Optional[LayerQuality]:
    """The next layer to give back without a target: worst isolated SNR first, among those
    below the threshold."""
    return next((r for r in analysis.below_isolated if r.layer_name in KEEPABLE_LAYERS
                 and r.dtype == "int8" and r.op_nodes and not set(r.op_nodes) <= set(kept)),
                None)


__all__: List[str] = ["KeepFp16Result", "Round", "quantize_keep_fp16"]
