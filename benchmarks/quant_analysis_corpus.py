"""The per-layer int8 quantization table of one corpus model (docs/QUANTIZATION.md).

Builds the corpus model (the onnx wheel's light zoo model with seeded weights, as
``tests/support/corpus.py`` makes it) and seeded standard-normal calibration samples into OUT,
then runs ``mrvl-convert MODEL -o OUT/converted --quantize int8 --calibration CAL.npz
--quant-analysis`` (plus any extra arguments given after ``--``), which prints the table and
writes ``OUT/converted/<model>/quant_analysis.json``.

    python benchmarks/quant_analysis_corpus.py --model squeezenet --out /tmp/qa_corpus
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="squeezenet", help="a light zoo model name")
    parser.add_argument("--out", required=True, help="working directory")
    parser.add_argument("--samples", type=int, default=8, help="calibration samples")
    parser.add_argument("extra", nargs="*", help="more mrvl-convert arguments (after --)")
    args = parser.parse_args()

    from support import corpus
    from mrvl_convert.cli.convert import main as convert_main

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = corpus.zoo(args.model)
    path = out / f"{args.model}.onnx"
    onnx.save(model, path)
    tensor = model.graph.input[0]
    shape = [d.dim_value for d in tensor.type.tensor_type.shape.dim]
    rng = np.random.default_rng(0)
    samples = rng.standard_normal([args.samples] + shape[1:]).astype(np.float32)
    np.savez(out / "calibration.npz", **{tensor.name: samples})
    return convert_main([str(path), "-o", str(out / "converted"), "--quantize", "int8",
                         "--calibration", str(out / "calibration.npz"), "--quant-analysis",
                         *args.extra])


if __name__ == "__main__":
    sys.exit(main())
