"""What a second thread can give the simulator, measured two ways. Not a test.

    python benchmarks/bench_threads.py [--runs 20]

1. **Fine grain**: the fp16 rounding of one 56x56x256 layer output (the simulator's commonest
   elementwise pass). Its numpy method once on the calling thread and once split in two halves,
   one per thread: numpy releases the GIL inside each call, but the rounding is a chain of short
   calls (six per 64K-element chunk), and every call hands the GIL back and forth between the
   two threads. Then its onnxruntime method (one Cast session, fp16.py), which the simulator
   uses for an array this large.
2. **Coarse grain**: ResNet-50 through one HybridSession called by two threads at once (one
   image per call, OpenBLAS at one thread), against one thread alone: the per-image time of the
   pair is the throughput a validation loop gets, and bounds what splitting every layer across
   two threads could reach for one image.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, List, Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_simulator  # noqa: E402  (models, BLAS info, median_ms)

from mrvl_convert import convert  # noqa: E402
from mrvl_convert.runtime import HybridSession  # noqa: E402
from mrvl_convert.kernels.fp16 import round_to_fp16  # noqa: E402
from mrvl_convert.kernels.ufuncs import CHUNK  # noqa: E402


def rounding_us(runs: int) -> tuple:
    """Median microseconds of one in-place rounding: (numpy method on one thread, numpy method
    split over two threads, onnxruntime method)."""
    x = np.random.default_rng(0).standard_normal(56 * 56 * 256).astype(np.float32)
    half = (x.size // 2 // CHUNK) * CHUNK   # both halves start on a chunk boundary
    pool = ThreadPoolExecutor(1)

    def serial(y: np.ndarray) -> None:
        round_to_fp16(y, inplace=True, method="numpy")

    def split(y: np.ndarray) -> None:
        other = pool.submit(round_to_fp16, y[half:], inplace=True, method="numpy")
        round_to_fp16(y[:half], inplace=True, method="numpy")
        other.result()

    def onnxruntime(y: np.ndarray) -> None:
        round_to_fp16(y, inplace=True, method="onnxruntime")

    def timed(fn: Callable[[np.ndarray], object]) -> float:
        times = []
        for _ in range(runs * 10):
            y = x.copy()
            start = time.perf_counter()
            fn(y)
            times.append(time.perf_counter() - start)
        return 1e6 * float(np.median(times))

    try:
        return timed(serial), timed(split), timed(onnxruntime)
    finally:
        pool.shutdown()


def resnet_ms(runs: int) -> tuple:
    """Per-image milliseconds: (one thread, two threads calling one session at once)."""
    with tempfile.TemporaryDirectory() as tmp:
        convert(bench_simulator.MODELS["resnet50"](), tmp + "/r")
        session = HybridSession(tmp + "/r")
    spec = session.get_inputs()[0]
    feed = {spec.name: np.random.default_rng(0).standard_normal(spec.shape).astype(np.float32)}
    alone = bench_simulator.median_ms(lambda: session.run(None, feed), runs, 3)

    def loop() -> None:
        for _ in range(runs):
            session.run(None, feed)

    threads = [threading.Thread(target=loop) for _ in range(2)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return alone, 1e3 * (time.perf_counter() - start) / (2 * runs)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)
    blas = bench_simulator.blas_info(1)
    serial_us, split_us, ort_us = rounding_us(args.runs)
    print(f"fp16 rounding of 56x56x256, numpy method: one thread {serial_us:.0f} us, "
          f"two threads {split_us:.0f} us (x{serial_us / split_us:.2f}); onnxruntime method: "
          f"{ort_us:.0f} us (x{serial_us / ort_us:.2f})")
    alone, paired = resnet_ms(args.runs)
    print(f"ResNet-50 hybrid, one HybridSession: one thread {alone:.1f} ms per image, two "
          f"threads {paired:.1f} ms per image (x{alone / paired:.2f} throughput)")
    print(f"{blas}; {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
