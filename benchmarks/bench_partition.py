"""How whole real networks stay on the accelerator, and what the hybrid costs. Not a test.

    python benchmarks/bench_partition.py [--runs 5] [--threads 1 2] [--models resnet50 ...]
                                         [--engine graph|layers]

The corpus is ``tests/support/corpus.py``: the onnx wheel's 9 light zoo models with seeded random
weights, and small built models that use each canonical rewrite. For every model: whether it
converts, the Mrvl / CPU stage counts, Mrvl<->CPU transitions, the share of nodes and of MACs on
Mrvl, the hybrid's largest error against onnxruntime fp32 (absolute, and relative to the largest
reference output), whether the top-1 class agrees, and the median latency of the hybrid
(``HybridSession(threads=t, engine=...)``: the default graph engine, or ``--engine layers``
for the per-layer numpy simulator with its default numpy GEMM) and of onnxruntime
(``intra_op_num_threads=t``) at each thread count, the two timed in turn in every round
(``interleaved_ms``) so that their ratio survives a shared machine's load. Prints a Markdown
table.

Each thread count runs in its own process with ``OPENBLAS_NUM_THREADS=t`` (numpy's BLAS reads
it once, at import), so the simulator's numpy, the CPU stages and the onnxruntime reference all
get the same budget.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from support import corpus  # noqa: E402  (tests/support/corpus.py)

import mrvl_convert  # noqa: E402
from mrvl_convert.runtime import HybridSession  # noqa: E402


def median_ms(fn: Callable[[], object], runs: int) -> float:
    fn()  # warm-up: first-call allocations, onnxruntime's lazy init
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000.0 * float(np.median(times))


def interleaved_ms(fns: List[Callable[[], object]], runs: int, block: int = 5) -> List[float]:
    """The median of each of ``fns``, timed in turn, ``block`` calls at a time, over ``runs``
    calls each: on a shared machine a burst of load then falls on all of them alike, and their
    ratio holds. The first call of a block is not counted: the other session's onnxruntime
    workers may still be spinning from its last call (at 2 threads on 2 cores that doubled the
    first session's time), which is the benchmark's doing, not either session's."""
    for fn in fns:
        fn()  # warm-up
    times: List[List[float]] = [[] for _ in fns]
    for _ in range(max(1, -(-runs // block))):
        for fn, spent in zip(fns, times):
            for k in range(block + 1):
                start = time.perf_counter()
                fn()
                if k:
                    spent.append(time.perf_counter() - start)
    return [1000.0 * float(np.median(t)) for t in times]


def ort_session(model, threads: int):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    # onnxruntime's own spinning, but ended with each call, as the hybrid's: timed in turn in
    # one process, a pool left spinning takes the cores from the other session's workers (at
    # 2 threads on 2 cores: several times that session's time alone).
    options.add_session_config_entry("session.force_spinning_stop", "1")
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def measure(name: str, model, shapes: Optional[Dict[str, List[int]]], runs: int,
            threads: List[int], engine: str = "graph") -> Dict[str, object]:
    """One model's row, at every count in ``threads`` (this process's BLAS setting aside)."""
    row: Dict[str, object] = {"model": name}
    feed = corpus.feeds(model, shapes)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            result = mrvl_convert.convert(model, os.path.join(tmp, "art"), shapes=shapes)
        except mrvl_convert.MrvlConvertError as exc:
            row["converts"] = f"no: {str(exc).splitlines()[0][:80]}"
            return row
        s = result.summary
        placed = s["nodes"] - s["removed_nodes"]
        row.update(converts="yes", mrvl=s["mrvl_subgraphs"], cpu=s["cpu_subgraphs"],
                   cuts=s["transitions"], node_share=s["mrvl_nodes"] / max(placed, 1),
                   mac_share=s["mrvl_mac_share"],
                   cut_by=", ".join(f"{c['op_type']} x{c['nodes']}"
                                    for c in result.report["cut_by"][:2]))
        [want] = ort_session(model, threads[0]).run(None, feed)
        [got] = HybridSession(result.out_dir, threads=threads[0], engine=engine).run(None, feed)
        err = float(np.abs(got - want).max())
        row.update(max_err=err, rel_err=err / max(float(np.abs(want).max()), 1e-30),
                   top1=bool(np.array_equal(got.reshape(len(got), -1).argmax(-1),
                                            want.reshape(len(want), -1).argmax(-1))))
        for t in threads:
            hybrid = HybridSession(result.out_dir, threads=t, engine=engine)
            ort = ort_session(model, t)
            row[f"hyb_{t}"], row[f"ort_{t}"] = interleaved_ms(
                [lambda: hybrid.run(None, feed), lambda: ort.run(None, feed)], runs)
    return row


def table(rows: List[Dict[str, object]], threads: List[int]) -> str:
    head = ["model", "converts", "Mrvl", "CPU", "cuts", "nodes on Mrvl", "MACs on Mrvl",
            "max err (rel)", "top-1"]
    head += [f"hybrid / ort @{t}t (ms)" for t in threads] + ["left on CPU (most)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r.get("converts") != "yes":
            lines.append(f"| {r['model']} | {r.get('converts')} |" + " |" * (len(head) - 2))
            continue
        cells = [r["model"], "yes", str(r["mrvl"]), str(r["cpu"]), str(r["cuts"]),
                 f"{100 * r['node_share']:.0f}%", f"{100 * r['mac_share']:.1f}%",
                 f"{r['max_err']:.2g} ({r['rel_err']:.1e})", "equal" if r["top1"] else "DIFFERS"]
        for t in threads:
            h, o = r[f"hyb_{t}"], r[f"ort_{t}"]
            cells.append(f"{h:.1f} / {o:.1f} ({h / o:.1f}x)")
        cells.append(r["cut_by"] or "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def child(names: List[str], runs: int, threads: int, engine: str) -> None:
    for name in names:
        model = corpus.model(name)
        row = measure(name, model, corpus.shapes_for(name), runs, [threads], engine)
        print(json.dumps(row), flush=True)
        print(f"done {name} at {threads} thread(s)", file=sys.stderr, flush=True)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--models", nargs="+", default=None,
                        help=f"subset of {', '.join(corpus.ZOO + corpus.BUILT)}")
    parser.add_argument("--engine", choices=("graph", "layers"), default="graph",
                        help="the simulator's engine (HybridSession(engine=...))")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    names = args.models or list(corpus.zoo_names()) + list(corpus.BUILT)
    if args.child is not None:
        child(names, args.runs, args.child, args.engine)
        return
    rows: Dict[str, Dict[str, object]] = {}
    for t in args.threads:
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(t), OMP_NUM_THREADS=str(t))
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", str(t),
                               "--runs", str(args.runs), "--engine", args.engine,
                               "--models", *names],
                              env=env, stdout=subprocess.PIPE, text=True, check=True)
        for line in done.stdout.splitlines():
            row = json.loads(line)
            rows.setdefault(row["model"], row).update(
                {k: v for k, v in row.items() if k.startswith(("hyb_", "ort_"))})
    sys.stdout.write(table([rows[n] for n in names], args.threads))


if __name__ == "__main__":
    main()
