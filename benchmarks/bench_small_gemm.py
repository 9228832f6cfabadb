"""Why ResNet-50's 7x7-output stage is slow on numpy: a GEMM with few rows pays for its weights.

    python benchmarks/bench_small_gemm.py [--threads 1]

Times ``x @ w`` for the stage's weight shapes (K x N) at several row counts M (49 = 7x7 pixels),
with the weights cold (cycling through 24 copies, about 100 MB, more than the L3 cache) and
warm (one copy). If the time barely grows with M, the cost is in touching the weights (OpenBLAS
packs them on every call), not in the multiply-adds. Not a test.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import List, Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_simulator  # noqa: E402  (BLAS info and thread setting)

SHAPES = [(2048, 512), (4608, 512), (512, 2048)]
ROWS = [32, 49, 64, 98]
COPIES = 24


def best_ms(fn, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        for i in range(COPIES):
            fn(i)
        best = min(best, (time.perf_counter() - start) / COPIES)
    return 1e3 * best


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="OpenBLAS threads")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    blas = bench_simulator.blas_info(args.threads)
    rng = np.random.default_rng(0)
    print(f"{'K x N':>12s} {'M':>4s} {'cold ms':>8s} {'warm ms':>8s} {'cold GFLOP/s':>13s}")
    for k, n in SHAPES:
        weights = [rng.standard_normal((k, n), dtype=np.float32) for _ in range(COPIES)]
        for m in ROWS:
            x = rng.standard_normal((m, k), dtype=np.float32)
            cold = best_ms(lambda i: x @ weights[i], args.reps)
            warm = best_ms(lambda i: x @ weights[0], args.reps)
            print(f"{k:>6d} x {n:<4d} {m:4d} {cold:8.3f} {warm:8.3f} "
                  f"{2 * m * k * n / cold / 1e6:13.0f}")
    print(f"best of {args.reps} passes over {COPIES} weight copies; {blas}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
