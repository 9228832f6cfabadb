"""Readers refuse mutated files with the library's error, and the error names the field.

- rule files (YAML, schemas/rules.schema.json) -> ``RuleFileError`` (schema and semantic checks)
- Nodes-JSON / Constants-JSON pairs read by the simulator -> ``ArtifactError``
- manifest.json read by HybridSession -> ``MrvlConvertError``
"""
from __future__ import annotations

import base64
import copy
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, List, Tuple

import numpy as np
import pytest
import yaml
from hypothesis import assume, example, given, note
from hypothesis import strategies as st

import mrvl_convert
from mrvl_convert.errors import ArtifactError, Fp16RangeError, MrvlConvertError, RuleFileError
from mrvl_convert.rules.loader import builtin_path, load_rule_file
from mrvl_convert.layers import CATALOGUE
from mrvl_convert.runtime.simulator import MrvlSimulator
from strategies import ModelBuilder, _finish

# ============================================================================ rule files

BUILTIN = yaml.safe_load(builtin_path().read_text(encoding="utf-8"))
COMPOSITE_KEYS = ["name", "layer", "priority", "summary", "pattern", "constraints"]
REQUIRED_COMPOSITE_KEYS = ["name", "layer", "pattern"]

# Values that are of the wrong JSON type (or out of range / not matching the pattern) per field.
BAD_VALUES = {
    "name": [1, None, ["mrvl.x"], "1starts-with-digit", "has space", ""],
    "layer": [1, None, "Conv3D", "conv2d", ["Conv2D"]],
    "priority": ["100", 1.5, -1, 1001, None, True],
    "summary": [1, None, ["x"], {"a": 1}],
    "pattern": [[], "Conv", {"role": "conv"}, None, [{"role": "conv", "op": ["Conv"]}] * 9],
    "constraints": ["x", {"role": "conv"}, None, 3],
    "step.role": [1, None, "Conv", "bad-role", "", ["conv"]],
    "step.op": [[], "Conv", [1], ["bad op"], ["1Conv"], None],
    "step.optional": ["yes", 1, None, [True]],
    "constraint.role": [1, None, ["conv"]],
    "constraint.check": ["no_such_check", 1, None, "Float32"],
    "constraint.args": [[1], "rank", 4, None],
    "constraint.reason": ["", 1, None, ["why"]],
}


class Mutation(tuple):
    """A mutated document and what to expect of it; shown by its description (the last item)."""

    def __repr__(self) -> str:
        return f"<mutation: {self[-1]}>"

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(repr(self))


def _field(*parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else p)
    return out


def rule_mutations():
    return _rule_mutations().map(Mutation)


