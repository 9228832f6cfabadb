"""Batch conversion throughput: models per minute with --jobs 1 and --jobs 2.

    python benchmarks/bench_throughput.py [--jobs 1 2] [--repeat 1] [--quick]

Converts a fixed set of 8 models (the trained MNIST example when present, small Conv+Relu+MaxPool+
Gemm CNNs, and ResNet-style networks from benchmarks/models.py up to ``resnet(depths=(2,2,2,2))``)
with ``mrvl_convert.convert_many`` exactly as ``mrvl-convert MODELS -o OUT --jobs N`` does, and
prints the wall time (process-pool start-up included), models per minute, the speed-up over
jobs=1, and whether the artifact files are byte-identical across job counts. Not a test.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

import onnx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))                  # benchmarks/models.py
sys.path.append(str(HERE.parent / "tests"))
from support import badmodels  # noqa: E402  (small CNN builder shared with the tests)
import models  # noqa: E402

from mrvl_convert import convert_many  # noqa: E402


def benchmark_models(quick: bool = False) -> List[Tuple[str, onnx.ModelProto]]:
    """8 models: small CNNs and ResNet-style networks (``quick``: the ResNets made smaller)."""
    chosen: List[Tuple[str, onnx.ModelProto]] = []
    if models.MNIST_CNN_PATH.is_file():
        chosen.append(("mnist_cnn", models.mnist_cnn_like()))
    for seed, channels in enumerate((16, 32, 64)):
        chosen.append((f"cnn_c{channels}", badmodels.small_cnn(seed, channels=channels, size=32)))
    image = 64 if quick else 224
    chosen += [
        ("resnet_d1_w32", models.resnet(depths=(1, 1, 1, 1), width=32, image=112 if not quick
                                        else 64, num_classes=100)),
        ("resnet_d1_w64", models.resnet(depths=(1, 1, 1, 1), width=64, image=image)),
        ("resnet_d2_a", models.resnet(depths=(2, 2, 2, 2), image=image, seed=1)),
        ("resnet_d2_b", models.resnet(depths=(2, 2, 2, 2), image=image, seed=2)),
    ]
    while len(chosen) < 8:   # no MNIST example: one more small CNN
        chosen.insert(0, (f"cnn_c8_{len(chosen)}", badmodels.small_cnn(7, channels=8, size=32)))
    return chosen


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name != "summary.json":
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _spin(n: int) -> int:
    total = 0
    for i in range(n):
        total += i
    return total


def cpu_scaling(n: int = 10_000_000) -> float:
    """Control: speed-up of 2 processes over 1 on a pure-Python loop (what 2 CPUs really give)."""
    import concurrent.futures as cf
    import multiprocessing
    ctx = multiprocessing.get_context("forkserver")
    with cf.ProcessPoolExecutor(2, mp_context=ctx) as pool:
        list(pool.map(_spin, [1000, 1000]))          # start the workers
        start = time.perf_counter()
        list(pool.map(_spin, [n]))
        one = time.perf_counter() - start
        start = time.perf_counter()
        list(pool.map(_spin, [n, n]))
        two = time.perf_counter() - start
    return 2 * one / two


def run(paths: List[Path], out: Path, jobs: int) -> Tuple[float, object]:
    start = time.perf_counter()
    result = convert_many(paths, out, jobs=jobs)
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=1, help="runs per job count (median)")
    parser.add_argument("--quick", action="store_true", help="smaller ResNet inputs")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        named = benchmark_models(args.quick)
        paths = [models.save(m, work / "models" / f"{n}.onnx") for n, m in named]
        sizes = {p.stem: p.stat().st_size / 2 ** 20 for p in paths}
        rows: Dict[int, Dict[str, float]] = {}
        digests: Dict[int, str] = {}
        per_model: Dict[str, float] = {}
        for jobs in args.jobs:
            times = []
            for k in range(args.repeat):
                out = work / f"out_j{jobs}_{k}"
                seconds, result = run(paths, out, jobs)
                failed = [o for o in result if not o.ok]
                if failed:
                    raise SystemExit(f"benchmark model failed: {failed[0].error}")
                times.append(seconds)
                digests[jobs] = tree_digest(out)
                if jobs == 1:
                    per_model = {o.name: o.seconds for o in result}
            wall = statistics.median(times)
            rows[jobs] = {"wall": wall, "per_min": 60 * len(paths) / wall}
    print(f"command: python benchmarks/bench_throughput.py --jobs {' '.join(map(str, args.jobs))}"
          f" --repeat {args.repeat}{' --quick' if args.quick else ''}")
    print(f"machine: {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}")
    if per_model:
        print(f"{'model':<16}{'MiB':>8}{'convert s (jobs=1)':>20}")
        for name, seconds in per_model.items():
            print(f"{name:<16}{sizes[name]:>8.1f}{seconds:>20.2f}")
    base = rows[args.jobs[0]]["wall"]
    print(f"{'jobs':>4}{'models':>8}{'wall s':>9}{'models/min':>12}{'speed-up':>10}")
    for jobs, row in rows.items():
        print(f"{jobs:>4}{len(paths):>8}{row['wall']:>9.2f}{row['per_min']:>12.1f}"
              f"{base / row['wall']:>9.2f}x")
    print(f"control: 2 processes of a pure-Python loop run {cpu_scaling():.2f}x as fast as 1 "
          f"(load average before: {load:.2f})")
    same = len(set(digests.values())) == 1
    print(f"artifacts byte-identical across job counts: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
