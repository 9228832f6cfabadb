"""``mrvl-convert --quantize int8`` options of the per-layer analysis: ``--keep-fp16 NODE|auto``,
``--min-agreement P``, ``--equalize``, ``--bias-correction``, ``--quant-analysis`` and
``--snr-threshold DB`` (``tune/keep_fp16.py``, ``quantize/equalize.py``,
``quantize/bias_correct.py``, ``verify/quant_analysis.py``)."""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from mrvl_convert.batch.outcome import BatchResult
from mrvl_convert.errors import CalibrationWarning, OptionError
from mrvl_convert.options import ConvertOptions
from mrvl_convert.quantize.recipe import Quantization

ANALYSIS_FILE = "quant_analysis.json"


def add_quant_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keep-fp16", action="append", default=[], metavar="NODE|auto",
                        help="--quantize: leave this node in float, an fp16 Mrvl layer between "
                             "quant/dequant layers (repeatable); 'auto': the layers whose "
                             "isolated SNR is below --snr-threshold, worst first, up to 3 rounds")
    parser.add_argument("--min-agreement", type=float, default=None, metavar="P",
                        help="--keep-fp16 auto: search for the layers to keep in fp16 until the "
                             "int8 artifact's top-1 agreement with the fp32 model (last axis of "
                             "each output) reaches P, e.g. 0.95: half the calibration samples "
                             "rank the layers (most noise per MAC first) and choose them (up "
                             "to 8 tries; one that does not help is dropped), the other half "
                             "judges; the line gives both figures, the int8 MAC share and the "
                             "subgraphs, and says so if the held-out figure misses P")
    parser.add_argument("--equalize", action="store_true",
                        help="--quantize: cross-layer weight equalization of the float model "
                             "first (Conv -> [Relu] -> Conv pairs, where it is exact)")
    parser.add_argument("--bias-correction", action="store_true",
                        help="--quantize: quantize, take the int8 weights' mean error on the "
                             "calibration samples out of each Conv's float bias, quantize again")
    parser.add_argument("--quant-analysis", action="store_true",
                        help="--quantize: per-layer SNR and cosine of the int8 result against "
                             "the float model (accumulated and isolated), on calibration samples; "
                             f"printed, and written to OUT/<model>/{ANALYSIS_FILE}. Without "
                             "--quantize: the fp16 sensitivity (the same, plus each layer's "
                             "weights rounded alone), in OUT/<model>/fp16_analysis.json")
    parser.add_argument("--snr-threshold", type=float, default=None, metavar="DB",
                        help="--quant-analysis / --keep-fp16 auto: the SNR below which a layer "
                             "is named (default 20)")


def quantization(args: argparse.Namespace) -> Optional[Quantization]:
    """What ``--quantize int8 --calibration DATA [--calibration-method M]`` asks for
    (``quantize.for_cli``; each worker quantizes its model and keeps the QDQ model in the
    artifact); None without --quantize, which the analysis options need."""
    # Without --quantize, --quant-analysis is the fp16 analysis (cli/fp16.py).
    if args.keep_fp16 and args.quantize is None:
        raise OptionError("--keep-fp16 is only used with --quantize int8")
    if args.snr_threshold is not None and not (args.quant_analysis or args.keep_fp16):
        raise OptionError("--snr-threshold is only used with --quant-analysis or --keep-fp16")
    _check_recipe_args(args)
    from mrvl_convert.quantize.recipe import for_cli as quantize_for_cli
    chosen = quantize_for_cli(args.quantize, args.calibration, args.calibration_method,
                              args.layer_set)
    if chosen is None:
        return None
    return replace(chosen, equalize=args.equalize, bias_correction=args.bias_correction)


def _check_recipe_args(args: argparse.Namespace) -> None:
    """--min-agreement, --equalize, --bias-correction: with what they need, before any model
    is converted."""
    from mrvl_convert.quantize.keep import AUTO
    for flag, given in (("--equalize", args.equalize),
                        ("--bias-correction", args.bias_correction)):
        if given and args.quantize is None:
            raise OptionError(f"{flag} is only used with --quantize int8")
    if args.min_agreement is None:
        return
    if AUTO not in args.keep_fp16:
        raise OptionError("--min-agreement is only used with --keep-fp16 auto")
    if not 0.0 < args.min_agreement <= 1.0:
        raise OptionError(f"--min-agreement {args.min_agreement}: a share in (0, 1], "
                          "e.g. 0.99")


def keep_fp16_per_model(models: List[Path], args: argparse.Namespace, options: ConvertOptions,
                        common: Optional[Mapping[str, List[int]]] = None,
                        own: Optional[Sequence[Mapping[str, List[int]]]] = None
                        ) -> Optional[Dict[str, Quantization]]:
    """With ``--keep-fp16``, per model (its path as given) ``options.quantize`` naming the
    nodes it keeps in float (``auto`` chooses them here, converting with ``options`` and the
    input shapes the model's own conversion takes: ``common`` to every model that has the
    input, ``own[k]`` to ``models[k]``, as ``batch.shapes_per_model`` splits them); None
    without."""
    if not args.keep_fp16 or options.quantize is None:
        return None
    chosen = {}
    for k, model in enumerate(models):
        shapes = _shapes_of(model, common or {}, (own or [{}] * len(models))[k],
                            len(models) > 1)
        kept, auto, rows = _keep_fp16(model, args, replace(options, shapes=shapes or None))
        chosen[str(model)] = replace(options.quantize, keep_fp16=kept, keep_fp16_auto=auto,
                                     rows=rows)
        if auto is not None:  # the recipes the search measured its model with
            from mrvl_convert.tune.keep_result import with_recipes
            chosen[str(model)] = with_recipes(chosen[str(model)], auto["recipes"])
    return chosen


