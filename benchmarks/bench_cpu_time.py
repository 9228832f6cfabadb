"""CPU time of converting corpus models with two source trees, interleaved, and whether every
file they write is the same. Not a test.

    MRVL_CORPUS_CACHE=/work/cache python benchmarks/bench_cpu_time.py \
        --tree before=/path/to/main --tree after=. --rounds 3 \
        --models plcmos_v2 rec-model hey_mycroft_v0.1 modelA_paper alexa_v0.1 sscd_distilled vit_s

Each (round, model, tree) is one fresh process importing that tree (``PYTHONPATH``): a warm-up
conversion (so no figure carries the imports or the rule files' first read), then
``--per-process`` conversions of the model, of which the least CPU time (``process_time``)
counts. Printed per model and tree: the median over rounds, the load + write floor
(``bench_convert.baseline``, best of 5) and the ratio. The trees run in turn within each round,
so a burst of the shared machine's load falls on both. Every file of every conversion is hashed;
``differs`` names a file whose bytes differ between trees (or between rounds of one tree).
Corpus models are read from ``MRVL_CORPUS_CACHE`` with ``real_corpus.yaml``'s shapes and
values; ``vit_s`` is ``bench_convert.py --vit-s``'s encoder, built here.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

HERE = Path(__file__).resolve().parent


def _case(name: str, work: Path) -> Tuple[Path, Dict[str, Any]]:
    """The model file and convert()'s keyword arguments for one model name."""
    if name == "vit_s":
        import onnx
        sys.path.insert(0, str(HERE.parent / "tests"))
        from support import corpus_transformer
        path = work / "vit_s.onnx"
        if not path.exists():
            onnx.save(corpus_transformer.vit_tiny(channels=384, heads=6, blocks=12), str(path))
        return path, {}
    import numpy as np
    import onnx
    import real_corpus_fetch as fetch
    from real_corpus_runs import _specs
    cache = Path(os.environ.get("MRVL_CORPUS_CACHE", "~/.cache/mrvl_convert/corpus"))
    entry = next(e for e in fetch.read_list() if e.name == name)
    path = entry.local(cache.expanduser())
    specs = _specs(onnx.load(str(path), load_external_data=False), entry)
    shapes = {k: v[0] for k, v in specs.items()}
    values = {k: np.full(shapes[k], v) if np.ndim(v) == 0 and shapes[k] else np.asarray(v)
              for k, v in entry.values.items()}
    return path, {"shapes": shapes, "values": values or None}


def _digest(out: Path) -> Dict[str, str]:
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file()}


def child(name: str, work: Path, count: int) -> Dict[str, Any]:
    """Run in the tree's process: the conversions' CPU and wall times and the files' hashes."""
    sys.path.insert(0, str(HERE))
    import models

    import mrvl_convert
    path, kwargs = _case(name, work)
    mrvl_convert.convert(models.mnist_cnn_like(), work / "warm_up")
    cpu, wall = [], []
    for k in range(count):
        out = work / f"out{k}"
        start_cpu, start_wall = time.process_time(), time.perf_counter()
        mrvl_convert.convert(str(path), out, **kwargs)
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start_wall)
    return {"cpu": cpu, "wall": wall, "files": _digest(work / "out0"),
            "module": mrvl_convert.__file__}


def _floor(name: str, work: Path) -> float:
    from bench_convert import baseline
    path, _ = _case(name, work)
    times = []
    for _ in range(5):
        start = time.process_time()
        baseline(path, work / "baseline.json")
        times.append(time.process_time() - start)
    return min(times)


def _run(tree: Path, name: str, work: Path, count: int) -> Dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run([sys.executable, __file__, "--child", name, "--work", str(work),
                           "--per-process", str(count)], env=env, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{name} with {tree}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", default=[], help="LABEL=PATH")
    parser.add_argument("--models", nargs="+", default=["vit_s"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-process", type=int, default=2)
    parser.add_argument("--child")
    parser.add_argument("--work")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, Path(args.work), args.per_process)))
        return 0
    trees = [tuple(t.split("=", 1)) for t in args.tree] or [("this", str(HERE.parent))]
    cpu: Dict[Tuple[str, str], List[float]] = {}
    files: Dict[str, Dict[str, str]] = {}
    differs = 0
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name in args.models:
                for label, tree in trees:
                    work = Path(tmp) / f"{r}-{name}-{label}"
                    work.mkdir()
                    got = _run(Path(tree).resolve(), name, work, args.per_process)
                    cpu.setdefault((name, label), []).append(min(got["cpu"]))
                    print(f"round {r} {name} {label}: cpu {min(got['cpu']):.3f} s "
                          f"({got['module']})", file=sys.stderr, flush=True)
                    want = files.setdefault(name, got["files"])
                    for key in sorted(set(want) | set(got["files"])):
                        if want.get(key) != got["files"].get(key):
                            differs += 1
                            print(f"differs: {name}/{key} ({label}, round {r})")
        floors = {name: _floor(name, Path(tmp)) for name in args.models}
    print(f"{'model':<18}{'tree':<10}{'cpu (s)':>9}{'load+write (s)':>16}{'ratio':>8}  rounds")
    for name in args.models:
        for label, _ in trees:
            times = cpu[(name, label)]
            med = statistics.median(times)
            print(f"{name:<18}{label:<10}{med:>9.3f}{floors[name]:>16.4f}"
                  f"{med / floors[name]:>8.1f}  {' '.join(f'{t:.3f}' for t in times)}")
    print(f"{sum(len(f) for f in files.values())} files per tree, {differs} differ")
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
