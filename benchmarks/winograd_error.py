"""Float32 error of the Winograd layers against float64, next to im2col's, inside ResNet-50.

    python benchmarks/winograd_error.py [--model resnet50]

Converts the model (single policy), runs its Mrvl subgraph step by step on a standard-normal
input and, at every Conv2D the simulator computes with Winograd F(2x2, 3x3), feeds the layer's
real (fp16-valued) input to three convolutions of the same fp16-valued weights: Winograd and
im2col in float32, and im2col in float64 as the reference. Per layer it prints the largest error
of each float32 form relative to the layer's largest output, and the share of outputs whose
float16 rounding differs from the float16 rounding of the float64 result (bias included, before
ReLU). These are the figures ``mrvl_convert/runtime/winograd.py`` quotes. Not a test.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
from typing import Dict, List, Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_simulator  # noqa: E402  (benchmarks/bench_simulator.py: models)

from mrvl_convert import convert  # noqa: E402
from mrvl_convert.core.artifact import decode_consts, read_json  # noqa: E402
from mrvl_convert.kernels.fp16 import round_to_fp16  # noqa: E402
from mrvl_convert.kernels.windows import pad_nhwc, window_view  # noqa: E402
from mrvl_convert.runtime.simulator import CompiledSubgraph, MrvlSimulator  # noqa: E402


def im2col(x: np.ndarray, weight_ohwi: np.ndarray, pads, dtype) -> np.ndarray:
    """Stride-1 3x3 convolution as one GEMM in ``dtype``: [N, OH, OW, O]."""
    xp = pad_nhwc(x.astype(dtype), tuple(pads))
    out_hw = (xp.shape[1] - 2, xp.shape[2] - 2)
    cols = window_view(xp, out_hw, (3, 3), (1, 1), (1, 1)).reshape(-1, 9 * x.shape[3])
    weight = weight_ohwi.reshape(weight_ohwi.shape[0], -1).T.astype(dtype)
    return (cols @ weight).reshape(x.shape[0], *out_hw, -1)


def fp16_of(y: np.ndarray) -> np.ndarray:
    return round_to_fp16(y.astype(np.float32))[0]


def layer_errors(x: np.ndarray, step, consts: Dict[str, np.ndarray]) -> Dict[str, float]:
    spec, kernel = step.spec, step.kernel
    weight = fp16_of(spec.const("kernel_const_name", consts))
    bias = fp16_of(spec.const("bias_const_name", consts)).reshape(-1)
    want = im2col(x, weight, kernel.pads, np.float64)
    scale = float(np.abs(want).max())
    exact16 = fp16_of(want + bias)
    row = {"shape": "x".join(map(str, spec.shape[1:]))}
    for name, got in (("winograd", kernel.winograd.run(x)),
                      ("im2col", im2col(x, weight, kernel.pads, np.float32))):
        row[f"{name}_rel"] = float(np.abs(got - want).max()) / scale
        row[f"{name}_off"] = float(np.mean(fp16_of(got + bias) != exact16))
    return row


def measure(compiled: CompiledSubgraph, consts: Dict[str, np.ndarray],
            feed: Dict[str, np.ndarray]) -> List[Dict[str, float]]:
    rows = []
    values = compiled._feed(feed, "raise", [])
    for step in compiled.steps:
        inputs = [values[i] for i in step.inputs]
        if getattr(step.kernel, "mode", None) == "winograd":
            rows.append(layer_errors(inputs[0], step, consts))
        out = step.kernel.run(*inputs)
        values[step.node] = out if step.kernel.exact else round_to_fp16(out, inplace=True)[0]
    return rows


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", choices=sorted(bench_simulator.MODELS))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        convert(bench_simulator.MODELS[args.model](), tmp + "/m", policy="single")
        nodes = glob.glob(tmp + "/m/*-nodes.json")
        if len(nodes) != 1:
            parser.error(f"expected one Mrvl subgraph, got {len(nodes)}")
        consts_path = nodes[0].replace("-nodes", "-consts")
        compiled = MrvlSimulator().compile(nodes[0], consts_path)
        consts = decode_consts(consts_path, read_json(consts_path, "Constants-JSON"))
    inp = compiled.inputs[0]
    feed = {inp.name: np.random.default_rng(0).standard_normal(inp.shape).astype(np.float32)}
    rows = measure(compiled, consts, feed)
    print(f"{'output':12s} {'winograd rel':>13s} {'im2col rel':>11s} "
          f"{'winograd fp16 off':>18s} {'im2col fp16 off':>16s}")
    for r in rows:
        print(f"{r['shape']:12s} {r['winograd_rel']:13.2e} {r['im2col_rel']:11.2e} "
              f"{100 * r['winograd_off']:17.3f}% {100 * r['im2col_off']:15.3f}%")
    print("rel: largest |float32 - float64| over the largest |float64| output; fp16 off: share "
          "of outputs (bias added) whose float16 rounding differs from that of float64")
    return 0


if __name__ == "__main__":
    sys.exit(main())
