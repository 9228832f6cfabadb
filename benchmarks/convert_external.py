"""Convert a model nobody here wrote and say how it partitions and how close the hybrid is. Not
a test.

    python benchmarks/convert_external.py MODEL.onnx --input-shape x:1,3,48,320 [--seed 0]
        [--runs 200 [--threads 1]]

Prints the Mrvl and CPU subgraph counts, each CPU node's op and reason (counted), and the
model outputs' comparison with onnxruntime fp32 on one standard-normal input
(``mrvl_convert.compare``, default tolerances). With ``--runs``: the median latency of the
hybrid (``HybridSession.run``) and of onnxruntime on the model, timed in turn
(``bench_partition.interleaved_ms``). Used on models shipped in PyPI wheels, e.g.
rapidocr-onnxruntime's PP-OCRv4 recognizer (docs/BENCHMARKS.md).
"""
from __future__ import annotations

import argparse
import collections
import tempfile

import numpy as np

import mrvl_convert


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--input-shape", required=True, help="NAME:D0,D1,... (one input)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    name, dims = args.input_shape.split(":")
    shape = [int(d) for d in dims.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        result = mrvl_convert.convert(args.model, f"{tmp}/art", shapes={name: shape})
        summary = result.summary
        print(f"Mrvl subgraphs {summary['mrvl_subgraphs']}, CPU subgraphs "
              f"{summary['cpu_subgraphs']}")
        cpu = collections.Counter((e["op_type"], e.get("reason", ""))
                                  for e in result.report["nodes"] if e["placement"] == "cpu")
        for (op, reason), count in cpu.most_common():
            print(f"  CPU: {op} x{count}: {reason}")
        feed = {name: np.random.default_rng(args.seed).standard_normal(shape).astype(np.float32)}
        comparison = mrvl_convert.compare(args.model, result.out_dir, feed)
        for row in comparison.rows:
            if row.kind == "output":
                print(f"  output {row.tensor}: max abs {row.max_abs:.3g}, max rel "
                      f"{row.max_rel:.3g}, cosine {row.cosine:.6f}, within tolerance: "
                      f"{row.passed}")
        if args.runs:
            print(_timing(args.model, result.out_dir, feed, args.runs, args.threads))


def _timing(model: str, out_dir: str, feed, runs: int, threads: int) -> str:
    import onnxruntime as ort

    from bench_partition import interleaved_ms
    from mrvl_convert.runtime import HybridSession

    hybrid = HybridSession(out_dir, threads=threads)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    reference = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    ort_ms, hybrid_ms = interleaved_ms([lambda: reference.run(None, feed),
                                        lambda: hybrid.run(None, feed)], runs)
    return (f"  @{threads}t: onnxruntime {ort_ms:.2f} ms, hybrid {hybrid_ms:.2f} ms "
            f"({hybrid_ms / ort_ms:.2f}x)")


if __name__ == "__main__":
    main()
