"""Hypothesis strategies of mutated artifacts: a Nodes-JSON / Constants-JSON pair the converter
wrote with one field, constant or top-level key broken (``artifact_mutations``), and a manifest
with one stage, boundary or model field broken (``manifest_mutations``)."""
from __future__ import annotations

import base64
import copy

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from support.strategies.mutation import Mutation


def layer_name_of(node) -> str:
    """The layer kind a Nodes-JSON node names (written as a one-item list or a string)."""
    v = node["attrs"]["layer_name"]
    return v[0] if isinstance(v, list) else v


# Malformed values for list-of-integer-strings attributes (none of them parses as integers).
BAD_INT_ATTRS = [{"a": 1}, [["1", "1"]], ["x", "y"], ["1.5"], [True], None, ["1", "2", "3", "4", "5"]]
INT_ATTR_COUNTS = {"strides": 2, "padding": 4, "dilation": 2, "pool_size": 2, "kernel_size": 2,
                   "groups": 1, "channels": 1, "axis": 1}
CONST_ATTRS = ["kernel_const_name", "bias_const_name", "input_const_name"]
SILENT_OPTIONAL = {"activation_type", "count_include_pad"}


def artifact_mutations(pair):
    return _artifact_mutations(pair).map(Mutation)


@st.composite
def _artifact_mutations(draw, pair):
    """(nodes, consts, names: any one must appear in the message, must_raise, description).

    The message must name the mutated field or the layer (for a constant: the constant or a layer
    using it), as the library's errors promise.

    must_raise=False: the mutation might be harmless (a dropped attribute whose default is the
    value it had); then compile must succeed and give bit-identical outputs."""
    nodes0, consts0 = pair[0], pair[1]
    nodes, consts = copy.deepcopy(nodes0), copy.deepcopy(consts0)
    layers = [i for i, n in enumerate(nodes["nodes"]) if n["op"] != "input"]
    inputs = [i for i, n in enumerate(nodes["nodes"]) if n["op"] == "input"]
    target = draw(st.sampled_from(["layer", "layer", "layer", "input", "top", "const", "const"]))
    if target == "layer":
        i = draw(st.sampled_from(layers), label="layer")
        node = nodes["nodes"][i]
        name, attrs = node["name"], node["attrs"]
        what = draw(st.sampled_from(["layer_name", "layer_name_type", "int_attr", "const_ref",
                                     "const_ref_type", "shape", "shape_wrong", "inputs", "op",
                                     "name", "drop", "source_nodes", "activation"]))
        if what == "layer_name":
            attrs["layer_name"] = [draw(st.sampled_from(["Conv3D", "conv2d", "Softmax3D", "", "FC2"]))]
            return nodes, consts, [name, "layer_name"], True, f"{name}.layer_name = {attrs['layer_name']}"
        if what == "layer_name_type":
            attrs["layer_name"] = draw(st.sampled_from([5, None, [], [5], [None], {"x": 1},
                                                        [["Conv2D"]], [{"a": 1}]]))
            return nodes, consts, [name, "layer_name"], True, f"{name}.layer_name = {attrs['layer_name']!r}"
        if what == "int_attr":
            keys = [k for k in INT_ATTR_COUNTS if k in attrs]
            assume(keys)
            key = draw(st.sampled_from(keys))
            bad = draw(st.sampled_from(BAD_INT_ATTRS))
            if isinstance(bad, list) and len(bad) == 5 and INT_ATTR_COUNTS[key] == 4:
                bad = bad[:3]
            attrs[key] = bad
            return nodes, consts, [name, key], True, f"{name}.{key} = {bad!r}"
        if what in ("const_ref", "const_ref_type"):
            keys = [k for k in CONST_ATTRS if k in attrs]
            assume(keys)
            key = draw(st.sampled_from(keys))
            attrs[key] = (["no_such_const"] if what == "const_ref"
                          else draw(st.sampled_from([3, [3], {"a": "b"}, [["x"]], None])))
            return nodes, consts, [name, key], True, f"{name}.{key} = {attrs[key]!r}"
        if what == "shape":
            attrs["shape"] = draw(st.sampled_from(["x", [[1, "a"]], [[-1, 2]], [], [[1.5]], None,
                                                   [[True, 1]]]))
            return nodes, consts, [name, "shape"], True, f"{name}.shape = {attrs['shape']!r}"
        if what == "shape_wrong":
            shp = attrs["shape"][0]
            k = draw(st.integers(0, len(shp) - 1))
            shp[k] += draw(st.sampled_from([1, 2]))
            return nodes, consts, [name, "shape"], True, f"{name}.shape[{k}] changed to {shp}"
        if what == "inputs":
            node["inputs"] = draw(st.sampled_from(["x", [[999, 0, 0]], [[i, 0, 0]], [["0", 0, 0]],
                                                   [[0, 1, 0]], [[-1, 0, 0]], [[0]], None]))
            return nodes, consts, [name, "inputs", "input"], True, f"{name}.inputs = {node['inputs']!r}"
        if what == "op":
            node["op"] = draw(st.sampled_from(["conv", "tvm", 1, None, ""]))
            return nodes, consts, [name, "op"], True, f"{name}.op = {node['op']!r}"
        if what == "name":
            node["name"] = draw(st.sampled_from([5, None, ["x"]]))
            return nodes, consts, [name, "name"], True, f"nodes[{i}].name = {node['name']!r}"
        if what == "source_nodes":
            attrs["source_nodes"] = draw(st.sampled_from(["Conv_1", [1], {"a": 1}]))
            return nodes, consts, [name, "source_nodes"], True, f"{name}.source_nodes = {attrs['source_nodes']!r}"
        if what == "activation":
            assume(layer_name_of(node) in ("Conv2D", "FC", "Sum2D"))
            attrs["activation_type"] = draw(st.sampled_from([["gelu"], ["swish"], [5]]))
            return nodes, consts, [name, "activation_type"], True, \
                f"{name}.activation_type = {attrs['activation_type']!r}"
        # activation_type and count_include_pad are optional by contract (their absence is a
        # valid file with another meaning).
        key = draw(st.sampled_from(sorted(set(attrs) - SILENT_OPTIONAL)))
        del attrs[key]
        return nodes, consts, [key, name], False, f"{name}: attrs.{key} dropped"
    if target == "input":
        i = draw(st.sampled_from(inputs))
        node = nodes["nodes"][i]
        what = draw(st.sampled_from(["shape", "dtype", "name", "attrs", "shape_wrong"]))
        if what == "shape":
            node["attrs"]["shape"] = draw(st.sampled_from([[["a"]], "x", [[-1, 3]], None]))
            return nodes, consts, ["shape"], True, f"input {i} shape {node['attrs']['shape']!r}"
        if what == "shape_wrong":
            node["attrs"]["shape"] = [[1, 3, 8, 9]]
            return nodes, consts, ["shape", "data_layout_shape"], True, "input shape [1,3,8,9]"
        if what == "dtype":
            node["attrs"]["dtype"] = draw(st.sampled_from([["float16"], ["int8"], [5]]))
            return nodes, consts, ["dtype"], True, f"input {i} dtype {node['attrs']['dtype']!r}"
        if what == "name":
            node["name"] = draw(st.sampled_from([5, None]))
            return nodes, consts, ["name"], True, f"input {i} name {node['name']!r}"
        node["attrs"] = draw(st.sampled_from([None, [], "x"]))
        return nodes, consts, ["attrs"], True, f"input {i} attrs {node['attrs']!r}"
    if target == "top":
        what = draw(st.sampled_from(["drop", "heads", "arg_nodes", "num_in", "num_out",
                                     "attrs_shape", "nodes_type", "not_object"]))
        if what == "drop":
            key = draw(st.sampled_from(["nodes", "arg_nodes", "heads"]))
            del nodes[key]
            return nodes, consts, [key], True, f"top-level {key} dropped"
        if what == "heads":
            nodes["heads"] = draw(st.sampled_from([[[999, 0, 0]], "x", [[0, 1, 0]], [["1", 0, 0]],
                                                   [[-1, 0, 0]]]))
            return nodes, consts, ["heads"], True, f"heads = {nodes['heads']!r}"
        if what == "arg_nodes":
            nodes["arg_nodes"] = draw(st.sampled_from([[], [1], [0, 0], "0"]))
            return nodes, consts, ["arg_nodes"], True, f"arg_nodes = {nodes['arg_nodes']!r}"
        if what in ("num_in", "num_out"):
            key = "num_subgraph_inputs" if what == "num_in" else "num_subgraph_outputs"
            nodes[key] = draw(st.sampled_from(["7", "0", "x"]))
            return nodes, consts, [key], True, f"{key} = {nodes[key]!r}"
        if what == "attrs_shape":
            nodes["attrs"]["shape"] = draw(st.sampled_from([
                ["list_shape", nodes["attrs"]["shape"][1][:-1]], "x",
                ["list_shape", [[9, 9]] * len(nodes["nodes"])]]))
            return nodes, consts, ["attrs.shape"], True, "top-level attrs.shape mutated"
        if what == "nodes_type":
            nodes["nodes"] = draw(st.sampled_from(["x", {"a": 1}, None]))
            return nodes, consts, ["nodes"], True, f"nodes = {nodes['nodes']!r}"
        return [nodes], consts, ["object"], True, "Nodes-JSON is a list"
    # constants: the message must name the constant, or a layer that uses it
    cname = draw(st.sampled_from(sorted(consts)), label="constant")
    entry = consts[cname]
    users = [n["name"] for n in nodes["nodes"] if n["op"] != "input"
             and any(n["attrs"].get(k) in ([cname], cname) for k in CONST_ATTRS)]
    what = draw(st.sampled_from(["drop_field", "shape_type", "dtype", "b64_type", "b64_chars",
                                 "b64_truncate", "b64_short", "shape_len", "missing",
                                 "reshape", "entry_type", "not_object"]))
    if what == "drop_field":
        key = draw(st.sampled_from(["shape", "dtype", "data_base64"]))
        del entry[key]
        return nodes, consts, [cname] + users, True, f"{cname}.{key} dropped"
    if what == "shape_type":
        entry["shape"] = draw(st.sampled_from(["3", [1.5], [-1], [True], None, [[1]]]))
        return nodes, consts, [cname] + users, True, f"{cname}.shape = {entry['shape']!r}"
    if what == "dtype":
        entry["dtype"] = draw(st.sampled_from(["float16", "int8", 5, None]))
        return nodes, consts, [cname] + users, True, f"{cname}.dtype = {entry['dtype']!r}"
    if what == "b64_type":
        entry["data_base64"] = draw(st.sampled_from([5, None, ["AAAA"], {"a": 1}]))
        return nodes, consts, [cname] + users, True, f"{cname}.data_base64 = {entry['data_base64']!r}"
    text = entry["data_base64"]
    if what == "b64_chars":
        pos = draw(st.integers(0, len(text) - 1))
        ch = draw(st.sampled_from(["!", "@", "*", " ", "\n", "é"]))
        entry["data_base64"] = text[:pos] + ch + text[pos + 1:]
        return nodes, consts, [cname] + users, True, f"{cname}.data_base64[{pos}] = {ch!r}"
    if what == "b64_truncate":
        cut = draw(st.integers(1, 3))
        entry["data_base64"] = text[:-cut]
        return nodes, consts, [cname] + users, True, f"{cname}.data_base64 loses {cut} chars"
    if what == "b64_short":
        raw = base64.b64decode(text)
        k = draw(st.integers(1, 4))
        entry["data_base64"] = base64.b64encode(raw[:-k] if draw(st.booleans()) else raw + b"\0" * k).decode()
        return nodes, consts, [cname] + users, True, f"{cname}.data_base64 length off by {k} bytes"
    if what == "shape_len":
        shp = entry["shape"]
        how = draw(st.sampled_from(["grow", "append", "drop"]))
        if how == "grow":
            k = draw(st.integers(0, len(shp) - 1))
            shp[k] += 1
        elif how == "append":
            shp.append(2)
        else:
            assume(len(shp) > 1 and shp[-1] != 1)
            shp.pop()
        return nodes, consts, [cname] + users, True, f"{cname}.shape {how} -> {shp}"
    if what == "missing":
        del consts[cname]
        return nodes, consts, [cname] + users, True, f"constant {cname} removed"
    if what == "reshape":  # same bytes, another shape: may be harmless (e.g. [1,1,1,O] vs [O])
        shp = entry["shape"]
        new = draw(st.sampled_from([[int(np.prod(shp))], list(reversed(shp)), [1] + shp]))
        assume(new != shp)
        entry["shape"] = new
        return nodes, consts, [cname] + users, False, f"{cname}.shape {shp} -> {new}"
    if what == "entry_type":
        consts[cname] = draw(st.sampled_from(["AAAA", 5, None, [1, 2]]))
        return nodes, consts, [cname] + users, True, f"{cname} = {consts[cname]!r}"
    return nodes, [consts], ["object"], True, "Constants-JSON is a list"


