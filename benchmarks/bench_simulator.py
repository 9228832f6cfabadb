"""Latency of the hybrid run (fp16 Mrvl simulator + onnxruntime) vs onnxruntime fp32.

Same model, same input, same process: each model is converted to a temporary artifact
directory, then ORT fp32 and HybridSession are each timed in blocks (warm-up, then N runs),
one block after the other, over several rounds: interleaving single runs lets onnxruntime's
spinning worker threads and OpenBLAS's threads fight over the cores, which measures the fight
rather than either engine.

    python benchmarks/bench_simulator.py [--models mnist,resnet50] [--runs 20] [--rounds 3]
                                         [--threads 2]
                                         [--gemm numpy,onnxruntime]

One row per simulator GEMM engine (``mrvl_convert/kernels/gemm.py``); "open s" is the time
``HybridSession`` took to compile the artifact with that engine.

numpy's BLAS reads its CPU type when numpy is imported: OpenBLAS builds with DYNAMIC_ARCH pick
AVX2 (Haswell) kernels on CPUs they do not recognise, e.g. AVX-512 AMD EPYC; there
``OPENBLAS_CORETYPE=SkylakeX`` doubles sgemm speed. The table prints the core type in use.
Not a test.
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import os
import platform
import shlex
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402  (benchmarks/models.py)

from mrvl_convert import convert  # noqa: E402
from mrvl_convert.runtime import HybridSession  # noqa: E402
from mrvl_convert.kernels.gemm import GEMM_ENGINES, GemmEngine  # noqa: E402

MODELS: Dict[str, Callable[[], onnx.ModelProto]] = {
    "mnist": lambda: models.mnist_cnn_like(batch=1),
    "resnet50": lambda: models.resnet(depths=(3, 4, 6, 3)),
}


def _openblas() -> Optional[ctypes.CDLL]:
    """numpy's bundled OpenBLAS, to read its core type and set its thread count."""
    libs = glob.glob(os.path.join(os.path.dirname(np.__file__) + ".libs", "*openblas*.so*"))
    try:
        return ctypes.CDLL(libs[0]) if libs else None
    except OSError:
        return None


def blas_info(threads: int) -> str:
    lib = _openblas()
    if lib is None:
        return "BLAS: unknown (not numpy's bundled OpenBLAS)"
    try:
        lib.scipy_openblas_get_corename64_.restype = ctypes.c_char_p
        core = lib.scipy_openblas_get_corename64_().decode()
        lib.scipy_openblas_set_num_threads64_(ctypes.c_int(threads))
        hint = ""
        if core in ("Haswell", "Zen") and _cpu_has("avx512f"):
            hint = (" (AVX2 kernels on an AVX-512 CPU: sgemm runs at about half speed; "
                    "OPENBLAS_CORETYPE sets this)")
        return f"BLAS: OpenBLAS core={core}, threads={threads}{hint}"
    except AttributeError:
        return "BLAS: OpenBLAS (core type and threads not settable)"


def _cpu_has(flag: str) -> bool:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            return any(line.startswith("flags") and flag in line.split() for line in f)
    except OSError:
        return False


def times_ms(fn: Callable[[], object], runs: int, warmup: int) -> List[float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - start))
    return times


def median_ms(fn: Callable[[], object], runs: int, warmup: int) -> float:
    return float(np.median(times_ms(fn, runs, warmup)))


