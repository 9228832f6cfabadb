"""Readers refuse mutated files with the library's error, and the error names the field.

- rule files (YAML, schemas/rules.schema.json) -> ``RuleFileError`` (schema and semantic checks)
- Nodes-JSON / Constants-JSON pairs read by the simulator -> ``ArtifactError``
- manifest.json read by HybridSession -> ``MrvlConvertError``
"""
from __future__ import annotations

import copy
import json
import shutil
import tempfile
from pathlib import Path
from typing import Tuple

import numpy as np
import pytest
import yaml
from hypothesis import event, example, given, note
from hypothesis import strategies as st

import mrvl_convert
from mrvl_convert.errors import ArtifactError, Fp16RangeError, MrvlConvertError, RuleFileError
from mrvl_convert.rules.loader import builtin_path, load_rule_file
from mrvl_convert.runtime.simulator import MrvlSimulator
from support.strategies.artifacts import artifact_mutations, layer_name_of, manifest_mutations
from support.strategies.generated import _finish
from support.strategies.model_builder import ModelBuilder
from support.strategies.mutation import Mutation
from support.strategies.rule_files import rule_mutations, rule_semantic_mutations

pytestmark = pytest.mark.system

# ============================================================================ rule files


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
    layers = {layer_name_of(n) for n in nodes["nodes"] if n["op"] != "input"}
    assert {"Conv2D", "FC", "Maxpool2D", "Avgpool2D", "GlobalAvgpool2D", "GlobalMaxpool2D",
            "Sum2D", "Concat", "nn.batch_flatten", "reshape", "layout_transform"} <= layers, layers
    feeds = [gm.feeds[n["name"]] for n in nodes["nodes"] if n["op"] == "input"]
    ref = _compile_run(nodes, consts, feeds)
    return Pair((nodes, consts, ref, feeds))


class Pair(tuple):
    """(nodes_doc, consts_doc, reference outputs, feeds); short repr for hypothesis' reports."""

    def __repr__(self) -> str:
        return "<fixture value>"


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


def _same_outputs(got, want) -> bool:
    return len(got) == len(want) and all(np.array_equal(a, b, equal_nan=True)
                                         for a, b in zip(got, want))


def _json_or_none(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None


@given(data=st.data())
def test_corrupted_artifact_bytes_are_refused(pair, data):
    """Truncated JSON text, garbage, or a flipped byte that breaks the JSON: an ArtifactError.
    A flip that leaves the same document runs to the same outputs. One that keeps the file
    valid JSON but changes it is an ArtifactError, an Fp16RangeError (a weight became
    inf/NaN), or a run of the same output shapes: it may be another valid artifact (one base64
    digit of a weight; an optional attribute's key misspelt, e.g. ``{ctivation_type``, which
    the format leaves out for no activation); never another exception."""
    which = data.draw(st.sampled_from(["nodes", "consts"]), label="file")
    texts = [json.dumps(pair[0]), json.dumps(pair[1])]
    k = 0 if which == "nodes" else 1
    text = texts[k]
    how = data.draw(st.sampled_from(["truncate", "flip", "garbage"]), label="how")
    if how == "truncate":
        text = text[:data.draw(st.integers(0, len(text) - 1), label="cut")]
    elif how == "flip":
        pos = data.draw(st.integers(0, len(text) - 1), label="pos")
        chars = list("{}[],:\"0x \\") + [text[pos]]  # the last: the same document again
        text = text[:pos] + data.draw(st.sampled_from(chars), label="ch") + text[pos + 1:]
    else:
        text = data.draw(st.text(max_size=50), label="garbage")
    texts[k] = text
    document = _json_or_none(text)
    same = document == pair[k]
    event(f"{how}: {'not JSON' if document is None else 'same document' if same else 'JSON'}")
    if how != "flip" or document is None:
        with pytest.raises(ArtifactError):
            _compile_run(None, None, pair[3], raw=(texts[0], texts[1]))
        return
    if same:
        out = _compile_run(None, None, pair[3], raw=(texts[0], texts[1]))
        assert _same_outputs(out, pair[2])
        return
    try:
        out = _compile_run(None, None, pair[3], raw=(texts[0], texts[1]))
    except (ArtifactError, Fp16RangeError):
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
    layer = next(n for n in nodes["nodes"] if n["op"] != "input" and layer_name_of(n) == layer_name)
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


@given(data=st.data())
def test_mutated_manifest_is_refused(artifact_dir, data):
    """HybridSession on a mutated manifest: MrvlConvertError naming the field (or the tensor /
    stage concerned), never another exception; a model-io shape change shows at the feed."""
    art, feeds, ref = artifact_dir
    manifest = json.loads((art / "manifest.json").read_text())
    m, names, what = data.draw(manifest_mutations(manifest), label="mutation")
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
