"""The ``mrvl-convert`` and ``mrvl-verify`` commands.

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
import glob
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from mrvl_convert.version import __version__
from mrvl_convert.cli.output import _Progress, cut_line, format_table  # noqa: F401 (re-exported for tests)
from mrvl_convert.cli.quant import add_quant_args, quantized_models, write_analyses
from mrvl_convert.cli.notices import conversion_notices, print_override_lines
from mrvl_convert.errors import InputRankError, MrvlConvertError
from mrvl_convert.layers import MARVELL, UPSTREAM

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_VERIFY_FAILED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class UsageError(Exception):
    """A command-line mistake: reported in one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse would exit(2) itself; keep main() pure
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mrvl-convert", description=(
        "Convert ONNX CNNs for Marvell's MLIP accelerator. Each MODEL is converted into "
        "OUT/<model name>/ and OUT/summary.json lists every model."),
        epilog=("--input-shape NAME:DIMS applies to every model that has an input of that name "
                "(in a batch, models without it ignore it); MODEL_GLOB=NAME:DIMS only to the "
                "models whose file name matches. Exit codes: 0 all converted (and verified), "
                "1 some model failed to convert, 2 usage error, 3 all converted but some failed "
                "--verify (their artifacts are kept)."))
    parser.add_argument("models", nargs="*", metavar="MODEL",
                        help="ONNX file, directory (all *.onnx below it) or glob")
    parser.add_argument("-o", "--output", metavar="OUT", help="output directory")
    parser.add_argument("--input-shape", action="append", default=[],
                        metavar="[MODEL_GLOB=]NAME:D0,D1,...",
                        help="fix an input's shape, e.g. x:1,3,224,224, or for some models "
                             "only: 'det*.onnx=images:1,3,416,416' (repeatable)")
    parser.add_argument("--policy", choices=("single", "multi"), default="multi",
                        help="partitioning policy (default: multi)")
    parser.add_argument("--rules", action="append", default=[], metavar="FILE",
                        help="extra rule file, YAML or JSON (repeatable)")
    parser.add_argument("--jobs", "-j", type=_positive_int, default=None, metavar="N",
                        help="parallel worker processes (default: number of CPUs)")
    parser.add_argument("--fail-fast", action="store_true",
                        help="stop starting new models after the first failure")
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="no progress and no table; errors only")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="also show onnxruntime's and onnx-graphsurgeon's own warnings")
    parser.add_argument("--list-rules", action="store_true",
                        help="print the rule set (built-in plus --rules files) and exit")
    # Partition control (issue 16).
    parser.add_argument("--max-subgraphs", type=_non_negative_int, default=None, metavar="N",
                        help="keep at most N Mrvl subgraphs, those with the most MACs (with "
                             "--estimate: the most estimated accelerator time); the rest runs "
                             "on CPU")
    parser.add_argument("--deny", action="append", default=[], metavar="OP_TYPE|NODE_NAME",
                        help="keep this op type or node on CPU (repeatable)")
    parser.add_argument("--min-compute-layers", type=_non_negative_int, default=1, metavar="N",
                        help="a Mrvl region with fewer than N Conv/FC layers runs on CPU "
                             "(default 1, upstream's rule; 0: any matched region runs on Mrvl)")
    parser.add_argument("--layer-set", choices=(MARVELL, UPSTREAM), default=MARVELL,
                        help="the Marvell layer kinds your backend compiler reads: the newer "
                             "Marvell codegen's (default) or upstream TVM 0.19's 12 composites")
    parser.add_argument("--quantize", choices=("int8",), default=None,
                        help="quantize each model first (onnxruntime quantize_static, QDQ, "
                             "symmetric per-tensor int8: Marvell's recipe) and emit int8 layers")
    parser.add_argument("--calibration", metavar="DATA", default=None,
                        help="calibration samples for --quantize: an .npz with an array per "
                             "model input, or a directory of .npy/.pb files (input_0.pb, ... "
                             "or one sub-directory per sample set)")
    parser.add_argument("--calibration-method", choices=("minmax", "entropy", "percentile"),
                        default=None, help="--quantize: how activation ranges are taken from "
                                           "the samples (default: minmax)")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    add_quant_args(parser)
    _add_draw_estimate_args(parser)
    _add_verify_args(parser)
    return parser


def _add_verify_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--verify", action="store_true",
                        help="after each conversion, compare the model outputs of the hybrid "
                             "run with onnxruntime on the original model")
    from mrvl_convert.verify.tolerances import add_tolerance_args
    add_tolerance_args(parser, "--verify: ")
    parser.add_argument("--verify-inputs", metavar="FILE.npz", default=None,
                        help="--verify: real inputs, arrays named after the model inputs (one "
                             "sample or a stack); default: seeded random inputs")


