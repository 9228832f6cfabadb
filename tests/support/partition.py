"""Checks of a partition: the stage kinds in run order, and that a plan is sound."""
from __future__ import annotations

import numpy as np
import onnx

from support.models import run_ort


def stages(result):
    return [s["kind"] for s in result.manifest["stages"]]


def check_sound(model: onnx.ModelProto, result, out_dir, feeds):
    """Every node placed once; stages in topological order; CPU stages exact on true boundaries."""
    placed = [e["name"] for e in result.report["nodes"]]
    assert len(placed) == len(model.graph.node) == len(set(placed))
    assert all(e["placement"] in ("mrvl", "cpu", "removed") for e in result.report["nodes"])
    available = {i["name"] for i in result.manifest["model"]["inputs"]}
    boundary = []
    for stage in result.manifest["stages"]:
        for tensor in stage["inputs"]:
            assert tensor["tensor"] in available, f"{stage['name']} reads {tensor['tensor']} early"
        available |= {t["tensor"] for t in stage["outputs"]}
        boundary += [t["tensor"] for t in stage["outputs"]]
    assert {o["name"] for o in result.manifest["model"]["outputs"]} <= available
    # The true value of every boundary tensor, from onnxruntime on the original model.
    extended = onnx.ModelProto()
    extended.CopyFrom(model)
    existing = {o.name for o in extended.graph.output}
    extended.graph.output.extend(onnx.helper.make_empty_tensor_value_info(t)
                                 for t in boundary if t not in existing)
    truth = run_ort(extended, feeds)
    truth.update(feeds)
    for stage in result.manifest["stages"]:
        if stage["kind"] != "cpu":
            continue
        cpu = onnx.load(str(out_dir / stage["onnx"]))
        got = run_ort(cpu, {t["tensor"]: truth[t["tensor"]] for t in stage["inputs"]})
        for tensor in stage["outputs"]:
            assert np.array_equal(got[tensor["tensor"]], truth[tensor["tensor"]]), tensor["tensor"]
    return truth
