"""The ``mrvl-convert`` and ``mrvl-verify`` commands.

``mrvl-convert MODEL [MODEL ...] -o OUT`` converts each model into ``OUT/<name>/`` and writes
``OUT/summary.json``. MODEL may be a file, a directory (every ``*.onnx`` below it, sorted) or a glob
(expanded here, so a quoted glob works). Exit codes: 0 every model converted, 1 some failed,
2 usage error. ``--input-shape NAME:1,3,224,224`` applies to every model with an input NAME; in a
batch, models without that input ignore it.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, TextIO, Tuple

from . import __version__
from .errors import MrvlConvertError
from .layers._kind import MARVELL, UPSTREAM

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
TABLE_COLUMNS = ("model", "status", "Mrvl nodes", "CPU nodes", "Mrvl subgraphs",
                 "CPU subgraphs", "cuts", "MACs on Mrvl", "seconds", "error")
# More Mrvl<->CPU transitions than this and the CLI names the op types that cut the model.
FEW_CUTS = 3


class UsageError(Exception):
    """A command-line mistake: reported in one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse would exit(2) itself; keep main() pure
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mrvl-convert", description=(
        "Convert ONNX CNNs for Marvell's MLIP accelerator. Each MODEL is converted into "
        "OUT/<model name>/ and OUT/summary.json lists every model."),
        epilog=("--input-shape applies to every model that has an input of that name; in a batch "
                "of several models it is ignored for models without that input. Exit codes: 0 all "
                "converted, 1 some failed, 2 usage error."))
    parser.add_argument("models", nargs="*", metavar="MODEL",
                        help="ONNX file, directory (all *.onnx below it) or glob")
    parser.add_argument("-o", "--output", metavar="OUT", help="output directory")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME:D0,D1,...",
                        help="fix an input's shape, e.g. x:1,3,224,224 (repeatable)")
    parser.add_argument("--policy", choices=("single", "multi"), default="multi",
                        help="partitioning policy (default: multi)")
    parser.add_argument("--rules", action="append", default=[], metavar="FILE",
                        help="extra rule file, YAML or JSON (repeatable)")
    parser.add_argument("--jobs", "-j", type=_positive_int, default=None, metavar="N",
                        help="parallel worker processes (default: number of CPUs)")
    parser.add_argument("--fail-fast", action="store_true",
                        help="stop starting new models after the first failure")
    parser.add_argument("--verify", action="store_true",
                        help="after each conversion, compare the hybrid run with onnxruntime")
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="no progress and no table; errors only")
    parser.add_argument("--list-rules", action="store_true",
                        help="print the rule set (built-in plus --rules files) and exit")
    # Partition control (issue 16).
    parser.add_argument("--max-subgraphs", type=_non_negative_int, default=None, metavar="N",
                        help="keep at most N Mrvl subgraphs, those with the most MACs; the rest "
                             "runs on CPU")
    parser.add_argument("--deny", action="append", default=[], metavar="OP_TYPE|NODE_NAME",
                        help="keep this op type or node on CPU (repeatable)")
    parser.add_argument("--layer-set", choices=(MARVELL, UPSTREAM), default=MARVELL,
                        help="the Marvell layer kinds your backend compiler reads: the newer "
                             "Marvell codegen's (default) or upstream TVM 0.19's 12 composites")
    parser.add_argument("--quantize", choices=("int8",), default=None,
                        help="quantize each model first (onnxruntime quantize_static, QDQ, "
                             "symmetric per-tensor int8: Marvell's recipe) and emit int8 layers")
    parser.add_argument("--calibration", metavar="DATA.npz", default=None,
                        help="calibration samples for --quantize: an array per model input")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _add_draw_estimate_args(parser)
    return parser


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
        from .estimate import load_profile
        load_profile(args.hw_profile)   # a bad profile is reported once, not once per model
        return args.hw_profile
    return "builtin" if args.estimate else None


def _print_estimates(result, quiet: bool) -> None:
    from .estimate import format_table
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


def parse_shapes(specs: Sequence[str]) -> Dict[str, List[int]]:
    """``["x:1,3,224,224", ...]`` to ``{"x": [1, 3, 224, 224]}``; a UsageError if malformed."""
    shapes: Dict[str, List[int]] = {}
    for spec in specs:
        name, sep, dims = spec.rpartition(":")
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
        if name in shapes and shapes[name] != sizes:
            raise UsageError(f"--input-shape gives input {name!r} two different shapes")
        shapes[name] = sizes
    return shapes


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
    except MrvlConvertError as exc:
        _error(str(exc))
        return EXIT_USAGE
    try:
        return _convert(models, Path(args.output), shapes, args)
    except KeyboardInterrupt:
        _error("interrupted; models not finished were not written")
        return EXIT_INTERRUPTED


def _check_args(args: argparse.Namespace) -> Tuple[List[Path], Dict[str, List[int]]]:
    if not args.models:
        raise UsageError("no MODEL given")
    if not args.output:
        raise UsageError("-o OUT is required")
    shapes = parse_shapes(args.input_shape)
    for rule_file in args.rules:
        if not Path(rule_file).is_file():
            raise UsageError(f"--rules {rule_file}: no such file")
    args.estimate_option = _estimate_option(args)
    models = find_models(args.models, exclude=Path(args.output))
    if not models:
        raise UsageError("no ONNX model found")
    from .quantize import for_cli
    models = for_cli(models, args.quantize, args.calibration, args.layer_set)
    from .batch import prepare_out_dir
    prepare_out_dir(args.output)
    return models, shapes


