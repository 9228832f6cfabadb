"""What onnxruntime's memory pattern buys a graph-engine segment, against onnxruntime on the
original model. Not a test.

    python benchmarks/bench_mem_pattern.py [--threads 1] [--runs 300] [--models mobilenet_v2 ...]

For each corpus model that runs as one graph-engine segment, opens that segment's model twice,
with the session options of a model that is one segment (workers may spin) and the memory
pattern off and on, and times both and onnxruntime on the original model in turn
(``bench_partition.interleaved_ms``), so that their ratios survive a shared machine's load.
Prints one line per model.
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
from mrvl_convert.runtime.options import session_options  # noqa: E402
from bench_partition import interleaved_ms, ort_session  # noqa: E402

SMALL = ("mobilenet_v3_small", "mobilenet_v2", "shufflenet_unit", "densenet_block", "paddle_cnn",
         "vit_tiny", "svtr_mix", "c2psa", "squeezenet")


def segment_sessions(segment, threads: int):
    """The segment's model opened with the memory pattern off and on."""
    import onnxruntime as ort

    made = []
    for pattern in (False, True):
        options = session_options(threads, spin=True, mem_pattern=pattern)  # as a lone one
        arrays = segment.weights.items()
        if arrays:
            options.add_external_initializers([name for name, _ in arrays],
                                              [ort.OrtValue.ortvalue_from_numpy(a)
                                               for _, a in arrays])
        made.append((ort.InferenceSession(segment.model, options,
                                          providers=["CPUExecutionProvider"]), arrays))
    return made


def bench(name: str, threads: int, runs: int) -> str:
    model = corpus.zoo(name) if name in corpus.ZOO else corpus.built(name)
    shapes = corpus.shapes_for(name)
    feed = corpus.feeds(model, shapes)
    with tempfile.TemporaryDirectory() as tmp:
        result = mrvl_convert.convert(model, os.path.join(tmp, "art"), shapes=shapes)
        hybrid = HybridSession(result.out_dir, threads=threads)
        parts = hybrid.stages[0].runner.graph.parts if len(hybrid.stages) == 1 else []
        if len(parts) != 1:
            return f"{name}: not one graph-engine segment, skipped"
        segment, stage = parts[0], hybrid.stages[0]
        by_node = {node.index: spec.name for node, spec in zip(stage.runner.inputs, stage.inputs)}
        inner = {value: feed[by_node[node]] for value, node, _ in segment.feeds}
        (off, _), (on, _) = segment_sessions(segment, threads)
        reference = ort_session(model, threads)
        ort_ms, off_ms, on_ms = interleaved_ms(
            [lambda: reference.run(None, feed), lambda: off.run(segment.fetches, inner),
             lambda: on.run(segment.fetches, inner)], runs)
    return (f"{name} @{threads}t: onnxruntime {ort_ms:.3f} ms, segment {off_ms:.3f} ms "
            f"({off_ms / ort_ms:.2f}x) without the pattern, {on_ms:.3f} ms ({on_ms / ort_ms:.2f}x) "
            "with it")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--models", nargs="+", default=list(SMALL))
    args = parser.parse_args()
    for name in args.models:
        print(bench(name, args.threads, args.runs), flush=True)


if __name__ == "__main__":
    main()
