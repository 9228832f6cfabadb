"""The hybrid's own time per call on small models: ``HybridSession.run`` against a direct call
of the one onnxruntime session it runs (the fused session), and onnxruntime on the original
model. Not a test.

    python benchmarks/bench_call_overhead.py [--runs 3000] [--models shufflenet_unit ...]

``--models example`` takes the bundled RFC CNN.

The three are timed in turn (``bench_partition.interleaved_ms``), at one thread. "Python" is
the median of ``HybridSession.run`` minus that of its session alone: checking the feed, naming
the inputs, the range check, handing back the outputs.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from support import corpus  # noqa: E402  (tests/support/corpus.py)

import mrvl_convert  # noqa: E402
from mrvl_convert.runtime import HybridSession  # noqa: E402
from bench_partition import interleaved_ms, ort_session  # noqa: E402


def bench(name: str, runs: int) -> str:
    model = corpus.model(name)
    shapes = corpus.shapes_for(name)
    feed = corpus.feeds(model, shapes)
    with tempfile.TemporaryDirectory() as tmp:
        result = mrvl_convert.convert(model, os.path.join(tmp, "art"), shapes=shapes)
        hybrid = HybridSession(result.out_dir, threads=1)
        hybrid.run(None, feed)
        if not hybrid.fused:
            return f"{name}: not one session ({hybrid.fused_reason}), skipped"
        fused = hybrid._fused  # the one session the call runs, and what it is asked for
        inner = feed if fused.renamed is None else \
            {inside: feed[outside] for inside, outside in fused.renamed}
        reference = ort_session(model, 1)
        ort_ms, hybrid_ms, alone_ms = interleaved_ms(
            [lambda: reference.run(None, feed), lambda: hybrid.run(None, feed),
             lambda: fused.session.run(fused.fetches, inner)], runs)
    return (f"{name}: onnxruntime {1000 * ort_ms:.1f} us, HybridSession.run {1000 * hybrid_ms:.1f} "
            f"us ({hybrid_ms / ort_ms:.2f}x), its session alone {1000 * alone_ms:.1f} us "
            f"({alone_ms / ort_ms:.2f}x); Python {1000 * (hybrid_ms - alone_ms):.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3000)
    parser.add_argument("--models", nargs="+", default=["shufflenet_unit", "paddle_cnn",
                                                        "mobilenet_v2", "bert_tiny"])
    args = parser.parse_args()
    for name in args.models:
        print(bench(name, args.runs), flush=True)


if __name__ == "__main__":
    main()