def _shapes_of(model: Path, common: Mapping[str, List[int]], own: Mapping[str, List[int]],
               batch: bool) -> Dict[str, List[int]]:
    """The shapes ``model`` is converted with: in a batch, the all-model overrides naming one
    of its inputs (the others are ignored, as the batch worker ignores them), then its own."""
    shapes = dict(common)
    if shapes and batch:
        import onnx
        try:
            inputs = {i.name for i in onnx.load_model(str(model),
                                                      load_external_data=False).graph.input}
        except Exception:  # not ONNX: the conversion says so in its own words
            inputs = set(shapes)
        shapes = {k: v for k, v in shapes.items() if k in inputs}
    return {**shapes, **own}


def _keep_fp16(model: Path, args: argparse.Namespace, options: ConvertOptions
               ) -> Tuple[Tuple[str, ...], Optional[Dict[str, Any]], Optional[Tuple[int, ...]]]:
    """The nodes of ``model`` to keep in float: those named, checked against the model, and
    with ``auto`` those its rounds of quantize, convert and analyse choose; with a target also
    the calibration rows the artifact is to be calibrated on (the search's choice samples, as
    rows of the data given), so that the held-out figure reported is the artifact's."""
    from mrvl_convert.quantize.keep import AUTO, named_copy
    from mrvl_convert.tune.keep_fp16 import quantize_keep_fp16
    from mrvl_convert.quantize.recipe import calibration_choice, choice_rows, load_calibration

    if AUTO not in args.keep_fp16:  # checked here, quantized in the worker
        named_copy(model, None, args.keep_fp16)
        return tuple(args.keep_fp16), None, None
    # The rounds convert as they always have: with the partition options but upstream's
    # min_compute_layers, and without the estimate (it would rank the regions differently).
    rounds = replace(options, min_compute_layers=1, estimate=None, draw=False)
    with warnings.catch_warnings():
        # said once, from the manifest of the conversion that follows (cli/notices.py)
        warnings.simplefilter("ignore", CalibrationWarning)
        calibration = load_calibration(args.calibration, model)
    # Only the samples that calibrate the artifact: those held out for --verify (issue 40)
    # choose nothing here either.
    picked = choice_rows(calibration)
    calibration, _ = calibration_choice(calibration, list(calibration))
    with tempfile.TemporaryDirectory(prefix="mrvl_int8_") as folder:
        result = quantize_keep_fp16(model, Path(folder) / model.name,
                                    calibration, args.keep_fp16,
                                    threshold_db=args.snr_threshold, options=rounds,
                                    method=options.quantize.method,
                                    min_agreement=args.min_agreement,
                                    equalize=options.quantize.equalize,
                                    bias_correction=options.quantize.bias_correction)
    if not args.quiet:
        kept = ", ".join(result.kept) or "none"
        sys.stdout.write(f"keep-fp16 {model.name}: kept in fp16: {kept}\n")
        if args.min_agreement is not None:
            sys.stdout.write(f"keep-fp16 {model.name}: {result.summary()}\n")
    if args.min_agreement is None:
        return tuple(result.kept), None, None
    auto = result.to_dict()
    for key in ("calibration_rows", "held_out_rows"):  # rows of the data as given
        auto[key] = [picked[r] for r in auto[key]]
    return tuple(result.kept), auto, tuple(auto["calibration_rows"])


def write_analyses(result: BatchResult, models: List[Path], args: argparse.Namespace) -> None:
    """``--quant-analysis``: each converted model's table, printed and written as JSON."""
    if not getattr(args, "quant_analysis", False):
        return
    if args.quantize is None:
        from mrvl_convert.cli.fp16 import write_fp16_analyses
        write_fp16_analyses(result, models, args)
        return
    from mrvl_convert.emit.publish import write_file_atomically
    from mrvl_convert.quantize.keep import ANALYSIS_SAMPLES, analysis_feeds
    from mrvl_convert.quantize.recipe import load_calibration
    from mrvl_convert.verify.quant_analysis import DEFAULT_THRESHOLD_DB, analyze_quantization

    threshold = DEFAULT_THRESHOLD_DB if args.snr_threshold is None else args.snr_threshold
    float_models = {str(m.resolve()): m for m in models}  # each model converted: its float one
    for outcome in result:
        model = float_models.get(str(Path(outcome.model).resolve()))
        if not outcome.converted or model is None:
            continue
        calibration = load_calibration(args.calibration, model)
        feeds = analysis_feeds(model, calibration)
        analysis = analyze_quantization(model, outcome.out_dir, feeds, threshold_db=threshold)
        analysis.samples_note = samples_note(feeds, calibration, ANALYSIS_SAMPLES)
        out = write_file_atomically(Path(outcome.out_dir) / ANALYSIS_FILE,
                                    (json.dumps(analysis.to_dict(), indent=1) + "\n").encode())
        if not args.quiet:
            sys.stdout.write(f"quantization analysis of {outcome.name} ({out}):\n"
                             f"{analysis.format_table()}\n")


def samples_note(feeds: List[Dict[str, Any]], calibration: Mapping[str, Any],
                 most: int) -> str:
    """Why the analysis ran over fewer samples than the calibration data holds ('' if not)."""
    used = sum(len(next(iter(feed.values()))) for feed in feeds if feed)
    given = min((len(a) for a in calibration.values()), default=0)
    if used >= given:
        return ""
    return (f"{used} of the {given} calibration sample(s) given: the analysis takes at most "
            f"{most} feed(s)")
