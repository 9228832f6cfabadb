"""``mrvl-convert --quantize int8`` options of the per-layer analysis: ``--keep-fp16 NODE|auto``,
``--quant-analysis`` and ``--snr-threshold DB`` (``keep_fp16.py``,
``runtime/quant_analysis.py``)."""
from __future__ import annotations

import argparse
import atexit
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import List

from .errors import OptionError

ANALYSIS_FILE = "quant_analysis.json"


def add_quant_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keep-fp16", action="append", default=[], metavar="NODE|auto",
                        help="--quantize: leave this node in float, an fp16 Mrvl layer between "
                             "quant/dequant layers (repeatable); 'auto': the layers whose "
                             "isolated SNR is below --snr-threshold, worst first, up to 3 rounds")
    parser.add_argument("--quant-analysis", action="store_true",
                        help="--quantize: per-layer SNR and cosine of the int8 result against "
                             "the float model (accumulated and isolated), on calibration samples; "
                             f"printed, and written to OUT/<model>/{ANALYSIS_FILE}")
    parser.add_argument("--snr-threshold", type=float, default=None, metavar="DB",
                        help="--quant-analysis / --keep-fp16 auto: the SNR below which a layer "
                             "is named (default 20)")


def quantized_models(models: List[Path], args: argparse.Namespace) -> List[Path]:
    """The models to convert and ``args.quantization`` (``quantize.for_cli``: each worker
    quantizes its model and keeps the QDQ model in the artifact); with ``--keep-fp16`` the
    models quantized here keeping those nodes in float (``args.quantization`` None).
    ``args.float_models`` maps each model converted back to its float model."""
    given = [flag for flag, value in (("--keep-fp16", args.keep_fp16),
                                      ("--quant-analysis", args.quant_analysis),
                                      ("--snr-threshold", args.snr_threshold is not None)) if value]
    if given and args.quantize is None:
        raise OptionError(f"{given[0]} is only used with --quantize int8")
    from .quantize import for_cli as quantize_for_cli
    args.quantization = quantize_for_cli(args.quantize, args.calibration,
                                         args.calibration_method, args.layer_set)
    quantized = models
    if args.keep_fp16:
        quantized = [_keep_fp16(model, args) for model in models]
        args.quantization = None
    args.float_models = {str(q.resolve()): m for q, m in zip(quantized, models)}
    return quantized


def _keep_fp16(model: Path, args: argparse.Namespace) -> Path:
    from .keep_fp16 import AUTO, quantize_keep_fp16
    from .quantize import load_calibration

    folder = Path(tempfile.mkdtemp(prefix="mrvl_int8_"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    options = {"policy": args.policy, "rules": list(args.rules), "layer_set": args.layer_set,
               "deny": list(args.deny), "max_subgraphs": args.max_subgraphs}
    result = quantize_keep_fp16(model, folder / model.name,
                                load_calibration(args.calibration, model), args.keep_fp16,
                                threshold_db=args.snr_threshold, convert_options=options)
    if not args.quiet and AUTO in args.keep_fp16:
        kept = ", ".join(result.kept) or "none"
        sys.stdout.write(f"keep-fp16 {model.name}: kept in fp16: {kept}\n")
    return result.model


def write_analyses(result, args: argparse.Namespace) -> None:
    """``--quant-analysis``: each converted model's table, printed and written as JSON."""
    if not getattr(args, "quant_analysis", False):
        return
    from .keep_fp16 import analysis_feeds
    from .quantize import load_calibration
    from .runtime.quant_analysis import DEFAULT_THRESHOLD_DB, analyze_quantization

    threshold = DEFAULT_THRESHOLD_DB if args.snr_threshold is None else args.snr_threshold
    for outcome in result:
        model = args.float_models.get(str(Path(outcome.model).resolve()))
        if not outcome.converted or model is None:
            continue
        feeds = analysis_feeds(model, load_calibration(args.calibration, model))
        analysis = analyze_quantization(model, outcome.out_dir, feeds, threshold_db=threshold)
        out = Path(outcome.out_dir) / ANALYSIS_FILE
        out.write_text(json.dumps(analysis.to_dict(), indent=1) + "\n", encoding="utf-8")
        if not args.quiet:
            sys.stdout.write(f"quantization analysis of {outcome.name} ({out}):\n"
                             f"{analysis.format_table()}\n")