@st.composite
def _rule_mutations(draw) -> Tuple[Any, List[str], str]:
    """(mutated rule-file data, strings the error message must contain, what was done)."""
    data = copy.deepcopy(BUILTIN)
    comps = data["composites"]
    i = draw(st.integers(0, len(comps) - 1), label="composite")
    comp = comps[i]
    kind = draw(st.sampled_from([
        "drop_key", "bad_value", "unknown_key", "step_drop", "step_bad", "step_unknown",
        "constraint_drop", "constraint_bad", "constraint_unknown", "constraint_role",
        "dup_role", "all_optional", "wrong_layer", "dup_name", "top_level"]), label="mutation")
    if kind == "drop_key":
        key = draw(st.sampled_from(REQUIRED_COMPOSITE_KEYS))
        del comp[key]
        return data, [_field("composites", i), repr(key)], f"composites[{i}] without {key}"
    if kind == "bad_value":
        key = draw(st.sampled_from(COMPOSITE_KEYS))
        comp[key] = draw(st.sampled_from(BAD_VALUES[key]))
        return data, [_field("composites", i, key)], f"composites[{i}].{key} = {comp[key]!r}"
    if kind == "unknown_key":
        key = draw(st.sampled_from(["op", "Name", "patterns", "constraint", "extra"]))
        comp[key] = 1
        return data, [_field("composites", i), repr(key)], f"composites[{i}] gains {key}"
    if kind.startswith("step"):
        j = draw(st.integers(0, len(comp["pattern"]) - 1), label="step")
        step = comp["pattern"][j]
        where = _field("composites", i, "pattern", j)
        if kind == "step_drop":
            key = draw(st.sampled_from(["role", "op"]))
            del step[key]
            return data, [where, repr(key)], f"{where} without {key}"
        if kind == "step_bad":
            key = draw(st.sampled_from(["role", "op", "optional"]))
            step[key] = draw(st.sampled_from(BAD_VALUES[f"step.{key}"]))
            return data, [f"{where}.{key}"], f"{where}.{key} = {step[key]!r}"
        step["kind"] = "x"
        return data, [where, "'kind'"], f"{where} gains kind"
    if kind.startswith("constraint"):
        cons = comp.get("constraints") or []
        assume(cons)
        k = draw(st.integers(0, len(cons) - 1), label="constraint")
        con = cons[k]
        where = _field("composites", i, "constraints", k)
        if kind == "constraint_drop":
            key = draw(st.sampled_from(["role", "check", "reason"]))
            del con[key]
            return data, [where, repr(key)], f"{where} without {key}"
        if kind == "constraint_bad":
            key = draw(st.sampled_from(["role", "check", "args", "reason"]))
            con[key] = draw(st.sampled_from(BAD_VALUES[f"constraint.{key}"]))
            return data, [f"{where}.{key}"], f"{where}.{key} = {con[key]!r}"
        if kind == "constraint_unknown":
            con["when"] = "always"
            return data, [where, "'when'"], f"{where} gains when"
        con["role"] = "no_such_role"
        return data, [f"{where}.role", "no_such_role"], f"{where}.role = no_such_role"
    if kind == "dup_role":
        assume(len(comp["pattern"]) >= 2)
        comp["pattern"][1]["role"] = comp["pattern"][0]["role"]
        return data, [_field("composites", i, "pattern")], f"composites[{i}]: duplicate role"
    if kind == "all_optional":
        for step in comp["pattern"]:
            step["optional"] = True
        return data, [_field("composites", i, "pattern")], f"composites[{i}]: all steps optional"
    if kind == "wrong_layer":
        roles = {s["role"] for s in comp["pattern"]}
        bad = [name for name, kind in sorted(CATALOGUE.items())
               if not kind.required_roles <= roles
               or not roles <= kind.required_roles | kind.optional_roles | kind.one_of_roles
               or kind.one_of_roles and not kind.one_of_roles & roles]
        comp["layer"] = draw(st.sampled_from(bad))
        return data, [_field("composites", i, "pattern"), comp["layer"]], \
            f"composites[{i}].layer = {comp['layer']}"
    if kind == "dup_name":
        j = draw(st.integers(0, len(comps) - 1).filter(lambda j: j != i), label="other")
        comps[j]["name"] = comp["name"]
        return data, [repr(comp["name"])], f"composites[{j}].name = composites[{i}].name"
    # top level
    what = draw(st.sampled_from(["version", "version_str", "no_composites", "empty", "dict",
                                 "unknown", "list", "scalar"]))
    if what == "version":
        data["format_version"] = 2
        return data, ["format_version"], "format_version 2"
    if what == "version_str":
        data["format_version"] = "1"
        return data, ["format_version"], "format_version '1'"
    if what == "no_composites":
        del data["composites"]
        return data, ["'composites'"], "no composites"
    if what == "empty":
        data["composites"] = []
        return data, ["composites"], "composites []"
    if what == "dict":
        data["composites"] = {"a": comp}
        return data, ["composites"], "composites is a mapping"
    if what == "unknown":
        data["rules"] = []
        return data, ["'rules'"], "unknown top-level key"
    if what == "list":
        return [data], ["<top level>"], "top level is a list"
    return "just a string", ["<top level>"], "top level is a string"


def _write(tmp: str, name: str, text: str) -> Path:
    path = Path(tmp) / name
    path.write_text(text, encoding="utf-8")
    return path


def test_builtin_rule_file_loads():
    assert load_rule_file(builtin_path())


