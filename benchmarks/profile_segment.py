"""Where a small network's graph-engine segment spends its nodes and time, against onnxruntime
on the original model. Not a test.

    python benchmarks/profile_segment.py [--threads 1] [--runs 300] [--models mobilenet_v3_small ...]

For each corpus model (or ``example``, the bundled RFC CNN) that runs as one graph-engine
segment: the nodes of the graph onnxruntime runs (after its optimizations,
``optimized_model_filepath``) by op type, for the original model and for the segment, and the median latency, timed in turn (``bench_partition.interleaved_ms``),
of onnxruntime on the original model and of the segment opened with the options of a model that
is one segment (workers may spin) in four ways: without onnxruntime's memory pattern, with it,
with it but without onnxruntime's NCHWc layout transformer, and with it but with every rounding
(a float32 -> float16 -> float32 Cast pair) taken out. The last one is not a simulation of the
device, only a floor: what the segment would cost if rounding to float16 were free, so the time
above it is what the roundings cost as onnxruntime nodes.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from support import corpus  # noqa: E402  (tests/support/corpus.py)

import mrvl_convert  # noqa: E402
from mrvl_convert.runtime import HybridSession  # noqa: E402
from mrvl_convert.runtime.options import session_options  # noqa: E402
from bench_partition import interleaved_ms  # noqa: E402


def _session(model: bytes, threads: int, arrays, optimized: Optional[str] = None,
             disabled: Optional[List[str]] = None, pattern: bool = False):
    import onnxruntime as ort

    options = session_options(threads, spin=True, mem_pattern=pattern)
    if arrays:
        options.add_external_initializers([n for n, _ in arrays],
                                          [ort.OrtValue.ortvalue_from_numpy(a) for _, a in arrays])
    if optimized:
        options.optimized_model_filepath = optimized
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"],
                                disabled_optimizers=disabled or [])


def _without_roundings(model: bytes) -> bytes:
    """``model`` with every float32 -> float16 -> float32 Cast pair taken out (its readers read
    what the pair rounded). A pair whose result is a graph output stays."""
    import onnx
    from onnx import TensorProto

    proto = onnx.load_from_string(model)
    graph, outputs = proto.graph, {value.name for value in proto.graph.output}
    to = {node.output[0]: onnx.helper.get_attribute_value(node.attribute[0])
          for node in graph.node if node.op_type == "Cast"}
    source = {node.output[0]: node.input[0] for node in graph.node if node.op_type == "Cast"}
    renamed, dropped = {}, set()
    for node in graph.node:
        out = node.output[0] if node.output else ""
        if node.op_type == "Cast" and to[out] == TensorProto.FLOAT and out not in outputs \
                and to.get(node.input[0]) == TensorProto.FLOAT16:
            renamed[out] = source[node.input[0]]
            dropped.update((out, node.input[0]))
    # onnxruntime runs an unread node all the same: the pair's first Cast goes too (each
    # float16 value of the segment is read by its pair's second Cast alone)
    kept = [node for node in graph.node if not node.output or node.output[0] not in dropped]
    for node in kept:
        node.input[:] = [renamed.get(name, name) for name in node.input]
    del graph.node[:]
    graph.node.extend(kept)
    return proto.SerializeToString()


def _ops(path: str) -> Dict[str, int]:
    import onnx

    graph = onnx.load(path, load_external_data=False).graph
    return dict(collections.Counter(node.op_type for node in graph.node).most_common())


def profile(name: str, threads: int, runs: int) -> str:
    model = corpus.model(name)
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
        arrays = segment.weights.items()
        reference = _session(model.SerializeToString(), threads, [], os.path.join(tmp, "o.onnx"),
                             pattern=True)
        without = _session(segment.model, threads, arrays, os.path.join(tmp, "s.onnx"))
        pattern = _session(segment.model, threads, arrays, pattern=True)
        no_nchwc = _session(segment.model, threads, arrays, disabled=["NchwcTransformer"],
                            pattern=True)
        free = _session(_without_roundings(segment.model), threads, arrays, pattern=True)
        times = interleaved_ms([lambda: reference.run(None, feed)] +
                               [lambda s=s: s.run(segment.fetches, inner)
                                for s in (without, pattern, no_nchwc, free)], runs)
        original, ours = _ops(os.path.join(tmp, "o.onnx")), _ops(os.path.join(tmp, "s.onnx"))
    ratios = [t / times[0] for t in times[1:]]
    return "\n".join([
        f"{name} @{threads}t: onnxruntime {times[0]:.3f} ms; segment without the memory pattern "
        f"{times[1]:.3f} ms ({ratios[0]:.2f}x), with it {times[2]:.3f} ms ({ratios[1]:.2f}x), "
        f"with it and without NCHWc {times[3]:.3f} ms ({ratios[2]:.2f}x), with it and without "
        f"roundings (the floor) {times[4]:.3f} ms ({ratios[3]:.2f}x); the hybrid opens it "
        f"{'with' if segment.pattern else 'without'} the pattern",
        f"  onnxruntime runs {sum(original.values())} nodes: {original}",
        f"  the segment runs {sum(ours.values())} nodes: {ours}"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--models", nargs="+", default=["mobilenet_v3_small", "mobilenet_v2",
                                                        "shufflenet_unit", "densenet_block"])
    args = parser.parse_args()
    for name in args.models:
        print(profile(name, args.threads, args.runs), flush=True)


if __name__ == "__main__":
    main()
