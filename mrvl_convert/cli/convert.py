"""The ``mrvl-convert`` command.

``mrvl-convert MODEL [MODEL ...] -o OUT`` converts each model into ``OUT/<name>/`` and writes
``OUT/summary.json``. MODEL may be a file, a directory (every ``*.onnx`` below it, sorted) or a glob
(expanded here, so a quoted glob works). Exit codes: 0 every model converted (and verified),
1 some model failed to convert, 2 usage error, 3 every model converted but some failed
``--verify``. ``--input-shape NAME:1,3,224,224`` applies to every model with an input NAME (in
a batch, models without that input ignore it); ``--input-shape 'det*.onnx=images:1,3,416,416'``
only to the models whose file name, stem or path matches the glob before ``=``.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from mrvl_convert.batch import (BatchResult, VerifyOptions, prepare_out_dir, run_batch,
                                shapes_per_model)
from mrvl_convert.cli.args import (UsageError, build_parser, convert_options, estimate_option,
                                   find_models, parse_shapes, verify_options)
from mrvl_convert.cli.exits import (EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE,
                                    EXIT_VERIFY_FAILED, error, guarded)
from mrvl_convert.cli.device import print_device, print_estimates
from mrvl_convert.cli.output import (_Progress, codegen_line, codegen_note, cut_line,
                                     format_table)
from mrvl_convert.cli.fp16 import keep_fp32_options, report_keep_fp32
from mrvl_convert.cli.quant import keep_fp16_per_model, quantization, write_analyses
from mrvl_convert.cli.notices import conversion_notices, print_override_lines
from mrvl_convert.errors import InputRankError, MrvlConvertError, OptionError
from mrvl_convert.options import ConvertOptions
from mrvl_convert.quantize.recipe import Quantization


@dataclass(frozen=True)
class _Request:
    """One run of the command, every argument checked before any model is converted."""
    models: List[Path]
    out: Path
    shapes: Dict[str, Any]                     # as convert_many takes them
    options: ConvertOptions
    verify: Optional[VerifyOptions]
    keep_fp16: Optional[Dict[str, Quantization]]   # per model: --quantize int8 --keep-fp16
    keep_fp32: Any = None                          # --keep-fp32: tune.keep_fp32's result


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``mrvl-convert``; returns the exit code (never raises for user errors)."""
    return guarded(_main, argv, "mrvl-convert")


def _main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help and --version print and exit 0
        return int(exc.code or 0)
    except UsageError as exc:
        error(f"usage error: {exc} (see mrvl-convert --help)")
        return EXIT_USAGE
    try:
        if args.list_rules:
            return _list_rules(args.rules, args.layer_set)
        request = _check_args(args)
    except UsageError as exc:
        error(f"usage error: {exc} (see mrvl-convert --help)")
        return EXIT_USAGE
    except MrvlConvertError as exc:  # a bad rule file or profile, an output dir we cannot make
        error(str(exc))
        return EXIT_USAGE
    _quiet_onnxruntime(request.verify)
    try:
        with conversion_notices(args.verbose):
            return _convert(request, args)
    except KeyboardInterrupt:
        error("interrupted; models not finished were not written")
        return EXIT_INTERRUPTED


def _check_args(args: argparse.Namespace) -> _Request:
    """Every mistake found before any model is converted (exit 2, OUT not created)."""
    if not args.models:
        raise UsageError("no MODEL given")
    if not args.output:
        raise UsageError("-o OUT is required")
    shapes = parse_shapes(args.input_shape)
    _check_rules(args.rules, args.layer_set)
    estimate = estimate_option(args)
    verify = verify_options(args)
    models = find_models(args.models, exclude=Path(args.output))
    if not models:
        raise UsageError("no ONNX model found")
    try:
        common, own = shapes_per_model(shapes, models)
    except OptionError as exc:
        raise UsageError(f"--input-shape: {exc}") from None
    options = convert_options(args, estimate, quantization(args))
    keep_fp16 = keep_fp16_per_model(models, args, options, common, own)
    options, keep_fp32 = keep_fp32_options(models, args, options, verify,
                                           {**common, **own[0]})
    prepare_out_dir(args.output)
    return _Request(models, Path(args.output), shapes, options, verify, keep_fp16, keep_fp32)


def _check_rules(rule_files: Sequence[str], layer_set: str) -> None:
    """A missing or bad rule file is a usage error, reported once, not once per model."""
    for rule_file in rule_files:
        if not Path(rule_file).is_file():
            raise UsageError(f"--rules {rule_file}: no such file")
    if rule_files:
        from mrvl_convert.rules.loader import load_rules
        load_rules(list(rule_files), layer_set=layer_set)


def _list_rules(rule_files: Sequence[str], layer_set: str) -> int:
    from mrvl_convert.rules.docs import list_rules_text
    from mrvl_convert.rules.loader import load_rules
    _check_rules(rule_files, layer_set)
    sys.stdout.write(list_rules_text(load_rules(list(rule_files), layer_set=layer_set)))
    return EXIT_OK


