"""Memory of the hybrid run (fp16 Mrvl simulator + onnxruntime) vs onnxruntime fp32. Not a test.

    python benchmarks/bench_memory.py [--models mnist,resnet50] [--runs 5] [--threads 1]
                                      [--gemm numpy,onnxruntime] [--engines graph,layers]

Each model is converted once, to a temporary directory. Then each way of running it gets a fresh
Python process, which imports everything, reads its resident set size (the baseline), opens the
session, runs it ``--runs`` times on one input and reads its RSS again ("after runs") and its
peak RSS ("peak"). Then it asks glibc to hand freed heap memory back to the system
(``malloc_trim``) and reads RSS once more ("trimmed"): what the session really holds, without
the freed memory (e.g. of parsing a large JSON file) that the allocator keeps for reuse.
"open (s)" is the time to open the session (reading the artifact, compiling, onnxruntime's
session creation), one measurement per row.
Figures are growth over the baseline, in MiB, so the interpreter and the imported libraries do
not count; "ratio" is the hybrid's peak growth over onnxruntime fp32's, taken in the same run.
"weights" is the model's float32 initializers, the floor for anything that holds them once.
Linux only (``/proc/self/status``; "trimmed" needs glibc).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_simulator  # noqa: E402  (models)

from mrvl_convert import convert  # noqa: E402

MIB = 1 << 20


def status_mib() -> Dict[str, float]:
    """This process's current (VmRSS) and peak (VmHWM) resident set size, in MiB."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) / 1024  # the file counts kB
    return fields


def child(engine: str, model_path: str, artifact: str, runs: int, threads: int) -> None:
    """Run in a fresh process: print the RSS figures of one engine as one JSON line."""
    import onnxruntime as ort

    from mrvl_convert.runtime import HybridSession
    from mrvl_convert.kernels.gemm import GemmEngine

    base = status_mib()
    start = time.perf_counter()
    if engine == "ort":
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
    else:  # "<simulator engine>/<gemm>"
        simulator, gemm = engine.split("/")
        session = HybridSession(artifact, gemm=GemmEngine(gemm, threads), engine=simulator,
                                threads=threads)
    seconds = time.perf_counter() - start
    opened = status_mib()
    spec = session.get_inputs()[0]
    feed = {spec.name: np.random.default_rng(0).standard_normal(spec.shape).astype(np.float32)}
    for _ in range(runs):
        session.run(None, feed)
    after = status_mib()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    trimmed = status_mib()
    print(json.dumps({"open": opened["VmRSS"] - base["VmRSS"],
                      "after": after["VmRSS"] - base["VmRSS"],
                      "peak": after["VmHWM"] - base["VmRSS"],
                      "trimmed": trimmed["VmRSS"] - base["VmRSS"], "seconds": seconds}))


def measure(engine: str, model_path: str, artifact: str, runs: int,
            threads: int) -> Dict[str, float]:
    command = [sys.executable, os.path.abspath(__file__), "--child", engine, model_path,
               artifact, "--runs", str(runs), "--threads", str(threads)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def weights_mib(model: onnx.ModelProto) -> float:
    return sum(numpy_helper.to_array(t).astype(np.float32).nbytes
               for t in model.graph.initializer) / MIB


def bench_model(name: str, gemms: List[str], runs: int, threads: int,
                engines: List[str]) -> List[Dict[str, object]]:
    model = bench_simulator.MODELS[name]()
    with tempfile.TemporaryDirectory() as tmp:
        model_path = os.path.join(tmp, name + ".onnx")
        onnx.save(model, model_path)
        artifact = os.path.join(tmp, name)
        convert(model, artifact)
        reference = measure("ort", model_path, artifact, runs, threads)
        rows = [{"model": name, "engine": "onnxruntime fp32", **reference, "ratio": 1.0}]
        # The graph engine's layers are onnxruntime's; the GEMM engine is the per-layer path's.
        for simulator, gemm in [(e, g) for e in engines for g in gemms]:
            got = measure(f"{simulator}/{gemm}", model_path, artifact, runs, threads)
            rows.append({"model": name, "engine": f"hybrid {simulator}, {gemm} GEMM", **got,
                         "ratio": got["peak"] / reference["peak"]})
    for row in rows:
        row["weights"] = weights_mib(model)
    return rows


def format_table(rows: List[Dict[str, object]]) -> str:
    header = f"{'model':10s} {'engine':24s} {'weights':>8s} {'open':>8s} {'after runs':>10s} " \
             f"{'peak':>8s} {'ratio':>6s} {'trimmed':>8s} {'open (s)':>8s}"
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r['model']:10s} {r['engine']:24s} {r['weights']:8.1f} {r['open']:8.1f} "
                     f"{r['after']:10.1f} {r['peak']:8.1f} {r['ratio']:6.2f} "
                     f"{r['trimmed']:8.1f} {r['seconds']:8.2f}")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bench_simulator.add_model_args(parser)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1,
                        help="onnxruntime intra-op threads (and the onnxruntime GEMM engine's)")
    parser.add_argument("--engines", default="graph",
                        help="the simulator's engines, comma-separated: graph (default), layers")
    parser.add_argument("--child", nargs=3, metavar=("ENGINE", "MODEL", "ARTIFACT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child, runs=args.runs, threads=args.threads)
        return 0
    names, gemms = bench_simulator.model_args(parser, args)
    engines = args.engines.split(",")
    rows = [row for m in names
            for row in bench_model(m, gemms, args.runs, args.threads, engines)]
    print(format_table(rows))
    print(f"MiB of resident memory over a fresh process's baseline after imports; one process "
          f"per row; {args.runs} runs after opening; threads={args.threads}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