def assert_rule_file_refused(mutation) -> None:
    """The mutated rule file is a RuleFileError whose message names every expected field."""
    data, must_name, what = mutation
    note(what)
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(tmp, "rules.yaml", yaml.safe_dump(data, sort_keys=False))
        with pytest.raises(RuleFileError) as info:
            load_rule_file(path)
    msg = str(info.value)
    note(msg)
    for s in must_name:
        assert s in msg, f"{what}: error {msg!r} does not name {s!r}"


@given(mutation=rule_mutations())
def test_mutated_rule_file_is_refused_naming_the_field(mutation):
    assert_rule_file_refused(mutation)


# Arguments each check reads (mrvl_convert/rules/checks.py) and their JSON types.
CHECK_ARGS = {"rank": {"rank": int}, "batch_at_most": {"max": int},
              "const_input": {"index": int}, "attr_in": {"name": str, "values": list}}
WRONG_TYPED = {int: ["four", [4], None, 4.5], str: [1, ["group"], None], list: [0, "0", None]}
BAD_REASONS = ["unbalanced {", "stray } brace", "{0} is positional", "{rank.real.x} attribute",
               "{tensor[0][1]} index", "{detail!z} conversion", "{detail:>>>} spec"]


def rule_semantic_mutations():
    return _rule_semantic_mutations().map(Mutation)


@st.composite
def _rule_semantic_mutations(draw) -> Tuple[Any, List[str], str]:
    """Rule files that pass rules.schema.json but whose constraint args or reason template
    cannot work: the loader must refuse them (RuleFileError naming the field), instead of
    convert() failing later with a KeyError/TypeError/ValueError from inside a check."""
    data = copy.deepcopy(BUILTIN)
    spots = [(i, k, c) for i, comp in enumerate(data["composites"])
             for k, c in enumerate(comp.get("constraints", []))]
    what = draw(st.sampled_from(["drop_arg", "wrong_type", "no_args", "reason"]))
    if what == "reason":
        i, k, con = draw(st.sampled_from(spots))
        con["reason"] = draw(st.sampled_from(BAD_REASONS))
        return data, [_field("composites", i, "constraints", k, "reason")], \
            f"composites[{i}].constraints[{k}].reason = {con['reason']!r}"
    i, k, con = draw(st.sampled_from([s for s in spots if s[2]["check"] in CHECK_ARGS]))
    spec = CHECK_ARGS[con["check"]]
    where = _field("composites", i, "constraints", k, "args")
    if what == "no_args":
        con.pop("args", None)
        return data, [_field("composites", i, "constraints", k)], f"{where} removed"
    key = draw(st.sampled_from(sorted(spec)))
    if what == "drop_arg":
        del con["args"][key]
        return data, [where, key], f"{where}.{key} removed"
    con["args"][key] = draw(st.sampled_from(WRONG_TYPED[spec[key]]))
    return data, [where, key], f"{where}.{key} = {con['args'][key]!r}"


# Found by fuzzing (fixed): rule files were validated against the schema only, so constraint
# args and reason templates that cannot work made convert() die later with KeyError/TypeError/
# ValueError inside a check or str.format.
@example(mutation=Mutation(({"format_version": 1, "composites": [{
    "name": "mrvl.conv2d_nhwc2nhwc", "layer": "Conv2D", "pattern": [{"role": "conv", "op": ["Conv"]}],
    "constraints": [{"role": "conv", "check": "rank", "args": {}, "reason": "rank {rank}"}]}]},
    ["composites[0].constraints[0].args", "rank"], "rank check without args.rank")))
@example(mutation=Mutation(({"format_version": 1, "composites": [{
    "name": "mrvl.conv2d_nhwc2nhwc", "layer": "Conv2D", "pattern": [{"role": "conv", "op": ["Conv"]}],
    "constraints": [{"role": "conv", "check": "float32", "reason": "unbalanced {"}]}]},
    ["composites[0].constraints[0].reason"], "reason 'unbalanced {'")))
@given(mutation=rule_semantic_mutations())
def test_rule_file_with_unusable_args_or_reason_is_refused(mutation):
    assert_rule_file_refused(mutation)


