"""Conversion time against the floor of just loading the model and writing its constants.

    python benchmarks/bench_convert.py [--repeat 3]

For each model: the median wall time of `mrvl_convert.convert` and of the baseline (`onnx.load`
plus writing every initializer as base64 JSON, which any converter has to do), both measured in
this run, and their ratio. Then ResNet-style networks of growing depth, to show how conversion
time grows when the model doubles in depth. Models are built into a temporary directory.
"""
from __future__ import annotations

import argparse
import base64
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, str(Path(__file__).parent))
import models  # noqa: E402

import mrvl_convert  # noqa: E402


def baseline(path: Path, out: Path) -> None:
    model = onnx.load(str(path))
    consts = {}
    for init in model.graph.initializer:
        array = np.ascontiguousarray(numpy_helper.to_array(init), dtype="<f4")
        consts[init.name] = {"shape": list(array.shape),
                             "data_base64": base64.b64encode(array.tobytes()).decode("ascii")}
    out.write_text(json.dumps(consts))


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name: str, model: onnx.ModelProto, work: Path, repeat: int) -> dict:
    path = work / f"{name}.onnx"
    onnx.save(model, str(path))
    t_base = median_time(lambda: baseline(path, work / "baseline.json"), repeat)
    t_conv = median_time(lambda: mrvl_convert.convert(path, work / f"out_{name}"), repeat)
    nodes = len(model.graph.node)
    params = sum(int(np.prod(i.dims)) for i in model.graph.initializer)
    return {"model": name, "nodes": nodes, "params_M": params / 1e6, "convert_s": t_conv,
            "baseline_s": t_base, "ratio": t_conv / t_base}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    cases = [("mnist_cnn", models.mnist_cnn_like()),
             ("resnet50", models.resnet(depths=(3, 4, 6, 3)))]
    depth = [("resnet_d1", models.resnet(depths=(3, 4, 6, 3), width=32)),
             ("resnet_d2", models.resnet(depths=(6, 8, 12, 6), width=32)),
             ("resnet_d4", models.resnet(depths=(12, 16, 24, 12), width=32))]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows = [measure(n, m, work, args.repeat) for n, m in cases + depth]
    print(f"command: python benchmarks/bench_convert.py --repeat {args.repeat}")
    print(f"{'model':<12}{'nodes':>7}{'params(M)':>11}{'convert(s)':>12}{'load+write(s)':>15}"
          f"{'ratio':>7}")
    for r in rows:
        print(f"{r['model']:<12}{r['nodes']:>7}{r['params_M']:>11.2f}{r['convert_s']:>12.3f}"
              f"{r['baseline_s']:>15.3f}{r['ratio']:>7.2f}")
    d = {r["model"]: r for r in rows}
    print(f"depth x2: convert time x{d['resnet_d2']['convert_s'] / d['resnet_d1']['convert_s']:.2f}"
          f", depth x4: x{d['resnet_d4']['convert_s'] / d['resnet_d1']['convert_s']:.2f}")


if __name__ == "__main__":
    main()