@st.composite
def _manifest_mutations(draw, manifest):
    m = copy.deepcopy(manifest)
    stages = m["stages"]
    k = draw(st.integers(0, len(stages) - 1), label="stage")
    stage = stages[k]
    what = draw(st.sampled_from(["drop_stages", "stages_type", "drop_model", "kind", "file",
                                 "file_type", "io_shape", "io_dtype", "io_tensor", "swap",
                                 "drop_stage_key", "io_type", "model_io"]))
    if what == "drop_stages":
        del m["stages"]
        return m, ["stages"], "no stages"
    if what == "stages_type":
        m["stages"] = draw(st.sampled_from([{}, "x", None, [1]]))
        return m, ["stages"], f"stages = {m['stages']!r}"
    if what == "drop_model":
        del m["model"]
        return m, ["model"], "no model"
    if what == "kind":
        stage["kind"] = draw(st.sampled_from(["gpu", "", 1, None]))
        return m, ["kind"], f"stages[{k}].kind = {stage['kind']!r}"
    if what in ("file", "file_type"):
        keys = [key for key in ("nodes_json", "consts_json", "onnx") if key in stage]
        key = draw(st.sampled_from(keys))
        stage[key] = (draw(st.sampled_from(["missing.json", "../manifest.json", "", "sub/x.onnx"]))
                      if what == "file" else draw(st.sampled_from([1, None, ["a"]])))
        return m, [key], f"stages[{k}].{key} = {stage[key]!r}"
    if what == "drop_stage_key":
        key = draw(st.sampled_from(sorted(set(stage) & {"kind", "nodes_json", "consts_json", "onnx",
                                                        "inputs", "outputs"})))
        del stage[key]
        return m, [key], f"stages[{k}] without {key}"
    side = draw(st.sampled_from(["inputs", "outputs"]))
    if what == "io_type":
        stage[side] = draw(st.sampled_from(["x", None, [1], {}]))
        return m, [side], f"stages[{k}].{side} = {stage[side]!r}"
    io = stage[side][0]
    if what == "io_shape":
        io["shape"] = draw(st.sampled_from(["x", [1.5], [-1], None, [True],
                                            [d + 1 for d in io["shape"]]]))
        return m, ["shape", "input", "output", io["tensor"]], f"stages[{k}].{side}[0].shape = {io['shape']!r}"
    if what == "io_dtype":
        io["dtype"] = draw(st.sampled_from(["float64x", 5, "tensor(float)", "int8", "float64"]))
        return m, ["dtype", io["tensor"]], f"stages[{k}].{side}[0].dtype = {io['dtype']!r}"
    if what == "io_tensor":
        old = io["tensor"]
        io["tensor"] = draw(st.sampled_from(["no_such_tensor", 5, None]))
        return m, ["tensor", old, "no_such_tensor"], f"stages[{k}].{side}[0].tensor = {io['tensor']!r}"
    if what == "swap":  # run order no longer topological
        assume(k + 1 < len(stages))
        stages[k], stages[k + 1] = stages[k + 1], stages[k]
        return m, [stages[k]["name"], stages[k + 1]["name"], "stage"], f"stages {k} and {k + 1} swapped"
    io_list = m["model"][side]
    io_list[0]["shape"] = draw(st.sampled_from(["x", None, [d + 1 for d in io_list[0]["shape"]]]))
    return m, ["shape", io_list[0]["name"]], f"model.{side}[0].shape = {io_list[0]['shape']!r}"


def manifest_mutations(manifest):
    return _manifest_mutations(manifest).map(Mutation)