@given(text=st.one_of(
    st.text(max_size=200),
    st.sampled_from(["composites: [", "{format_version: 1, composites: [{name: a", "\t- x",
                     "a: b: c", "!!python/object:os.system x", "--- 1\n--- 2\n", "\x00"]),
    st.binary(max_size=100).map(lambda b: b.decode("latin-1"))))
def test_garbage_rule_file_is_refused(text):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rules.yaml"
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        with pytest.raises(RuleFileError):
            load_rule_file(path)


@given(cut=st.integers(1, 2000))
def test_truncated_builtin_is_refused_or_loads(cut):
    """A truncated builtin.yaml either still parses to a valid file or is a RuleFileError."""
    text = builtin_path().read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(tmp, "rules.yaml", text[:cut])
        try:
            load_rule_file(path)
        except RuleFileError:
            pass


# ============================================================================ Nodes-JSON + Constants-JSON


def _pair_model():
    """A small model whose one Mrvl subgraph holds every common layer kind."""
    b = ModelBuilder(13, 7)
    x = b.input([1, 3, 8, 8])
    x = b.unary(b.conv(x, 8, [3, 3], pads=[1, 1, 1, 1]), "Relu")               # Conv2D + relu
    p = b.maxpool(x, [3, 3], [1, 1], [1, 1, 1, 1])                              # Maxpool2D
    d = b.conv(x, 8, [3, 3], pads=[1, 1, 1, 1], groups=8, bias=False)           # depthwise
    x = b.unary(b.add(d, p), "Relu")                                            # Sum2D
    x = b.avgpool(x, [2, 2], [2, 2], count_include_pad=0)                      # Avgpool2D
    x = b.binary_const(x, "Add", [1, 8, 1, 1])                                  # Sum2D + const
    y = b.conv(x, 4, [1, 1], strides=[2, 1], pads=[0, 0, 0, 0])
    x = b.concat([x, b.conv(x, 4, [1, 1])], 1)                                 # Concat
    g = b.global_pool(x, "avg")                                                 # GlobalAvgpool2D
    m = b.global_pool(x, "max")                                                 # GlobalMaxpool2D
    f = b.gemm(b.flatten(b.add(g, m)), 10)                                      # flatten + FC
    # NHWC reshape (through 3-D: canonicalize makes a 4-D -> [N, features] Reshape a Flatten)
    t = b.reshape(b.reshape(b.transpose(x, [0, 2, 3, 1]), [1, 16, -1]), [1, -1])
    return _finish(b, [f, b.matmul(t, 5), y])


@pytest.fixture(scope="module")
def pair():
    """(nodes_doc, consts_doc, reference outputs, feeds) of a valid pair the converter wrote."""
    gm = _pair_model()
    tmp = Path(tempfile.mkdtemp(prefix="fuzz_pair_"))
    try:
        result = mrvl_convert.convert(gm.model, tmp / "art", policy="multi")
        stages = [s for s in result.manifest["stages"] if s["kind"] == "mrvl"]
        assert len(stages) == 1 and result.summary["cpu_nodes"] == 0, result.summary
        stage = stages[0]
        nodes = json.loads((tmp / "art" / stage["nodes_json"]).read_text())
        consts = json.loads((tmp / "art" / stage["consts_json"]).read_text())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    layers = {_layer_name(n) for n in nodes["nodes"] if n["op"] != "input"}
    assert {"Conv2D", "FC", "Maxpool2D", "Avgpool2D", "GlobalAvgpool2D", "GlobalMaxpool2D",
            "Sum2D", "Concat", "nn.batch_flatten", "reshape", "layout_transform"} <= layers, layers
    feeds = [gm.feeds[n["name"]] for n in nodes["nodes"] if n["op"] == "input"]
    ref = _compile_run(nodes, consts, feeds)
    return Pair((nodes, consts, ref, feeds))


class Pair(tuple):
    """(nodes_doc, consts_doc, reference outputs, feeds); short repr for hypothesis' reports."""

    def __repr__(self) -> str:
        return "<fixture value>"


