"""``mrvl-convert`` options of an fp16 conversion's precision (issue 30): ``--keep-fp32
NODE|auto`` (``tune/keep_fp32.py``) and ``--quant-analysis`` without ``--quantize`` (the fp16
sensitivity analysis, ``verify/fp16_analysis.py``)."""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from mrvl_convert.batch.outcome import BatchResult
from mrvl_convert.batch.plan import VerifyOptions
from mrvl_convert.errors import OptionError
from mrvl_convert.options import ConvertOptions

FP16_ANALYSIS_FILE = "fp16_analysis.json"
FP16_ANALYSIS_SAMPLES = 8   # seeded random feeds, without --verify-inputs (int8 takes 8 too)


def add_fp16_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keep-fp32", action="append", default=[], metavar="NODE|auto",
                        help="fp16: keep this node in fp32 on the CPU (repeatable; one model); "
                             "'auto': the layers the fp16 analysis names, those whose fp16 "
                             "weights cost the outputs most first, until verify passes (up to "
                             "3 rounds; a round that does not lower the error by more than "
                             "5%% is undone), chosen on half of the verify samples and judged on "
                             "the other half (both verdicts printed); prints and writes to "
                             "report.json what it kept and cost")


def keep_fp32_options(models: List[Path], args: argparse.Namespace, options: ConvertOptions,
                      verify: Optional[VerifyOptions], shapes: Dict[str, List[int]]
                      ) -> Tuple[ConvertOptions, Any]:
    """``options`` with the nodes ``--keep-fp32`` keeps (``auto``'s chosen here, converting
    the model with its ``shapes`` and verifying as ``--verify`` would), and the
    ``KeepFp32Result`` (None without)."""
    if not args.keep_fp32:
        return options, None
    if args.quantize is not None:
        raise OptionError("--keep-fp32 is for fp16 conversions; with --quantize int8 keep "
                             "layers in float with --keep-fp16")
    if len(models) != 1:
        raise OptionError(f"--keep-fp32 takes one model (node names are a model's own); "
                             f"{len(models)} given")
    from mrvl_convert.tune.keep_fp32 import VerifySettings, convert_keep_fp32
    result = convert_keep_fp32(models[0], None, args.keep_fp32,
                               options=replace(options, draw=False, shapes=shapes or None),
                               verify=_settings(verify, VerifySettings))
    return replace(options, keep_fp32=tuple(result.kept),
                   norm_scales=result.norm_scales or None), result


def _settings(verify: Optional[VerifyOptions], settings: Any) -> Any:
    """The VerifySettings of ``--verify``'s inputs, tolerances and criterion (defaults
    without ``--verify``)."""
    if verify is None:
        return settings()
    from mrvl_convert.verify.tolerances import Tolerances
    tolerances = Tolerances().with_bounds(dict(verify.atol), dict(verify.rtol),
                                          "given with --atol/--rtol")
    return settings(tolerances=tolerances, criterion=verify.criterion, npz=verify.inputs)


def report_keep_fp32(result: BatchResult, keep: Any, quiet: bool) -> None:
    """After the batch: report.json's ``keep_fp32`` section gets the measured figures, and
    the line says what was kept and what it cost."""
    if keep is None:
        return
    from mrvl_convert.tune.keep_fp32 import record_measured
    for outcome in result:
        if outcome.converted:
            record_measured(outcome.out_dir, keep)
    if not quiet:
        sys.stdout.write(keep.line() + "\n")


def write_fp16_analyses(result: BatchResult, models: List[Path], args: argparse.Namespace
                        ) -> None:
    """``--quant-analysis`` of fp16 conversions: each converted model's table, printed and
    written as JSON (on ``--verify-inputs``, else on seeded random feeds)."""
    from mrvl_convert.emit.publish import dumps, write_file_atomically
    from mrvl_convert.verify.fp16_analysis import analyze_fp16
    from mrvl_convert.verify.quant_report import DEFAULT_THRESHOLD_DB

    threshold = DEFAULT_THRESHOLD_DB if args.snr_threshold is None else args.snr_threshold
    float_models = {str(m.resolve()): m for m in models}
    for outcome in result:
        model = float_models.get(str(Path(outcome.model).resolve()))
        if not outcome.converted or model is None:
            continue
        inputs = _feeds(args.verify_inputs, outcome.out_dir)
        analysis = analyze_fp16(model, outcome.out_dir, inputs, threshold_db=threshold,
                                samples=FP16_ANALYSIS_SAMPLES)
        out = write_file_atomically(Path(outcome.out_dir) / FP16_ANALYSIS_FILE,
                                    dumps(analysis.to_dict()))
        if not args.quiet:
            where = "--verify-inputs" if inputs is not None else \
                f"{FP16_ANALYSIS_SAMPLES} seeded random inputs"
            sys.stdout.write(f"fp16 sensitivity of {outcome.name} ({out}, on {where}):\n"
                             f"{analysis.format_table()}\n")


def _feeds(npz: Optional[str], artifact: str) -> Optional[List[Any]]:
    if npz is None:
        return None
    from mrvl_convert.runtime.session import HybridSession
    from mrvl_convert.verify.feeds import load_npz_feeds
    return load_npz_feeds(npz, HybridSession(artifact).input_specs)
