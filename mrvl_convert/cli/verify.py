"""``mrvl-verify MODEL ARTIFACT_DIR [--samples N] [--inputs file.npz|-input.json] [--gemm ENGINE]
[--engine graph|layers] [--layers] [--quant-analysis [--snr-threshold DB]]
[--write-outputs FILE.json] [--against FILE.json] [--criterion ours|marvell]
[--fp32-model FLOAT.onnx]``.

Runs the original model on fp32 onnxruntime and the artifact on the hybrid session, prints the
comparison table (with ``--layers``, a row for every Mrvl layer too). Exit status, as
``mrvl-convert``'s: 0 every model output within tolerance, 3 some is not (verify failed), 2 usage
error or a MrvlConvertError (one line on stderr, no traceback). Boundary and layer rows are
diagnostics: they never change the exit status.
"""
from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from mrvl_convert.cli.exits import guarded
from mrvl_convert.core.samples import (DEFAULT_VERIFY_SAMPLES, RANDOM, VERIFY_INPUTS,
                                       SampleOrigin)
from mrvl_convert.errors import ArtifactError, MrvlConvertError
from mrvl_convert.verify.compare import Comparison, compare
from mrvl_convert.verify.criteria import CRITERION_NAMES
from mrvl_convert.verify.feeds import load_npz_feeds
from mrvl_convert.verify.marvell_files import read_input_json, write_output_json
from mrvl_convert.verify.reference import default_feeds
from mrvl_convert.kernels.gemm import GEMM_ENGINES
from mrvl_convert.runtime.graph_engine import ENGINES
from mrvl_convert.runtime.session import HybridSession
from mrvl_convert.verify.tolerances import Tolerances, add_tolerance_args, parse_tolerance_specs

EXIT_PASSED, EXIT_USAGE, EXIT_VERIFY_FAILED = 0, 2, 3


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mrvl-verify",
        description="Compare a converted artifact directory (fp16 Mrvl simulator + onnxruntime) "
                    "with the original ONNX model on fp32 onnxruntime. The verdict is the model "
                    "outputs'; stage-boundary tensors and --layers rows are diagnostics.",
        epilog="Exit codes: 0 every output within tolerance, 2 usage error (or a model or "
               "artifact that cannot be read), 3 verify failed.")
    parser.add_argument("model", help="the original .onnx file")
    parser.add_argument("artifact_dir", help="the directory mrvl-convert wrote")
    parser.add_argument("--samples", type=int, default=None,
                        help="number of samples (random inputs: default "
                             f"{DEFAULT_VERIFY_SAMPLES}; with --inputs: the first N of the "
                             "file, default all)")
    parser.add_argument("--inputs", help=".npz whose arrays are named after the model inputs, "
                                         "each one sample or a stack of samples; or Marvell's "
                                         "-input.json ({\"inputs\": [[flat values], ...]}, "
                                         "one sample)")
    parser.add_argument("--write-outputs", metavar="FILE.json",
                        help="write the simulator's outputs on the (first) sample as Marvell's "
                             "-output.json")
    parser.add_argument("--against", metavar="FILE.json",
                        help="compare a device or mlsim -output.json with the simulator's "
                             "outputs on the same (first) sample instead of onnxruntime")
    parser.add_argument("--criterion", choices=CRITERION_NAMES, default="ours",
                        help="pass criterion of the verdict: 'ours' (the tolerances, default) "
                             "or 'marvell' (Marvell's compare_json.py: 3%% relative in fp16, "
                             "3 bit-steps in int8, elements under max/100 ignored)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--json", dest="json_path", help="also write the comparison as JSON")
    parser.add_argument("--gemm", choices=GEMM_ENGINES, default="numpy",
                        help="library that runs the simulator's matrix products (same fp16 "
                             "number model; onnxruntime is faster on large layers)")
    parser.add_argument("--engine", choices=ENGINES, default="graph",
                        help="how the simulator runs: 'graph' (runs of layers as onnxruntime "
                             "sessions) or 'layers' (numpy, one layer at a time: the "
                             "specification); same fp16 number model")
    parser.add_argument("--layers", action="store_true",
                        help="also compare every Mrvl layer's output with the tensor of the "
                             "original model it computes, to find the first layer that loses "
                             "accuracy (diagnostic rows: the exit status does not change)")
    parser.add_argument("--quant-analysis", action="store_true",
                        help="instead of the comparison: every Mrvl layer of an int8 artifact "
                             "against the float MODEL it was quantized from, SNR (dB) and "
                             "cosine, accumulated and isolated (diagnostic: exit status 0); of "
                             "an fp16 artifact, also each layer's weights rounded alone")
    parser.add_argument("--fp32-model", metavar="FLOAT.onnx",
                        help="int8 artifact verified against a QDQ MODEL: the fp32 model it was "
                             "quantized from, to report what quantization costs (cosine, SNR, "
                             "top-1 agreement per output; not part of the verdict). Given the "
                             "fp32 model as MODEL instead, mrvl-verify judges the artifact "
                             "against the QDQ model it keeps and reports the fp32 figures")
    parser.add_argument("--snr-threshold", type=float, default=20.0, metavar="DB",
                        help="--quant-analysis: name the layers below this SNR (default 20)")
    add_tolerance_args(parser)
    return parser


