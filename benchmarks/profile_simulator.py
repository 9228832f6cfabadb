"""Where the simulator's time goes, per layer kind: kernel time vs fp16 rounding time.

    python benchmarks/profile_simulator.py [--model resnet50] [--runs 5] [--threads 1]
                                           [--gemm numpy|onnxruntime]

Converts the model (single policy) to a temporary directory, compiles its Mrvl subgraph with
``MrvlSimulator`` and runs it step by step, timing each kernel's ``run`` and the fp16 rounding
of its output separately (the same two calls ``CompiledSubgraph.run`` makes). Conv2D rows are
split by algorithm (gemm, winograd, depthwise, grouped), kernel size, stride and output size.
Not a test.
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_simulator  # noqa: E402  (benchmarks/bench_simulator.py: models, BLAS info)

from mrvl_convert import convert  # noqa: E402
from mrvl_convert.kernels.fp16 import round_to_fp16  # noqa: E402
from mrvl_convert.kernels.gemm import GEMM_ENGINES, GemmEngine  # noqa: E402
from mrvl_convert.layers.conv2d import Conv2DKernel as Conv2D  # noqa: E402
from mrvl_convert.layers.fc import FCKernel as FC  # noqa: E402
from mrvl_convert.runtime.simulator import CompiledSubgraph, MrvlSimulator  # noqa: E402


def row_key(step) -> str:
    kernel = step.kernel
    name = type(kernel).__name__
    if not isinstance(kernel, Conv2D):
        return name
    (kh, kw), (oh, ow) = kernel.kernel_hw, kernel.out_hw
    return f"{name} {kernel.mode} {kh}x{kw}/s{kernel.strides[0]} out {oh}x{ow}"


def flops(step) -> int:
    """Floating-point operations of a Conv2D / FC layer counted as a direct convolution
    (2 per multiply-add, whatever algorithm runs it); 0 for other layers."""
    kernel, spec = step.kernel, step.spec
    if isinstance(kernel, Conv2D):
        kh, kw = kernel.kernel_hw
        in_channels = spec.input_shapes[0][3] // kernel.groups
        return 2 * int(np.prod(spec.shape)) * kh * kw * in_channels
    if isinstance(kernel, FC):
        return 2 * int(np.prod(spec.shape)) * spec.input_shapes[0][1]
    return 0


def profile(compiled: CompiledSubgraph, feed: Dict[str, np.ndarray],
            runs: int) -> Dict[str, List[float]]:
    """{row: [kernel seconds, rounding seconds, layers, flops]} per run, averaged over ``runs``
    runs after one warm-up; values are freed when no later step needs them, as in the
    simulator."""
    totals: Dict[str, List[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0, 0])
    for run in range(runs + 1):
        values = compiled._feed(feed, "raise", [])
        for step in compiled.steps:
            start = time.perf_counter()
            out = step.kernel.run(*(values[i] for i in step.inputs))
            middle = time.perf_counter()
            if not step.kernel.exact:
                out, _ = round_to_fp16(out, inplace=True)
            end = time.perf_counter()
            values[step.node] = out
            for index in step.release:
                del values[index]
            if run:
                row = totals[row_key(step)]
                row[0] += middle - start
                row[1] += end - middle
                row[2] += 1
                row[3] += flops(step)
    return {key: [k / runs, r / runs, n // runs, f // runs]
            for key, (k, r, n, f) in totals.items()}


def onnxruntime_ms(model, x: np.ndarray, runs: int, threads: int) -> float:
    """Median latency of onnxruntime fp32 on the original (NCHW) model, fed x."""
    session = bench_simulator.ort_session(model, threads)
    feed = {session.get_inputs()[0].name: x}
    return bench_simulator.median_ms(lambda: session.run(None, feed), runs, 3)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", choices=sorted(bench_simulator.MODELS))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1,
                        help="OpenBLAS threads (and the onnxruntime GEMM engine's)")
    parser.add_argument("--gemm", default="numpy", choices=GEMM_ENGINES,
                        help="the simulator's GEMM engine (mrvl_convert/kernels/gemm.py)")
    args = parser.parse_args(argv)
    blas = bench_simulator.blas_info(args.threads)
    model = bench_simulator.MODELS[args.model]()
    with tempfile.TemporaryDirectory() as tmp:
        convert(model, tmp + "/m", policy="single")
        nodes = glob.glob(tmp + "/m/*-nodes.json")
        if len(nodes) != 1:
            parser.error(f"expected one Mrvl subgraph, got {len(nodes)}")
        compiled = MrvlSimulator(gemm=GemmEngine(args.gemm, args.threads)).compile(
            nodes[0], nodes[0].replace("-nodes", "-consts"))
    inp = compiled.inputs[0]
    feed = {inp.name: np.random.default_rng(0).standard_normal(inp.shape).astype(np.float32)}
    rows = profile(compiled, feed, args.runs)
    total = sum(k + r for k, r, _, _ in rows.values())
    ordered: List[Tuple[str, List[float]]] = sorted(rows.items(), key=lambda kv: -sum(kv[1][:2]))
    print(f"{'layer kind':38s} {'layers':>6s} {'kernel ms':>10s} {'round ms':>9s} {'share':>6s} "
          f"{'GFLOP/s':>8s}")
    for key, (k, r, n, f) in ordered:
        rate = f"{f / k / 1e9:8.0f}" if f else ""
        print(f"{key:38s} {n:6d} {1e3 * k:10.2f} {1e3 * r:9.2f} {100 * (k + r) / total:5.1f}% "
              f"{rate}")
    kernel_ms = 1e3 * sum(k for k, _, _, _ in rows.values())
    model_flops = sum(f for _, _, _, f in rows.values())
    print(f"{'total':38s} {'':6s} {kernel_ms:10.2f} {1e3 * total - kernel_ms:9.2f} {'':6s} "
          f"{model_flops / total / 1e9:8.0f}")
    ort_ms = onnxruntime_ms(model, feed[inp.name], args.runs, args.threads)
    print(f"onnxruntime fp32 on the same model: {ort_ms:.2f} ms per run, "
          f"{model_flops / ort_ms / 1e6:.0f} GFLOP/s over the same {model_flops / 1e9:.2f} GFLOP")
    print(f"simulator: mean of {args.runs} runs after 1 warm-up; onnxruntime: median of "
          f"{args.runs} after 3; gemm={args.gemm}; {blas}. GFLOP/s counts convolutions as "
          f"direct ones, so Winograd rows, which multiply less, show more than the hardware does.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