def _layer_name(node) -> str:
    v = node["attrs"]["layer_name"]
    return v[0] if isinstance(v, list) else v


def _compile_run(nodes_doc, consts_doc, feeds, raw: Tuple[str, str] = None):
    with tempfile.TemporaryDirectory() as tmp:
        npath, cpath = Path(tmp) / "x-nodes.json", Path(tmp) / "x-consts.json"
        if raw is None:
            npath.write_text(json.dumps(nodes_doc))
            cpath.write_text(json.dumps(consts_doc))
        else:
            npath.write_text(raw[0])
            cpath.write_text(raw[1])
        compiled = MrvlSimulator().compile(npath, cpath)
        return [np.array(o) for o in compiled.run(feeds)]


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
            assume(_layer_name(node) in ("Conv2D", "FC", "Sum2D"))
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


@given(data=st.data())
def test_mutated_nodes_consts_are_refused_naming_the_field(pair, data):
    nodes, consts, names, must_raise, what = data.draw(artifact_mutations(pair), label="mutation")
    note(what)
    try:
        out = _compile_run(nodes, consts, pair[3])
    except ArtifactError as exc:
        msg = str(exc)
        note(msg)
        assert any(n in msg for n in names), f"{what}: {msg!r} names none of {names}"
        return
    assert not must_raise, f"{what}: compiled and ran without an error"
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(out, pair[2])), \
        f"{what}: accepted, but the outputs changed"


@given(data=st.data())
def test_corrupted_artifact_bytes_are_refused(pair, data):
    """Truncated / byte-flipped JSON text: an ArtifactError, or (a flip that keeps the file
    valid, e.g. one base64 digit of a weight) a successful run; never another exception."""
    which = data.draw(st.sampled_from(["nodes", "consts"]), label="file")
    texts = [json.dumps(pair[0]), json.dumps(pair[1])]
    k = 0 if which == "nodes" else 1
    text = texts[k]
    how = data.draw(st.sampled_from(["truncate", "flip", "garbage"]), label="how")
    if how == "truncate":
        text = text[:data.draw(st.integers(0, len(text) - 1), label="cut")]
    elif how == "flip":
        pos = data.draw(st.integers(0, len(text) - 1), label="pos")
        text = text[:pos] + data.draw(st.sampled_from(list("{}[],:\"0x \\")), label="ch") + text[pos + 1:]
    else:
        text = data.draw(st.text(max_size=50), label="garbage")
    texts[k] = text
    try:
        out = _compile_run(None, None, pair[3], raw=(texts[0], texts[1]))
    except (ArtifactError, Fp16RangeError):  # a flipped base64 digit can make a weight inf/NaN
        return
    assert [o.shape for o in out] == [r.shape for r in pair[2]]


@pytest.mark.parametrize("value", [
    pytest.param({"x": 1}, id="dict"),
    pytest.param([["Conv2D"]], id="nested-list"),
    pytest.param([{"a": 1}], id="list-of-dict"),
])
# Found by fuzzing (fixed): the simulator looked layer_name up in its kernel table unchecked; an
# unhashable JSON value raised TypeError('unhashable type') instead of an ArtifactError.
def test_layer_name_of_unhashable_json_type_is_refused(pair, value):
    nodes, consts = copy.deepcopy(pair[0]), pair[1]
    layer = next(n for n in nodes["nodes"] if n["op"] != "input")
    layer["attrs"]["layer_name"] = value
    with pytest.raises(ArtifactError, match="layer_name"):
        _compile_run(nodes, consts, pair[3])


# Found by fuzzing (fixed): FORMATS.md lists bias_const_name as a Conv2D/FC attribute (not
# optional) and the emitter always writes it, but the simulator took its absence for 'no bias':
# a Nodes-JSON that lost it ran silently with different numbers.
@pytest.mark.parametrize("layer_name", ["Conv2D", "FC"])
def test_missing_bias_const_name_is_refused(pair, layer_name):
    nodes, consts = copy.deepcopy(pair[0]), pair[1]
    layer = next(n for n in nodes["nodes"] if n["op"] != "input" and _layer_name(n) == layer_name)
    del layer["attrs"]["bias_const_name"]
    with pytest.raises(ArtifactError, match="bias_const_name"):
        _compile_run(nodes, consts, pair[3])