def _list_rules(rule_files: Sequence[str], layer_set: str) -> int:
    from .rules.docs import list_rules_text
    from .rules.loader import load_rules
    try:
        text = list_rules_text(load_rules(list(rule_files), layer_set=layer_set))
    except MrvlConvertError as exc:
        _error(str(exc))
        return EXIT_FAILED
    sys.stdout.write(text)
    return EXIT_OK


def _convert(models: List[Path], out: Path, shapes: Dict[str, List[int]],
             args: argparse.Namespace) -> int:
    from .batch import convert_many
    from .rules.loader import load_rules
    try:
        # A bad rule file is reported once, not once per model.
        load_rules(list(args.rules), layer_set=args.layer_set)
    except MrvlConvertError as exc:
        _error(str(exc))
        return EXIT_FAILED
    with _Progress(len(models), quiet=args.quiet) as progress:
        try:
            result = convert_many(models, out, jobs=args.jobs, shapes=shapes, policy=args.policy,
                                  rules=list(args.rules), fail_fast=args.fail_fast,
                                  progress=progress.update, verify=args.verify,
                                  estimate=args.estimate_option, draw=args.draw,
                                  max_subgraphs=args.max_subgraphs, deny=list(args.deny),
                                  layer_set=args.layer_set)
        except MrvlConvertError as exc:
            progress.close()
            _error(str(exc))
            return EXIT_FAILED
    _report(result, out, shapes, quiet=args.quiet)
    _print_estimates(result, args.quiet)
    return EXIT_OK if result.all_ok else EXIT_FAILED


def _report(result, out: Path, shapes: Dict[str, List[int]], *, quiet: bool) -> None:
    for outcome in result:
        if outcome.status == "failed":
            _error(outcome.error or "failed")
            if outcome.traceback:
                sys.stderr.write(_indent(outcome.traceback))
    unused = [n for n in shapes if len(result) > 1 and all(n in o.ignored_shapes for o in result)]
    if unused:
        _error(f"warning: --input-shape {', '.join(unused)} matched no model's input")
    if not quiet:
        for outcome in result:
            if outcome.verify_note:
                sys.stdout.write(f"verify {outcome.name}: {outcome.verify_note}\n")
        sys.stdout.write(format_table(result))
        for outcome in result:
            line = cut_line(outcome, out)
            if line:
                sys.stdout.write(line + "\n")
        ok = len(result.ok)
        sys.stdout.write(f"{ok} of {len(result)} models converted into {out}; "
                         f"summary in {out / 'summary.json'}\n")


def _indent(text: str) -> str:
    return "".join(f"    {line}\n" for line in text.rstrip("\n").splitlines())


def format_table(result) -> str:
    """The summary table: one row per model, columns as in TABLE_COLUMNS."""
    rows = [list(TABLE_COLUMNS)]
    for o in result:
        counts = [str(o.counts.get(k, "")) if o.counts else "-" for k in
                  ("mrvl_nodes", "cpu_nodes", "mrvl_subgraphs", "cpu_subgraphs", "transitions")]
        share = "-" if o.mrvl_mac_share is None else f"{100 * o.mrvl_mac_share:.1f}%"
        error = "" if o.ok else _short(o.error_type or o.status)
        rows.append([o.name, o.status, *counts, share, f"{o.seconds:.2f}", error])
    widths = [max(len(r[i]) for r in rows) for i in range(len(TABLE_COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


def cut_line(outcome, out: Path) -> str:
    """'name: 12 cuts: Sigmoid x80, Mul x74; see OUT/name/report.json', for a model cut more
    than FEW_CUTS times; '' otherwise."""
    cuts = outcome.counts.get("transitions", 0) if outcome.counts else 0
    if cuts <= FEW_CUTS:
        return ""
    ops = ", ".join(f"{op} x{n}" for op, n in outcome.cut_by[:3])
    return f"{outcome.name}: {cuts} cuts: {ops}; see {out / outcome.name / 'report.json'}"


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _error(message: str, prog: str = "mrvl-convert") -> None:
    line = " ".join(message.split())
    sys.stderr.write(f"{prog}: {line}\n")
    sys.stderr.flush()


class _Progress:
    """A tqdm bar on a terminal; otherwise one plain line per finished model on stdout."""

    def __init__(self, total: int, *, quiet: bool, stream: Optional[TextIO] = None) -> None:
        self.stream = stream or sys.stdout
        self.quiet = quiet
        self.bar = None
        if not quiet and self.stream.isatty():
            from tqdm import tqdm
            self.bar = tqdm(total=total, unit="model", file=self.stream, dynamic_ncols=True)

    def update(self, outcome) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"{outcome.name}: {outcome.status}", refresh=False)
            self.bar.update(1)
        elif not self.quiet:
            self.stream.write(f"{outcome.status:<6} {outcome.name}  {outcome.model}  "
                              f"({outcome.seconds:.2f}s)\n")
            self.stream.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "_Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def verify_main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``mrvl-verify`` (lives in mrvl_convert.runtime.verify_cli)."""
    try:
        from .runtime.verify_cli import main as runtime_main
    except ImportError as exc:
        _error(f"mrvl-verify is not available: {exc}")
        return EXIT_USAGE
    return _guarded(runtime_main, list(sys.argv[1:] if argv is None else argv), "mrvl-verify")


def _entry() -> None:  # pragma: no cover - `python -m mrvl_convert.cli`
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    _entry()
