"""A hand-written Nodes-JSON + Constants-JSON pair (support.jsonbuild) compiled and run by the
simulator, and one layer run between two layout_transforms so it takes and gives NCHW."""
from __future__ import annotations

import tempfile

import numpy as np

from mrvl_convert.runtime import MrvlSimulator
from support.jsonbuild import SubgraphBuilder, to_nchw, to_nhwc


def simulate(builder: SubgraphBuilder, heads, feed, gemm: str = "numpy"):
    with tempfile.TemporaryDirectory() as tmp:
        compiled = MrvlSimulator(gemm=gemm).compile(*builder.write(tmp, heads))
    return compiled.run(feed)


def nchw_layer(x: np.ndarray, make_layer, gemm: str = "numpy"):
    """input NCHW -> layout_transform -> layer -> layout_transform back -> output."""
    b = SubgraphBuilder()
    inp = b.input("x", x.shape)
    out = to_nchw(b, make_layer(b, to_nhwc(b, inp)))
    return simulate(b, [out], {"x": x}, gemm)[0]