def _verify_option(args: argparse.Namespace) -> Any:
    """False, or the VerifyOptions of --verify and its tolerances and inputs."""
    given = [o for o, v in (("--atol", args.atol), ("--rtol", args.rtol),
                            ("--verify-inputs", args.verify_inputs)) if v]
    if not args.verify:
        if given:
            raise UsageError(f"{given[0]} needs --verify")
        return False
    from mrvl_convert.batch.pool import VerifyOptions
    from mrvl_convert.runtime.session import QUIET, WARNINGS
    from mrvl_convert.verify.tolerances import parse_tolerance_specs
    if args.verify_inputs and not Path(args.verify_inputs).is_file():
        raise UsageError(f"--verify-inputs {args.verify_inputs}: no such file")
    try:
        atol = parse_tolerance_specs(args.atol, "--atol")
        rtol = parse_tolerance_specs(args.rtol, "--rtol")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return VerifyOptions(inputs=args.verify_inputs, atol=atol, rtol=rtol,
                         log_severity=WARNINGS if args.verbose else QUIET)


# ---- --draw / --estimate (issue 20): kept in one block ---------------------------------------

def _add_draw_estimate_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--draw", action="store_true",
                        help="also write <name>.html (the partition, coloured by stage) and "
                             "<name>.placement.onnx (the model annotated for Netron)")
    parser.add_argument("--estimate", action="store_true",
                        help="add an accelerator cost ESTIMATE to report.json and print its "
                             "table (a roofline model, not a measurement: docs/ESTIMATE.md)")
    parser.add_argument("--hw-profile", metavar="FILE", default=None,
                        help="hardware profile for --estimate (YAML/JSON; default: built-in "
                             "cn10ka fp16, 8 tiles)")


def _estimate_option(args: argparse.Namespace) -> Optional[str]:
    if args.hw_profile and not args.estimate:
        raise UsageError("--hw-profile needs --estimate")
    if args.hw_profile:
        from mrvl_convert.estimate import load_profile
        load_profile(args.hw_profile)   # a bad profile is reported once, not once per model
        return args.hw_profile
    return "builtin" if args.estimate else None


def _print_estimates(result, quiet: bool) -> None:
    from mrvl_convert.estimate import format_table
    for outcome in result.ok:
        report = json.loads((Path(outcome.out_dir) / "report.json").read_text(encoding="utf-8"))
        if "estimate" in report and not quiet:
            sys.stdout.write(f"{outcome.name}: ")
            sys.stdout.write(format_table(report["estimate"]))


def _positive_int(text: str, minimum: int = 1) -> int:
    if not re.fullmatch(r"-?[0-9]{1,10}", text):  # ASCII digits only (no "1_0")
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    value = int(text)
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
    return value


def _non_negative_int(text: str) -> int:
    return _positive_int(text, minimum=0)


def parse_shapes(specs: Sequence[str]) -> Dict[str, Any]:
    """``["x:1,3,224,224", "det*.onnx=images:1,3,416,416"]`` to ``{"x": [1, 3, 224, 224],
    "det*.onnx": {"images": [1, 3, 416, 416]}}`` (``convert_many``'s form); a UsageError if
    malformed, or if one input is given two shapes for the same models."""
    shapes: Dict[str, Any] = {}
    for spec in specs:
        pattern, eq, rest = spec.partition("=")
        if not eq:
            pattern, rest = "", spec
        elif not pattern:
            raise UsageError(f"--input-shape {spec!r}: nothing before '='; expected "
                             "MODEL_GLOB=NAME:D0,D1,... (e.g. 'det*.onnx=images:1,3,416,416')")
        name, sizes = _parse_one_shape(spec, rest)
        scope = shapes.setdefault(pattern, {}) if pattern else shapes
        if not isinstance(scope, dict) or (not pattern and isinstance(shapes.get(name), dict)):
            raise UsageError(f"--input-shape {spec!r}: {pattern or name!r} is used both as an "
                             "input name and as a model pattern")
        if name in scope and scope[name] != sizes:
            where = f" for models {pattern!r}" if pattern else ""
            raise UsageError(f"--input-shape gives input {name!r} two different shapes{where}")
        scope[name] = sizes
    return shapes


def _parse_one_shape(spec: str, text: str) -> Tuple[str, List[int]]:
    """``NAME:D0,D1,...`` (the last colon splits: tensor names may hold colons)."""
    name, sep, dims = text.rpartition(":")
    if not sep or not name:
        raise UsageError(f"--input-shape {spec!r}: expected NAME:D0,D1,... "
                         "(e.g. x:1,3,224,224)")
    parts = dims.split(",")
    if not all(re.fullmatch(r"[0-9]{1,10}", d) for d in parts):  # no '1_0', no '١', no ' 1'
        raise UsageError(f"--input-shape {spec!r}: dimensions must be whole numbers "
                         "separated by commas (e.g. x:1,3,224,224)")
    sizes = [int(d) for d in parts]
    if any(d < 1 for d in sizes):
        raise UsageError(f"--input-shape {spec!r}: every dimension must be at least 1")
    return name, sizes