# ============================================================================ manifest.json
@pytest.fixture(scope="module")
def artifact_dir():
    """An artifact directory with Mrvl and CPU stages (Mrvl -> CPU -> Mrvl), kept for the module."""
    b = ModelBuilder(13, 3)
    x = b.input([1, 3, 8, 8])
    x = b.unary(b.conv(x, 4, [3, 3], pads=[1, 1, 1, 1]), "Relu")
    x = b.unary(x, "Sin")   # no layer set maps Sin (the newer one maps Sigmoid)
    x = b.gemm(b.flatten(b.global_pool(b.conv(x, 6, [1, 1]), "avg")), 5)
    gm = _finish(b, [x])
    tmp = Path(tempfile.mkdtemp(prefix="fuzz_manifest_"))
    result = mrvl_convert.convert(gm.model, tmp / "art", policy="multi")
    kinds = [s["kind"] for s in result.manifest["stages"]]
    assert kinds == ["mrvl", "cpu", "mrvl"], kinds
    ref = mrvl_convert.HybridSession(tmp / "art").run(None, gm.feeds)
    yield Pair((tmp / "art", gm.feeds, ref))
    shutil.rmtree(tmp, ignore_errors=True)


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


@given(data=st.data())
def test_mutated_manifest_is_refused(artifact_dir, data):
    """HybridSession on a mutated manifest: MrvlConvertError naming the field (or the tensor /
    stage concerned), never another exception; a model-io shape change shows at the feed."""
    art, feeds, ref = artifact_dir
    manifest = json.loads((art / "manifest.json").read_text())
    m, names, what = data.draw(_manifest_mutations(manifest).map(Mutation), label="mutation")
    note(what)
    with tempfile.TemporaryDirectory() as tmp:
        copy_dir = Path(tmp) / "art"
        shutil.copytree(art, copy_dir)
        (copy_dir / "manifest.json").write_text(json.dumps(m))
        with pytest.raises(MrvlConvertError) as info:
            mrvl_convert.HybridSession(copy_dir).run(None, feeds)
    msg = str(info.value)
    note(msg)
    assert any(str(n) in msg for n in names), f"{what}: {msg!r} names none of {names}"


# Found by fuzzing (fixed): HybridSession checked a CPU stage's boundaries against its ONNX file
# by name only, a Mrvl stage's dtypes not at all and model outputs not at all.
@pytest.mark.parametrize("where", [
    "mrvl stage input shape", "mrvl stage output shape",
    "mrvl stage input dtype", "cpu stage input shape", "cpu stage input dtype",
    "model output shape",
])
def test_manifest_inconsistent_with_stage_files_is_refused(artifact_dir, where):
    """The manifest disagrees with the stage files it names: refuse rather than run."""
    art, feeds, ref = artifact_dir
    m = json.loads((art / "manifest.json").read_text())
    stage = m["stages"][1 if where.startswith("cpu") else 0]
    if where.endswith("input shape"):
        stage["inputs"][0]["shape"] = [d + 1 for d in stage["inputs"][0]["shape"]]
    elif where.endswith("output shape") and where.startswith("mrvl"):
        stage["outputs"][0]["shape"] = [d + 1 for d in stage["outputs"][0]["shape"]]
    elif where.endswith("dtype"):
        stage["inputs"][0]["dtype"] = "int8"             # the stage file says float32
    else:
        m["model"]["outputs"][0]["shape"] = [2, 5]       # the last stage produces [1, 5]
    with tempfile.TemporaryDirectory() as tmp:
        copy_dir = Path(tmp) / "art"
        shutil.copytree(art, copy_dir)
        (copy_dir / "manifest.json").write_text(json.dumps(m))
        with pytest.raises(MrvlConvertError):
            mrvl_convert.HybridSession(copy_dir).run(None, feeds)
