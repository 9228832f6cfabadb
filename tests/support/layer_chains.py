"""Helpers of the layer tests: a model converted and its hybrid run compared with onnxruntime,
the Mrvl layers an artifact holds, and an exact identity Conv in front of a chain so its region is
compute-heavy and the next layer gets its input as fed."""
from __future__ import annotations

import json
from typing import Dict, List

import numpy as np
import onnx

import mrvl_convert
from mrvl_convert.runtime import HybridSession
from mrvl_convert.verify.tolerances import DEFAULT_TOLERANCE
from support.models import Builder, run_ort
from support.onnxref import fp16_round


def convert_and_compare(model, tmp_path, **kwargs):
    """Convert, run the hybrid and onnxruntime on one seeded input, compare every output."""
    result = mrvl_convert.convert(model, tmp_path / "out", **kwargs)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    feed = {model.graph.input[0].name:
            np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
    got = HybridSession(result.out_dir, threads=1).run(None, feed)
    want = list(run_ort(model, feed).values())
    for g, w in zip(got, want):
        assert g.shape == w.shape
        rel = float(np.abs(g - w).max()) / max(float(np.abs(w).max()), 1e-30)
        assert rel <= DEFAULT_TOLERANCE.max_rel, rel
    return result


def layers(result) -> List[Dict]:
    found = []
    for stage in result.manifest["stages"]:
        if stage["kind"] == "mrvl":
            doc = json.loads((result.out_dir / stage["nodes_json"]).read_text())
            found += [n for n in doc["nodes"] if n["op"] == "tvm_op"]
    return found


def the_layer(result, name: str) -> Dict:
    [layer] = [n for n in layers(result) if n["attrs"]["layer_name"] == [name]]
    return layer


SHAPE = [1, 4, 6, 7]


def front_conv(b: Builder, shape=SHAPE) -> str:
    """An exact identity 1x1 Conv: the region is compute-heavy, the next layer gets x as fed."""
    c = shape[1]
    x = b.input("x", shape)
    return b.op("Conv", [x, b.const(np.eye(c, dtype=np.float32).reshape(c, c, 1, 1))],
                name="front", kernel_shape=[1, 1])


def run_chain(model: onnx.ModelProto, tmp_path, shape=SHAPE, seed: int = 0, scale: float = 4.0):
    x = fp16_round(np.random.default_rng(seed).standard_normal(shape) * scale)
    result = mrvl_convert.convert(model, tmp_path / "o")
    [got] = HybridSession(result.out_dir, threads=1).run(None, {"x": x})
    [want] = run_ort(model, {"x": x}).values()
    return result, x, got, want


def layer_kinds(result: mrvl_convert.Result) -> List[str]:
    kinds = []
    for path in sorted(result.files):
        if path.name.endswith("-nodes.json"):
            doc = json.loads(path.read_text())
            kinds += [n["attrs"]["layer_name"][0] for n in doc["nodes"] if n["op"] == "tvm_op"]
    return [k for k in kinds if k != "layout_transform"]
