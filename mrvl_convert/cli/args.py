"""``mrvl-convert``'s command line: the parser, and what its arguments mean (the shapes, the
models, the options of the conversion and of ``--verify``). Every mistake is a UsageError."""
from __future__ import annotations

import argparse
import glob
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from mrvl_convert.core.paths import below, real_entry
from mrvl_convert.version import __version__
from mrvl_convert.batch.plan import VerifyOptions
from mrvl_convert.cli.fp16 import add_fp16_args
from mrvl_convert.cli.quant import add_quant_args
from mrvl_convert.layers import MARVELL, UPSTREAM
from mrvl_convert.options import ConvertOptions
from mrvl_convert.quantize.recipe import Quantization


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
    parser.add_argument("--input-value", action="append", default=[], metavar="NAME=V",
                        help="pin an input to a value for the conversion, e.g. sr=16000 (a "
                             "list: mode=1,0): an If it decides becomes its branch; the "
                             "artifact computes the model for this value only (repeatable)")
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
                        help="also show onnxruntime's and onnx-graphsurgeon's own warnings, "
                             "and every layer in the --estimate table")
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
                             "Marvell codegen's, as one commit of a public fork has them "
                             "(default), or upstream TVM 0.19's 12 composites, the codegen of "
                             "Marvell's released flow (the table's codegen column says which "
                             "each artifact needs)")
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
    parser.add_argument("--foreign-int8", choices=("requantize", "fp16"), default="requantize",
                        help="a QDQ model from another quantizer (per-channel weights, uint8 or "
                             "zero-point activations): requantize it to per-tensor symmetric "
                             "int8, the cost measured and printed (default), or run it in fp16")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    add_quant_args(parser)
    add_fp16_args(parser)
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
    parser.add_argument("--criterion", choices=("ours", "marvell"), default=None,
                        help="--verify: pass criterion, 'ours' (the tolerances, default) or "
                             "'marvell' (Marvell's compare_json.py: 3%% relative in fp16, 3 "
                             "bit-steps in int8, elements under max/100 ignored)")


def verify_options(args: argparse.Namespace) -> Optional[VerifyOptions]:
    """None, or the VerifyOptions of --verify and its tolerances and inputs."""
    given = [o for o, v in (("--atol", args.atol), ("--rtol", args.rtol),
                            ("--verify-inputs", args.verify_inputs),
                            ("--criterion", args.criterion)) if v]
    if not args.verify:
        if given:
            raise UsageError(f"{given[0]} needs --verify")
        return None
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
                         log_severity=WARNINGS if args.verbose else QUIET,
                         criterion=args.criterion or "ours")


# ---- --draw / --estimate (issue 20): kept in one block ---------------------------------------

def _add_draw_estimate_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--draw", action="store_true",
                        help="also write <name>.html (the partition, coloured by stage) and "
                             "<name>.placement.onnx (the model annotated for Netron)")
    parser.add_argument("--estimate", action="store_true",
                        help="add an accelerator cost ESTIMATE to report.json and print its "
                             "totals per model and stage (every layer with -v; a roofline "
                             "model, not a measurement: docs/ESTIMATE.md)")
    parser.add_argument("--hw-profile", metavar="FILE", default=None,
                        help="hardware profile for --estimate (YAML/JSON; default: built-in "
                             "cn10ka fp16, 8 tiles)")
    parser.add_argument("--one-device", action="store_true",
                        help="the models are loaded on one device together: the device check "
                             "counts their model slots together (docs/BOARD.md)")


def estimate_option(args: argparse.Namespace) -> Union[None, bool, str]:
    """``ConvertOptions.estimate`` of --estimate [--hw-profile FILE]."""
    if args.hw_profile and not args.estimate:
        raise UsageError("--hw-profile needs --estimate")
    if args.hw_profile:
        from mrvl_convert.estimate import load_profile
        load_profile(args.hw_profile)   # a bad profile is reported once, not once per model
        return args.hw_profile
    return True if args.estimate else None


def convert_options(args: argparse.Namespace, estimate: Union[None, bool, str],
                    quantize: Optional[Quantization]) -> ConvertOptions:
    """The options every model is converted with (its input shapes are the batch's)."""
    return ConvertOptions(policy=args.policy, rules=list(args.rules), layer_set=args.layer_set,
                          max_subgraphs=args.max_subgraphs, deny=list(args.deny),
                          min_compute_layers=args.min_compute_layers, estimate=estimate,
                          draw=args.draw, quantize=quantize,
                          values=parse_values(args.input_value) or None,
                          foreign_int8=args.foreign_int8)


_NUMBER = re.compile(r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?")


def parse_values(specs: Sequence[str]) -> Dict[str, Any]:
    """``--input-value NAME=V`` options as ``convert``'s ``values``: V a number, ``true`` or
    ``false``, or a comma-separated list of them; a UsageError if one is malformed or one input
    is given two values."""
    values: Dict[str, Any] = {}
    for spec in specs:
        name, sep, text = spec.partition("=")
        if not sep or not name or not text:
            raise UsageError(f"--input-value {spec!r}: expected NAME=V, e.g. sr=16000")
        items = [_scalar(spec, t.strip()) for t in text.split(",")]
        value = items if "," in text else items[0]
        if values.get(name, value) != value:
            raise UsageError(f"--input-value gives input {name!r} two different values")
        values[name] = value
    return values


def _scalar(spec: str, text: str) -> Any:
    if text in ("true", "false"):
        return text == "true"
    if not _NUMBER.fullmatch(text):
        raise UsageError(f"--input-value {spec!r}: {text!r} is not a number (nor true/false)")
    is_int = re.fullmatch(r"[-+]?[0-9]+", text)
    return int(text) if is_int else float(text)


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
    return below(path, directory)


def _dedupe(paths: List[Path]) -> List[Path]:
    seen, unique = set(), []
    for p in paths:
        key = real_entry(p)
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique
