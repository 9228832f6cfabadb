"""Random Concat-then-pick models (frontend/pick_forms.py, frontend/concat_views.py): one to
three float inputs of rank 2 or 3 (a batch-1 model or one of batch 2), each through a Relu,
joined by a Concat on any axis, then a pick of the join: a Gather of constant indices (a
scalar, one element, a run, or positions not in a run, negative ones too) or a Slice of a
constant range on any axis, or none; the join's own value is a second output or not.

``pick_models()`` draws a spec (a flat JSON-able dict); ``pick_from_spec(spec)`` builds the
model and its feeds from it alone, so a falsifying example can be pasted into an ``@example``.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from support.strategies.generated import GeneratedModel


class PickModel(GeneratedModel):
    rebuilt_by = "pick_from_spec"


@st.composite
def pick_models(draw) -> PickModel:
    rank = draw(st.sampled_from([2, 3]))
    shape = [draw(st.sampled_from([1, 2]))] + [draw(st.integers(1, 4)) for _ in range(rank - 1)]
    axis = draw(st.integers(-rank, rank - 1))
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    joined = list(shape)
    joined[axis] = sum(sizes)
    pick = draw(st.sampled_from(["gather", "slice", "none"]))
    on = draw(st.integers(0, rank - 1))
    n = joined[on]
    spec = {"shape": shape, "axis": axis, "sizes": sizes, "pick": pick, "on": on,
            "keep_join": draw(st.booleans()), "seed": draw(st.integers(0, 2 ** 16))}
    if pick == "gather":
        form = draw(st.sampled_from(["scalar", "run", "any"]))
        if form == "scalar":
            spec["indices"] = draw(st.integers(-n, n - 1))
        elif form == "run":
            start = draw(st.integers(0, n - 1))
            run = list(range(start, draw(st.integers(start + 1, n))))
            spec["indices"] = [i - n if draw(st.booleans()) else i for i in run]
        else:
            spec["indices"] = draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=3))
    elif pick == "slice":
        # never empty: an empty tensor fails verify on main already (see the report)
        start = draw(st.integers(0, n - 1))
        end = draw(st.integers(start + 1, n))
        spec["start"] = start - n if draw(st.booleans()) else start
        spec["end"] = draw(st.sampled_from([end, end - n if end < n else 2 ** 62]))
    return pick_from_spec(spec)


def _pick_node(spec, joined: str, inits: list):
    if spec["pick"] == "gather":
        inits.append(numpy_helper.from_array(np.array(spec["indices"], np.int64), "indices"))
        return helper.make_node("Gather", [joined, "indices"], ["picked"], name="pick",
                                axis=spec["on"])
    for name in ("start", "end"):
        inits.append(numpy_helper.from_array(np.array([spec[name]], np.int64), name))
    inits.append(numpy_helper.from_array(np.array([spec["on"]], np.int64), "on"))
    return helper.make_node("Slice", [joined, "start", "end", "on"], ["picked"], name="pick")


def pick_from_spec(spec: dict) -> PickModel:
    rank, axis = len(spec["shape"]), spec["axis"] % len(spec["shape"])
    inputs, nodes, parts = [], [], []
    for i, size in enumerate(spec["sizes"]):
        shape = list(spec["shape"])
        shape[axis] = size
        inputs.append(helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, shape))
        nodes.append(helper.make_node("Relu", [f"x{i}"], [f"r{i}"], name=f"relu{i}"))
        parts.append(f"r{i}")
    nodes.append(helper.make_node("Concat", parts, ["joined"], name="join", axis=spec["axis"]))
    inits, outputs = [], []
    if spec["pick"] != "none":
        nodes.append(_pick_node(spec, "joined", inits))
        nodes.append(helper.make_node("Sigmoid", ["picked"], ["y"], name="after_pick"))
        outputs.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, None))
    if spec["keep_join"] or spec["pick"] == "none":
        nodes.append(helper.make_node("Tanh", ["joined"], ["z"], name="after_join"))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "picks", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    model = _shaped(model)
    rng = np.random.default_rng(spec["seed"])
    feeds = {i.name: (rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
                      * 10.0 ** rng.integers(-3, 4)).astype(np.float32) for i in inputs}
    return PickModel(model=model, feeds=feeds, description=f"rank-{rank} pick", spec=spec)


def _shaped(model):
    """The outputs declared with the shapes onnx infers (the loader wants them static)."""
    import onnx
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for output in model.graph.output:
        output.CopyFrom(shapes[output.name])
    return model