def find_models(specs: Sequence[str], exclude: Optional[Path] = None) -> List[Path]:
    """Files as given, directories searched for *.onnx, globs expanded; sorted, no duplicates."""
    found: List[Path] = []
    for spec in specs:
        path = Path(spec)
        if path.is_dir():
            matches = sorted(p for p in path.rglob("*.onnx") if p.is_file())
        elif path.is_file():
            matches = [path]
        elif glob.has_magic(spec):
            matches = _expand_glob(spec)
        else:
            raise UsageError(f"{spec}: no such file or directory")
        if not matches:
            raise UsageError(f"{spec}: no ONNX model found")
        found.extend(matches)
    return _dedupe([p for p in found if not _inside(p, exclude)])


def _expand_glob(spec: str) -> List[Path]:
    paths: List[Path] = []
    for match in sorted(glob.glob(spec, recursive=True)):
        p = Path(match)
        paths.extend(sorted(p.rglob("*.onnx")) if p.is_dir() else [p])
    return [p for p in paths if p.is_file()]


def _inside(path: Path, directory: Optional[Path]) -> bool:
    """Artifacts of an earlier run (their CPU .onnx files) are not models to convert."""
    if directory is None:
        return False
    return Path(os.path.abspath(directory)) in Path(os.path.abspath(path)).parents


def _dedupe(paths: List[Path]) -> List[Path]:
    seen, unique = set(), []
    for p in paths:
        key = os.path.abspath(p)
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


REPORT_BUG = "please report it with the model at the project's issue tracker"


def internal_error_line(exc: BaseException) -> str:
    """What the user sees of a bug: one line that says so, and where to report it."""
    text = " ".join(str(exc).split())[:300]
    return (f"internal error {type(exc).__name__}: {text} (a bug in mrvl_convert, not a problem "
            f"with your input; {REPORT_BUG})")