def verify_main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``mrvl-verify``: ``main``, an error that escapes it one line on stderr."""
    return guarded(main, list(sys.argv[1:] if argv is None else argv), "mrvl-verify")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    if args.samples is not None and args.samples < 1:
        print("mrvl-verify: error: --samples must be >= 1", file=sys.stderr)
        return EXIT_USAGE
    try:
        tolerances = Tolerances().with_bounds(parse_tolerance_specs(args.atol, "--atol"),
                                              parse_tolerance_specs(args.rtol, "--rtol"),
                                              "given with --atol/--rtol")
    except ValueError as exc:
        print(f"mrvl-verify: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        _check_artifact_dir(args.artifact_dir, args.model)
        feeds = _feeds(args)
        if args.quant_analysis:
            return _quant_analysis(args, feeds)
        if args.write_outputs:
            feeds = _write_outputs(args, feeds)
        reference, fp32, lines = _references(args)
        run = partial(compare, reference, args.artifact_dir, feeds, seed=args.seed,
                      samples=args.samples or DEFAULT_VERIFY_SAMPLES, gemm=args.gemm,
                      tolerances=tolerances, engine=args.engine, against=args.against,
                      criterion=args.criterion, fp32=None if args.against else fp32,
                      origin=_origin(args, feeds))
        result = run(layers=args.layers)
        if result.far_above_floor and not args.layers:
            result = run(layers=True)  # a converter defect: name the first layer over
    except MrvlConvertError as exc:
        print(f"mrvl-verify: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_USAGE
    unknown = _unknown_outputs([*tolerances.overrides], result)
    if unknown:
        print(f"mrvl-verify: error: --atol/--rtol name {', '.join(map(repr, unknown))}, which "
              f"is not an output of the model (outputs: "
              f"{', '.join(r.tensor for r in result.judged_rows)})", file=sys.stderr)
        return EXIT_USAGE
    print("\n".join(lines + [result.format_table()]))
    if _write_json(args.json_path, result.to_dict()) != EXIT_PASSED:
        return EXIT_USAGE
    return EXIT_PASSED if result.passed else EXIT_VERIFY_FAILED


def _references(args: argparse.Namespace) -> Tuple[str, Optional[str], List[str]]:
    """The model the verdict is judged against, the fp32 model of an int8 artifact's second
    reference (None if not known) and the lines saying which is which. An int8 artifact is
    judged against its QDQ model (is the conversion exact?): MODEL if it is one, else the QDQ
    model the artifact keeps, MODEL then being the fp32 reference (what quantization costs)."""
    from mrvl_convert.core.artifact import read_json
    from mrvl_convert.frontend.foreign_kept import WORDS, kept_reference
    section = read_json(Path(args.artifact_dir) / "manifest.json", "manifest").get(
        "quantization") or {}
    fp32 = args.fp32_model
    foreign = read_json(Path(args.artifact_dir) / "manifest.json", "manifest").get(
        "foreign_int8") or {}
    kept = kept_reference(args.artifact_dir)
    if kept is not None:  # another quantizer's model, requantized (foreign_kept.py)
        model, cost = WORDS.get(foreign.get("mode"), WORDS["requantize"])
        return str(kept), args.model, [
            f"another quantizer's model, rewritten: judged against {model} it was converted "
            f"from ({kept}: is the conversion exact?); {args.model} as given is the second "
            f"reference (what {cost} costs)"]
    if _is_qdq(args.model):
        return args.model, fp32, [] if fp32 else [
            "int8 artifact, judged against the QDQ model given; no fp32 reference: give "
            "--fp32-model FLOAT.onnx to see what quantization costs"]
    if not section:
        return args.model, fp32, []
    qdq = str(Path(args.artifact_dir) / section["file"])
    if not Path(qdq).is_file():
        return args.model, fp32, [f"int8 artifact whose QDQ model {qdq} is missing: judged "
                                  f"against {args.model} itself (quantization loss included)"]
    return qdq, fp32 or args.model, [
        f"int8 artifact: judged against the QDQ model it was converted from ({qdq}: is the "
        f"conversion exact?); {args.model} is the fp32 reference (what quantization costs)"]


def _origin(args: argparse.Namespace, feeds: Optional[List[Dict[str, np.ndarray]]]
            ) -> Optional[SampleOrigin]:
    """--inputs' samples are the user's verify inputs; random ones (made by --write-outputs,
    or by ``compare``, which says so itself) are random."""
    if feeds is None:
        return None
    return SampleOrigin(((VERIFY_INPUTS if args.inputs else RANDOM, len(feeds)),))


def _is_qdq(model: str) -> bool:
    from mrvl_convert.quantize.calibration import load_proto
    return any(n.op_type in ("QuantizeLinear", "DequantizeLinear")
               for n in load_proto(model).graph.node)


def _feeds(args: argparse.Namespace) -> Optional[List[Dict[str, np.ndarray]]]:
    if not args.inputs:
        return None
    specs = HybridSession(args.artifact_dir, engine="layers").input_specs
    if args.inputs.lower().endswith(".json"):
        return [read_input_json(args.inputs, specs)]
    return load_npz_feeds(args.inputs, specs, args.samples,
                          warn=lambda line: print(f"mrvl-verify: {line}", file=sys.stderr))


def _write_outputs(args: argparse.Namespace, feeds: Optional[List[Dict[str, np.ndarray]]]
                   ) -> List[Dict[str, np.ndarray]]:
    """The simulator's outputs on the first sample written; the feeds (made here when random,
    as ``compare`` would make them) handed on so the comparison runs the same inputs."""
    session = HybridSession(args.artifact_dir, gemm=args.gemm, engine=args.engine,
                            on_range_error="warn")
    if feeds is None:
        feeds = default_feeds(args.model, session.input_specs, args.seed,
                              args.samples or DEFAULT_VERIFY_SAMPLES)
    names = [spec.name for spec in session.output_specs]
    write_output_json(args.write_outputs, dict(zip(names, session.run(None, feeds[0]))))
    return feeds


def _quant_analysis(args: argparse.Namespace, feeds: Optional[List[Dict[str, np.ndarray]]]
                    ) -> int:
    from mrvl_convert.core.artifact import read_json
    from mrvl_convert.verify.criteria import quantize_of
    from mrvl_convert.verify.fp16_analysis import analyze_fp16
    from mrvl_convert.verify.quant_analysis import analyze_quantization

    manifest = read_json(Path(args.artifact_dir) / "manifest.json", "manifest")
    if quantize_of(manifest) == "fp16":  # fp16 sensitivity: the weights-alone figures too
        analysis = analyze_fp16(args.model, args.artifact_dir, feeds, seed=args.seed,
                                samples=args.samples or 1, gemm=args.gemm,
                                threshold_db=args.snr_threshold)
    else:
        analysis = analyze_quantization(args.model, args.artifact_dir, feeds, seed=args.seed,
                                        samples=args.samples or 1, gemm=args.gemm,
                                        threshold_db=args.snr_threshold)
    print(analysis.format_table())
    return _write_json(args.json_path, analysis.to_dict())


def _write_json(path: Optional[str], doc: Dict) -> int:
    if path:
        try:
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(doc, handle, indent=1)
        except OSError as exc:
            print(f"mrvl-verify: error: cannot write {path}: {exc.strerror or exc}",
                  file=sys.stderr)
            return EXIT_USAGE
    return EXIT_PASSED


def _unknown_outputs(named: Sequence[str], result: Comparison) -> List[str]:
    """Tolerance names that are no output: a typo, which would otherwise check nothing."""
    return sorted(set(named) - {row.tensor for row in result.judged_rows})


def _check_artifact_dir(directory: str, model: str) -> None:
    """An ArtifactError for a directory without manifest.json, naming the artifact directory
    meant when ``directory`` is mrvl-convert's OUT (it holds OUT/<model name>/manifest.json)."""
    root = Path(directory)
    if (root / "manifest.json").is_file():
        return
    from mrvl_convert.frontend.load import safe_name
    candidates = [p.parent for p in sorted(root.glob("*/manifest.json"))]
    meant = root / safe_name(Path(model).stem)
    if meant in candidates:
        hint = f"; {root} is mrvl-convert's output directory: did you mean {meant}?"
    elif candidates:
        hint = (f"; artifact directories in it: "
                f"{', '.join(str(p) for p in candidates[:5])}")
    else:
        hint = ""
    raise ArtifactError(f"{root / 'manifest.json'}: manifest not found{hint}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
