"""The fixed cost of one ``convert()``: a one-node model, converted again and again in one process.

    python benchmarks/bench_fixed_cost.py [--repeat 30]

Prints the median wall time of converting a Relu-only model (nothing to fold, one layer), of
converting the RFC-sized MNIST CNN, and, for scale, of parsing and validating the built-in rule
files once (what every conversion paid before they were cached per process). The first
conversion of the process is reported apart: it imports onnxruntime and reads the rule files.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).parent))
import models  # noqa: E402

import mrvl_convert  # noqa: E402
from mrvl_convert.rules import loader  # noqa: E402


def relu_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        relu, cnn = relu_model(), models.mnist_cnn_like()
        start = time.perf_counter()
        mrvl_convert.convert(relu, Path(tmp) / "first")
        first = (time.perf_counter() - start) * 1e3
        rows = [("first convert() of the process, Relu model", first),
                ("convert(), Relu model", median_ms(
                    lambda: mrvl_convert.convert(relu, Path(tmp) / "relu"), args.repeat)),
                ("convert(), MNIST CNN", median_ms(
                    lambda: mrvl_convert.convert(cnn, Path(tmp) / "cnn"), args.repeat)),
                ("parse + validate the built-in rules (uncached)", median_ms(
                    lambda: loader._parsed_builtins.__wrapped__(loader._builtin_texts("marvell")),
                    max(3, args.repeat // 5)))]
    for label, ms in rows:
        print(f"{label:<50} {ms:8.1f} ms")


if __name__ == "__main__":
    main()