def _quiet_onnxruntime(verify: Optional[VerifyOptions]) -> None:
    """onnxruntime's process-wide logger at the level of our sessions: its warnings reach the
    terminal only with -v. Only --verify runs onnxruntime, and only then is it imported."""
    if verify is not None:
        import onnxruntime as ort
        ort.set_default_logger_severity(verify.log_severity)


def _convert(request: _Request, args: argparse.Namespace) -> int:
    with _Progress(len(request.models), quiet=args.quiet) as progress:
        try:
            result = run_batch(request.models, request.out, request.options,
                               shapes=request.shapes, quantize_per_model=request.keep_fp16,
                               verify=request.verify, jobs=args.jobs, fail_fast=args.fail_fast,
                               progress=progress.update, on_stage=progress.stage,
                               one_device=args.one_device)
        except MrvlConvertError as exc:
            progress.close()
            error(str(exc))
            return EXIT_FAILED
    _report(result, request, quiet=args.quiet)
    print_override_lines(result, error)
    print_device(result, error)
    if not args.quiet:
        print_estimates(result, layers=args.verbose)
    report_keep_fp32(result, request.keep_fp32, args.quiet)
    write_analyses(result, request.models, args)
    return exit_code(result)


def exit_code(result: BatchResult) -> int:
    """0 all converted (and verified), 1 some model not converted, 3 all converted but some
    failed verify; 2 when a model was not converted for a given shape of the wrong rank."""
    if any(o.error_type == InputRankError.__name__ for o in result.failed):
        return EXIT_USAGE
    if result.failed or result.skipped:
        return EXIT_FAILED
    return EXIT_VERIFY_FAILED if result.verify_failed else EXIT_OK


def _report(result: BatchResult, request: _Request, *, quiet: bool) -> None:
    for outcome in result:
        if outcome.status in ("failed", "verify_failed"):
            error(outcome.error or outcome.status)
            if outcome.traceback:
                sys.stderr.write(_indent(outcome.traceback))
    unused = [n for n, v in request.shapes.items() if not isinstance(v, dict) and len(result) > 1
              and all(n in o.ignored_shapes for o in result)]
    if unused:
        error(f"warning: --input-shape {', '.join(unused)} matched no model's input")
    _warn_unused_tolerances(result, request.verify)
    _warn_wrecked(result)
    if not quiet:
        _print_table(result, request.out)


def _print_table(result: BatchResult, out: Path) -> None:
    for outcome in result:
        if outcome.verify_note:
            sys.stdout.write(f"verify {outcome.name}: {outcome.verify_note}\n")
    sys.stdout.write(format_table(result))
    for outcome in result:
        for line in (cut_line(outcome, out), codegen_line(outcome, out)):
            if line:
                sys.stdout.write(line + "\n")
    converted = sum(o.converted for o in result)
    failed_verify = len(result.verify_failed)
    verify_text = f" ({failed_verify} failed verify)" if failed_verify else ""
    sys.stdout.write(f"{converted} of {len(result)} models converted{verify_text} into "
                     f"{out}{codegen_note(result)}; summary in {out / 'summary.json'}\n")


def _warn_wrecked(result: BatchResult) -> None:
    """An int8 output far from fp32 (summary.json verify.fp32.wrecked) is said even under -q:
    the verdict against the QDQ model passes it."""
    for outcome in result:
        wrecked = ((outcome.verify or {}).get("fp32") or {}).get("wrecked")
        if wrecked:
            error(f"warning: {outcome.name}: int8 wrecks {', '.join(wrecked[:5])} against fp32 "
                  "though the artifact matches its QDQ model; see the verify line and "
                  "summary.json verify.fp32")


def _warn_unused_tolerances(result: BatchResult, verify: Optional[VerifyOptions]) -> None:
    """An --atol/--rtol OUTPUT:VALUE naming no output of any verified model is a typo, most
    likely: say so (a silent tolerance that checks nothing would be worse)."""
    if verify is None:
        return
    named = {*verify.atol, *verify.rtol}
    seen = {row["tensor"] for o in result for row in (o.verify or {}).get("outputs", [])}
    ran = any((o.verify or {}).get("outputs") for o in result)
    unused = sorted(n for n in named if n is not None and n not in seen)
    if ran and unused:
        error(f"warning: --atol/--rtol name {', '.join(map(repr, unused))}, which is no "
              f"output of the verified models (outputs: {', '.join(sorted(seen)[:8])})")


def _indent(text: str) -> str:
    return "".join(f"    {line}\n" for line in text.rstrip("\n").splitlines())


if __name__ == "__main__":  # pragma: no cover - `python -m mrvl_convert.cli.convert`
    sys.exit(main())
