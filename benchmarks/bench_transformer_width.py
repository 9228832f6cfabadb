"""How the hybrid's cost against onnxruntime falls as transformer blocks widen. Not a test.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_transformer_width.py [--runs 100] [--threads 1]
                                                                        [--widths 64 128 192 256]

The corpus's ``vit_tiny`` (64 tokens) and ``bert_tiny`` (16 tokens) at each channel width
(``tests/support/corpus_transformer.py``, 4 heads): for each, the Mrvl
subgraph count and the median latency of ``HybridSession`` and of onnxruntime on the original
model, timed in turn (``bench_partition.interleaved_ms``), and their ratio. Why: the fp16 number
model rounds every layer's output (a ``Cast`` pair per layer, and a LayerNorm is nine layers), so
the hybrid runs several times onnxruntime's node count; on narrow blocks the per-node cost is
most of the time, on wide ones the matrix products are.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from bench_partition import interleaved_ms, ort_session  # noqa: E402
from support import corpus, corpus_transformer  # noqa: E402

import mrvl_convert  # noqa: E402
from mrvl_convert.runtime import HybridSession  # noqa: E402


def models(width: int):
    heads = 4
    vit = corpus_transformer.vit_tiny(channels=width, heads=heads)
    yield "vit_tiny", vit, corpus.feeds(vit, None)
    yield "bert_tiny", corpus_transformer.bert_tiny(channels=width, heads=heads), \
        corpus_transformer.bert_feeds(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 128, 192, 256])
    args = parser.parse_args()
    print("| model | channels | Mrvl | hybrid (ms) | onnxruntime (ms) | ratio |")
    print("|---|---|---|---|---|---|")
    for width in args.widths:
        for name, model, feed in models(width):
            with tempfile.TemporaryDirectory() as tmp:
                result = mrvl_convert.convert(model, os.path.join(tmp, "art"))
                hybrid = HybridSession(result.out_dir, threads=args.threads)
                reference = ort_session(model, args.threads)
                ours, theirs = interleaved_ms([lambda: hybrid.run(None, feed),
                                               lambda: reference.run(None, feed)], args.runs)
                print(f"| {name} | {width} | {result.summary['mrvl_subgraphs']} | {ours:.3f} | "
                      f"{theirs:.3f} | {ours / theirs:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