def ort_session(model: onnx.ModelProto, threads: int) -> ort.InferenceSession:
    """onnxruntime fp32 (CPU provider) on the original model, with ``threads`` intra-op threads."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def bench_model(name: str, runs: int, warmup: int, threads: int, gemms: List[str],
                rounds: int) -> List[Dict[str, object]]:
    """One row per GEMM engine. Each round times onnxruntime fp32, then every hybrid, ``runs``
    times each; a figure is the median over all rounds, so a slow spell of a shared machine
    weighs on every engine alike rather than on whichever ran during it."""
    model = MODELS[name]()
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = os.path.join(tmp, name)
        result = convert(model, out_dir)
        stages = "+".join(s["kind"] for s in result.manifest["stages"])
        hybrids, open_s = {}, {}
        for gemm in gemms:
            start = time.perf_counter()
            hybrids[gemm] = HybridSession(out_dir, gemm=GemmEngine(gemm, threads))
            open_s[gemm] = time.perf_counter() - start
    reference = ort_session(model, threads)
    spec = reference.get_inputs()[0]
    feed = {spec.name: np.random.default_rng(0).standard_normal(spec.shape).astype(np.float32)}
    timed: Dict[str, List[float]] = {key: [] for key in ["ort"] + gemms}
    for _ in range(rounds):
        timed["ort"] += times_ms(lambda: reference.run(None, feed), runs, warmup)
        for gemm, hybrid in hybrids.items():
            timed[gemm] += times_ms(lambda: hybrid.run(None, feed), runs, warmup)
    ort_ms = float(np.median(timed["ort"]))
    want = reference.run(None, feed)[0]
    rows = []
    for gemm, hybrid in hybrids.items():
        hyb_ms = float(np.median(timed[gemm]))
        got = hybrid.run(None, feed)[0]
        rows.append({"model": name, "stages": stages, "gemm": gemm,
                     "open_s": open_s[gemm], "ort_ms": ort_ms, "hybrid_ms": hyb_ms,
                     "ratio": hyb_ms / ort_ms,
                     "max_rel": float(np.abs(got - want).max() / np.abs(want).max()),
                     "top1_same": bool(np.array_equal(got.argmax(-1), want.argmax(-1)))})
    return rows


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """--models and --gemm, as this script and bench_memory.py take them."""
    parser.add_argument("--models", default="mnist,resnet50",
                        help=f"comma-separated, from {sorted(MODELS)}")
    parser.add_argument("--gemm", default=",".join(GEMM_ENGINES),
                        help=f"comma-separated simulator GEMM engines, from {GEMM_ENGINES}")


def model_args(parser: argparse.ArgumentParser,
               args: argparse.Namespace) -> Tuple[List[str], List[str]]:
    """(model names, GEMM engines) from --models and --gemm; a usage error if one is unknown."""
    gemms = [g.strip() for g in args.gemm.split(",") if g.strip()]
    if not gemms or set(gemms) - set(GEMM_ENGINES):
        parser.error(f"--gemm takes names from {GEMM_ENGINES}")
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}")
    return names, gemms


def format_table(rows: List[Dict[str, object]]) -> str:
    header = f"{'model':10s} {'stages':8s} {'gemm':12s} {'open s':>6s} {'ORT fp32 ms':>12s} " \
             f"{'hybrid ms':>10s} {'ratio':>6s} {'max_rel':>9s} {'top1 same':>9s}"
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r['model']:10s} {r['stages']:8s} {r['gemm']:12s} {r['open_s']:6.2f} "
                     f"{r['ort_ms']:12.2f} {r['hybrid_ms']:10.2f} {r['ratio']:6.2f} "
                     f"{r['max_rel']:9.2e} {str(r['top1_same']):>9s}")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser)
    parser.add_argument("--runs", type=int, default=20, help="timed runs per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2,
                        help="onnxruntime intra-op threads and OpenBLAS threads")
    args = parser.parse_args(argv)
    names, gemms = model_args(parser, args)
    blas = blas_info(args.threads)
    rows = [row for m in names for row in bench_model(m, args.runs, args.warmup, args.threads,
                                                      gemms, args.rounds)]
    env = " ".join(f"{k}={os.environ[k]}" for k in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS")
                   if k in os.environ)
    print(format_table(rows))
    print(f"median of {args.rounds} rounds x {args.runs} runs, each after {args.warmup} warm-up; "
          f"{blas}; onnxruntime {ort.__version__} intra_op_num_threads={args.threads}; "
          f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}); "
          f"load average {os.getloadavg()[0]:.2f}")
    print("command:", (env + " " if env else "") + "python " + " ".join(
        shlex.quote(a) for a in [os.path.relpath(__file__)] + (argv or sys.argv[1:])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
