"""The sha256 of every file the converter writes for the bundled example and the corpus. Not a test.

    python benchmarks/artifact_hashes.py [--write FILE] [--check FILE] [--models resnet50 ...]

Converts the example (both policies, both layer sets, int8 on its held-out images, with
``estimate`` and ``draw``) and every corpus model of ``tests/support/corpus.py`` (fp16, default
options; the small built ones in int8 too), then prints or writes a JSON object mapping
``<case>/<file>`` to its sha256. ``--check FILE`` compares with a file written before (a
restructuring must leave every artifact byte-identical) and exits 1 naming each difference.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))
from support import corpus  # noqa: E402  (tests/support/corpus.py)

import mrvl_convert  # noqa: E402
from mrvl_convert.quantize.recipe import Quantization  # noqa: E402

EXAMPLE = ROOT / "examples" / "mnist_cnn" / "mnist_cnn.onnx"
INPUT = "input"
INT8_BUILT = ("mobilenet_v2", "densenet_block", "paddle_cnn", "mobilenet_v3_small")


def _digest(out_dir: Path, case: str, into: Dict[str, str]) -> None:
    for path in sorted(p for p in out_dir.rglob("*") if p.is_file()):
        into[f"{case}/{path.relative_to(out_dir).as_posix()}"] = hashlib.sha256(
            path.read_bytes()).hexdigest()


def _example_cases() -> Dict[str, Callable[[Path], object]]:
    images = np.load(ROOT / "examples" / "mnist_cnn" / "heldout.npz")
    calib = {INPUT: images["images"][:16].astype(np.float32)}
    return {
        "example-multi": lambda out: mrvl_convert.convert(str(EXAMPLE), out, estimate=True,
                                                          draw=True),
        "example-single": lambda out: mrvl_convert.convert(str(EXAMPLE), out, policy="single"),
        "example-upstream": lambda out: mrvl_convert.convert(str(EXAMPLE), out,
                                                             layer_set="upstream-0.19"),
        "example-int8": lambda out: mrvl_convert.convert(
            str(EXAMPLE), out, quantize=Quantization(calib), estimate=True),
    }


def _corpus_cases(names: List[str]) -> Dict[str, Callable[[Path], object]]:
    cases: Dict[str, Callable[[Path], object]] = {}
    for name in names:
        is_zoo = name in corpus.ZOO
        shapes = corpus.PADDLE_SHAPES if name == "paddle_cnn" else None

        def build(name=name, is_zoo=is_zoo):
            return corpus.zoo(name) if is_zoo else corpus.built(name)

        cases[name] = lambda out, build=build, shapes=shapes: mrvl_convert.convert(
            build(), out, shapes=shapes, name="model")
        if name in INT8_BUILT:
            def int8(out, build=build, shapes=shapes):
                model = build()
                feeds = [corpus.feeds(model, shapes, seed=s) for s in range(8)]
                calib = {k: np.concatenate([f[k] for f in feeds]) for k in feeds[0]}
                return mrvl_convert.convert(model, out, shapes=shapes, name="model",
                                            quantize=Quantization(calib))
            cases[f"{name}-int8"] = int8
    return cases


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write")
    parser.add_argument("--check")
    parser.add_argument("--models", nargs="*", default=None)
    args = parser.parse_args(argv)
    names = args.models if args.models is not None else list(corpus.ZOO) + list(corpus.BUILT)
    cases = {**_example_cases(), **_corpus_cases(names)}
    hashes: Dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for case, run in cases.items():
            out = Path(tmp) / case
            run(out)
            _digest(out, case, hashes)
            print(f"{case}: done", file=sys.stderr)
    if args.write:
        Path(args.write).write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")
    if args.check:
        want = json.loads(Path(args.check).read_text())
        # Only the cases run here are compared (``--models`` runs a subset).
        want = {k: v for k, v in want.items() if k.split("/", 1)[0] in cases}
        diff = sorted(k for k in set(want) | set(hashes) if want.get(k) != hashes.get(k))
        for key in diff:
            print(f"differs: {key} ({want.get(key, 'absent')[:12]} -> "
                  f"{hashes.get(key, 'absent')[:12]})")
        print(f"{len(hashes)} files, {len(diff)} differ")
        return 1 if diff else 0
    if not args.write:
        print(json.dumps(hashes, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