def _guarded(entry, argv: Optional[Sequence[str]], prog: str) -> int:
    """Run a command's body: an error of ours that escaped it, or a bug, is one line on stderr
    and a non-zero exit, never a traceback."""
    try:
        return entry(argv)
    except MrvlConvertError as exc:
        _error(str(exc), prog)
        return EXIT_FAILED
    except Exception as exc:  # a bug: say so (no traceback for the user to decode)
        _error(internal_error_line(exc), prog)
        return EXIT_FAILED


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``mrvl-convert``; returns the exit code (never raises for user errors)."""
    return _guarded(_main, argv, "mrvl-convert")


def _main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help and --version print and exit 0
        return int(exc.code or 0)
    except UsageError as exc:
        _error(f"usage error: {exc} (see mrvl-convert --help)")
        return EXIT_USAGE
    try:
        if args.list_rules:
            return _list_rules(args.rules, args.layer_set)
        models, shapes = _check_args(args)
    except UsageError as exc:
        _error(f"usage error: {exc} (see mrvl-convert --help)")
        return EXIT_USAGE
    except MrvlConvertError as exc:  # a bad rule file or profile, an output dir we cannot make
        _error(str(exc))
        return EXIT_USAGE
    _quiet_onnxruntime(args)
    try:
        with conversion_notices(args.verbose):
            return _convert(models, Path(args.output), shapes, args)
    except KeyboardInterrupt:
        _error("interrupted; models not finished were not written")
        return EXIT_INTERRUPTED


def _check_args(args: argparse.Namespace) -> Tuple[List[Path], Dict[str, Any]]:
    """Every mistake found before any model is converted (exit 2, OUT not created)."""
    if not args.models:
        raise UsageError("no MODEL given")
    if not args.output:
        raise UsageError("-o OUT is required")
    shapes = parse_shapes(args.input_shape)
    _check_rules(args.rules, args.layer_set)
    args.estimate_option = _estimate_option(args)
    args.verify_option = _verify_option(args)
    models = find_models(args.models, exclude=Path(args.output))
    if not models:
        raise UsageError("no ONNX model found")
    from mrvl_convert.batch.pool import prepare_out_dir, shapes_per_model
    from mrvl_convert.errors import OptionError
    try:
        shapes_per_model(shapes, models)
    except OptionError as exc:
        raise UsageError(f"--input-shape: {exc}") from None
    models = quantized_models(models, args)
    prepare_out_dir(args.output)
    return models, shapes


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


def _quiet_onnxruntime(args: argparse.Namespace) -> None:
    """onnxruntime's process-wide logger at the level of our sessions: its warnings reach the
    terminal only with -v. Only --verify runs onnxruntime, and only then is it imported."""
    if args.verify_option:
        import onnxruntime as ort
        ort.set_default_logger_severity(args.verify_option.log_severity)


def _convert(models: List[Path], out: Path, shapes: Dict[str, Any],
             args: argparse.Namespace) -> int:
    from mrvl_convert.batch.pool import convert_many
    with _Progress(len(models), quiet=args.quiet) as progress:
        try:
            result = convert_many(models, out, jobs=args.jobs, shapes=shapes, policy=args.policy,
                                  rules=list(args.rules), fail_fast=args.fail_fast,
                                  progress=progress.update, verify=args.verify_option,
                                  estimate=args.estimate_option, draw=args.draw,
                                  max_subgraphs=args.max_subgraphs, deny=list(args.deny),
                                  min_compute_layers=args.min_compute_layers,
                                  layer_set=args.layer_set, on_stage=progress.stage,
                                  quantize=args.quantization)
        except MrvlConvertError as exc:
            progress.close()
            _error(str(exc))
            return EXIT_FAILED
    _report(result, out, shapes, quiet=args.quiet, verify_option=args.verify_option)
    print_override_lines(result, _error)
    _print_estimates(result, args.quiet)
    write_analyses(result, args)
    return exit_code(result)


def exit_code(result) -> int:
    """0 all converted (and verified), 1 some model not converted, 3 all converted but some
    failed verify; 2 when a model was not converted for a given shape of the wrong rank."""
    if any(o.error_type == InputRankError.__name__ for o in result.failed):
        return EXIT_USAGE
    if result.failed or result.skipped:
        return EXIT_FAILED
    return EXIT_VERIFY_FAILED if result.verify_failed else EXIT_OK


def _report(result, out: Path, shapes: Dict[str, Any], *, quiet: bool,
            verify_option: Any = False) -> None:
    for outcome in result:
        if outcome.status in ("failed", "verify_failed"):
            _error(outcome.error or outcome.status)
            if outcome.traceback:
                sys.stderr.write(_indent(outcome.traceback))
    unused = [n for n, v in shapes.items() if not isinstance(v, dict) and len(result) > 1
              and all(n in o.ignored_shapes for o in result)]
    if unused:
        _error(f"warning: --input-shape {', '.join(unused)} matched no model's input")
    _warn_unused_tolerances(result, verify_option)
    if not quiet:
        for outcome in result:
            if outcome.verify_note:
                sys.stdout.write(f"verify {outcome.name}: {outcome.verify_note}\n")
        sys.stdout.write(format_table(result))
        for outcome in result:
            line = cut_line(outcome, out)
            if line:
                sys.stdout.write(line + "\n")
        converted = sum(o.converted for o in result)
        failed_verify = len(result.verify_failed)
        verify_text = f" ({failed_verify} failed verify)" if failed_verify else ""
        sys.stdout.write(f"{converted} of {len(result)} models converted{verify_text} into "
                         f"{out}; summary in {out / 'summary.json'}\n")


def _warn_unused_tolerances(result, verify_option: Any) -> None:
    """An --atol/--rtol OUTPUT:VALUE naming no output of any verified model is a typo, most
    likely: say so (a silent tolerance that checks nothing would be worse)."""
    if not verify_option:
        return
    named = {*verify_option.atol, *verify_option.rtol}
    seen = {row["tensor"] for o in result for row in (o.verify or {}).get("outputs", [])}
    ran = any((o.verify or {}).get("outputs") for o in result)
    unused = sorted(n for n in named if n is not None and n not in seen)
    if ran and unused:
        _error(f"warning: --atol/--rtol name {', '.join(map(repr, unused))}, which is no "
               f"output of the verified models (outputs: {', '.join(sorted(seen)[:8])})")


def _indent(text: str) -> str:
    return "".join(f"    {line}\n" for line in text.rstrip("\n").splitlines())


def _error(message: str, prog: str = "mrvl-convert") -> None:
    line = " ".join(message.split())
    sys.stderr.write(f"{prog}: {line}\n")
    sys.stderr.flush()


def verify_main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``mrvl-verify`` (lives in mrvl_convert.cli.verify)."""
    try:
        from mrvl_convert.cli.verify import main as runtime_main
    except ImportError as exc:
        _error(f"mrvl-verify is not available: {exc}")
        return EXIT_USAGE
    return _guarded(runtime_main, list(sys.argv[1:] if argv is None else argv), "mrvl-verify")


def _entry() -> None:  # pragma: no cover - `python -m mrvl_convert.cli.convert`
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    _entry()
