"""Graph variants of the example MNIST CNN, for converter tests.

* ``nchw_flatten_variant(model)``: the same function without the Keras-style
  ``Transpose(perm=[0,2,3,1])`` before ``Flatten``; ``Flatten`` runs on the NCHW
  tensor and the rows of the following MatMul weight are permuted to match
  (the row for NHWC index (h, w, c) moves to NCHW index (c, h, w)). Outputs are
  identical up to float rounding.
* ``sigmoid_variant(model)``: inserts a ``Sigmoid`` node (``Sigmoid_0``) right
  after the first ``MaxPool``; computes a different function, meant for
  partitioning tests.

Both take and return an ``onnx.ModelProto`` (the input is not modified) and
keep the model's IR version and opset. Only onnx and numpy are needed.

Self-check: ``python examples/mnist_cnn/variants.py`` (needs onnxruntime).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def _consumers(graph: onnx.GraphProto, tensor: str):
    return [n for n in graph.node if tensor in n.input]


def _unique_name(graph: onnx.GraphProto, base: str) -> str:
    taken = {n.name for n in graph.node}
    for n in graph.node:
        taken.update(n.input)
        taken.update(n.output)
    taken.update(i.name for i in graph.initializer)
    taken.update(i.name for i in graph.input)
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    return name


def nchw_flatten_variant(model: onnx.ModelProto) -> onnx.ModelProto:
    """Drop the NHWC Transpose before Flatten and permute the fc1 weight rows."""
    m = _copy(model)
    g = m.graph
    inits = {i.name: i for i in g.initializer}

    tr = next((n for n in g.node if n.op_type == "Transpose"
               and list(helper.get_attribute_value(a) for a in n.attribute if a.name == "perm")
               == [[0, 2, 3, 1]]), None)
    if tr is None:
        raise ValueError("no Transpose(perm=[0,2,3,1]) in the model")
    flat_users = _consumers(g, tr.output[0])
    if len(flat_users) != 1 or flat_users[0].op_type != "Flatten":
        raise ValueError("the Transpose must feed exactly one Flatten")
    flat = flat_users[0]
    axis = next((helper.get_attribute_value(a) for a in flat.attribute if a.name == "axis"), 1)
    if axis != 1:
        raise ValueError("Flatten must have axis=1")
    mm_users = _consumers(g, flat.output[0])
    if len(mm_users) != 1 or mm_users[0].op_type != "MatMul" or mm_users[0].input[0] != flat.output[0]:
        raise ValueError("the Flatten must feed exactly one MatMul as its first input")
    mm = mm_users[0]
    w_name = mm.input[1]
    if w_name not in inits:
        raise ValueError(f"MatMul weight {w_name!r} is not an initializer")
    if len(_consumers(g, w_name)) != 1:
        raise ValueError(f"MatMul weight {w_name!r} is shared with other nodes")

    # N, C, H, W of the Transpose's input
    inferred = onnx.shape_inference.infer_shapes(model)
    vis = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.input)}
    dims = [d.dim_value for d in vis[tr.input[0]].type.tensor_type.shape.dim]
    if len(dims) != 4 or min(dims[1:]) <= 0:
        raise ValueError(f"cannot determine the static shape of {tr.input[0]!r}: {dims}")
    _, c, h, w = dims

    wt = numpy_helper.to_array(inits[w_name])
    if wt.shape[0] != c * h * w:
        raise ValueError(f"{w_name} has {wt.shape[0]} rows, expected {c * h * w}")
    # row (h, w, c) in NHWC order -> row (c, h, w) in NCHW order
    w_nchw = wt.reshape(h, w, c, -1).transpose(2, 0, 1, 3).reshape(c * h * w, -1)
    inits[w_name].CopyFrom(numpy_helper.from_array(np.ascontiguousarray(w_nchw), w_name))

    flat.input[0] = tr.input[0]
    g.node.remove(tr)
    g.name = g.name + "_nchw_flatten"
    onnx.checker.check_model(m)
    return m


def sigmoid_variant(model: onnx.ModelProto) -> onnx.ModelProto:
    """Insert a Sigmoid right after the first MaxPool (before the second Conv)."""
    m = _copy(model)
    g = m.graph
    pos, pool = next(((i, n) for i, n in enumerate(g.node) if n.op_type == "MaxPool"), (None, None))
    if pool is None:
        raise ValueError("no MaxPool in the model")
    src = pool.output[0]
    if any(o.name == src for o in g.output):
        raise ValueError("the first MaxPool's output is a graph output")
    dst = _unique_name(g, src + "_sigmoid")
    for n in g.node:
        for k, name in enumerate(n.input):
            if name == src:
                n.input[k] = dst
    sig = helper.make_node("Sigmoid", [src], [dst], name=_unique_name(g, "Sigmoid_0"))
    g.node.insert(pos + 1, sig)
    g.name = g.name + "_sigmoid"
    onnx.checker.check_model(m)
    return m


def _self_check() -> None:
    from pathlib import Path

    import onnxruntime as ort

    here = Path(__file__).resolve().parent
    base = onnx.load(str(here / "mnist_cnn.onnx"))
    data = np.load(here / "heldout.npz")
    x, y = data["images"], data["labels"]

    def run(model):
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return np.concatenate([sess.run(None, {"input": x[i:i + 1]})[0] for i in range(len(x))])

    ref = run(base)
    nchw = nchw_flatten_variant(base)
    sig = sigmoid_variant(base)
    for name, mdl in [("nchw_flatten", nchw), ("sigmoid", sig)]:
        onnx.checker.check_model(mdl, full_check=True)
        assert mdl.ir_version == base.ir_version
        assert all(n.name for n in mdl.graph.node)
        out = run(mdl)
        print(f"{name}: ops {[n.op_type for n in mdl.graph.node]}")
        print(f"  max |diff| vs original {np.abs(out - ref).max():.3g}, "
              f"accuracy {(out.argmax(1) == y).mean():.4f} (original {(ref.argmax(1) == y).mean():.4f})")
    assert "Transpose" not in [n.op_type for n in nchw.graph.node]
    assert np.abs(run(nchw) - ref).max() < 1e-5
    assert [n.op_type for n in sig.graph.node][2:4] == ["MaxPool", "Sigmoid"]
    assert base.graph.node[6].op_type == "Transpose"  # input left untouched
    print("ok")


if __name__ == "__main__":
    _self_check()
