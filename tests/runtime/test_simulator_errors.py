"""Malformed artifacts, fp16 overflow and bad feeds fail loudly and name what is wrong."""
from __future__ import annotations

import copy
import json
import os
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from mrvl_convert.errors import ArtifactError, Fp16RangeError, InputFeedError
from mrvl_convert.runtime import Fp16RangeWarning, MrvlSimulator
from support.jsonbuild import SubgraphBuilder, conv2d, fc, pool, to_nhwc, write_pair


def conv_pair(scale: float = 1.0, sources=("Conv_7", "Relu_7")):
    rng = np.random.default_rng(0)
    b = SubgraphBuilder()
    x = b.input("x", (1, 3, 6, 6))
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * scale
    y = conv2d(b, to_nhwc(b, x), w, np.zeros(4, np.float32), (4, 4), relu=False,
               source_nodes=list(sources))
    return b.docs([y])


def compile_docs(tmp_path, nodes, consts):
    return MrvlSimulator().compile(*write_pair(str(tmp_path), "t", nodes, consts))


def conv_layer(nodes):
    return next(n for n in nodes["nodes"] if n["attrs"].get("layer_name") == ["Conv2D"])


def test_missing_constant_names_field_and_constant(tmp_path):
    nodes, consts = conv_pair()
    name = conv_layer(nodes)["attrs"]["kernel_const_name"][0]
    del consts[name]
    with pytest.raises(ArtifactError, match=rf"kernel_const_name.*{name}"):
        compile_docs(tmp_path, nodes, consts)


def test_bad_base64_names_the_constant(tmp_path):
    nodes, consts = conv_pair()
    name = next(iter(consts))
    consts[name]["data_base64"] = "not*base64!"
    with pytest.raises(ArtifactError, match=rf"{name}.*data_base64.*not valid base64"):
        compile_docs(tmp_path, nodes, consts)


def test_wrong_data_length_names_sizes(tmp_path):
    nodes, consts = conv_pair()
    name = next(iter(consts))
    consts[name]["shape"] = [4, 3, 3, 2]
    with pytest.raises(ArtifactError, match=rf"{name}.*data_base64.*432 bytes.*needs 288"):
        compile_docs(tmp_path, nodes, consts)


def test_unknown_layer_name(tmp_path):
    nodes, consts = conv_pair()
    conv_layer(nodes)["attrs"]["layer_name"] = ["Conv3D"]
    with pytest.raises(ArtifactError, match=r"layer_name.*'Conv3D'"):
        compile_docs(tmp_path, nodes, consts)


@pytest.mark.parametrize("field,value,pattern", [
    ("shape", [[1, 5, 5, 4]], r"field 'shape'.*\[1, 5, 5, 4\].*\[1, 4, 4, 4\]"),
    ("padding", ["0", "zero", "0", "0"], r"field 'attrs.padding'.*expected integers"),
    ("strides", ["1"], r"field 'attrs.strides'.*expected 2 integers"),
    ("groups", ["2"], r"field 'attrs.groups'"),
    ("channels", ["5"], r"field 'attrs.channels'"),
    ("activation_type", ["gelu"], r"only relu, tanh, sigmoid can be fused"),
    ("data_layout_shape", ["1", "6", "6", "4"], r"data_layout_shape"),
])
def test_inconsistent_layer_attributes(tmp_path, field, value, pattern):
    nodes, consts = conv_pair()
    conv_layer(nodes)["attrs"][field] = value
    if field == "shape":  # keep out_layout_shape in step so the shape check itself is reached
        conv_layer(nodes)["attrs"]["out_layout_shape"] = [str(d) for d in value[0]]
    with pytest.raises(ArtifactError, match=pattern) as info:
        compile_docs(tmp_path, nodes, consts)
    assert "t-nodes.json" in str(info.value)  # names the file


def test_pool_size_and_kernel_layout_shape_must_agree(tmp_path):
    """The upstream format states a pool's window twice; two different windows is a broken
    artifact, not a choice for the simulator to make."""
    b = SubgraphBuilder()
    y = pool(b, to_nhwc(b, b.input("x", (1, 2, 6, 6))), "Maxpool2D", (3, 3), (2, 2),
             strides=(2, 2))
    nodes, consts = b.docs([y])
    layer = next(n for n in nodes["nodes"] if n["attrs"].get("layer_name") == ["Maxpool2D"])
    layer["attrs"]["kernel_layout_shape"] = ["3", "3"]
    with pytest.raises(ArtifactError, match=r"kernel_layout_shape'.*\[3, 3\] but pool_size is "
                                            r"\[2, 2\]"):
        compile_docs(tmp_path, nodes, consts)


def test_const_shape_disagreeing_with_input(tmp_path):
    rng = np.random.default_rng(0)
    b = SubgraphBuilder()
    x = b.input("x", (2, 8))
    y = fc(b, x, rng.standard_normal((3, 8)).astype(np.float32), None)
    nodes, consts = b.docs([y])
    nodes["nodes"][y]["attrs"]["shape"] = [[2, 3]]
    nodes["nodes"][0]["attrs"]["shape"] = [[2, 9]]
    nodes["attrs"]["shape"][1][0] = [2, 9]
    nodes["nodes"][y]["attrs"]["data_layout_shape"] = ["2", "9"]
    with pytest.raises(ArtifactError, match=r"kernel_const_name.*\[3, 8\].*\[O, 9\]"):
        compile_docs(tmp_path, nodes, consts)


@pytest.mark.parametrize("mutate,pattern", [
    (lambda n: n.update(arg_nodes=[1]), r"arg_nodes"),
    (lambda n: n.update(heads=[[99, 0, 0]]), r"heads"),
    (lambda n: n["nodes"][1].update(inputs=[[5, 0, 0]]), r"inputs.*bad node reference"),
    (lambda n: n.pop("nodes"), r"field 'nodes' is missing"),
    (lambda n: n["attrs"]["shape"][1].pop(), r"attrs.shape"),
    (lambda n: n.update(num_subgraph_outputs="2"), r"num_subgraph_outputs"),
])
def test_malformed_graph_structure(tmp_path, mutate, pattern):
    nodes, consts = conv_pair()
    mutate(nodes)
    with pytest.raises(ArtifactError, match=pattern):
        compile_docs(tmp_path, nodes, consts)


def test_missing_and_unparsable_files(tmp_path):
    nodes, consts = conv_pair()
    nodes_path, consts_path = write_pair(str(tmp_path), "t", nodes, consts)
    with pytest.raises(ArtifactError, match="nope-consts.json: Constants-JSON not found"):
        MrvlSimulator().compile(nodes_path, os.path.join(tmp_path, "nope-consts.json"))
    with open(nodes_path, "w") as f:
        f.write("{not json")
    with pytest.raises(ArtifactError, match="t-nodes.json: Nodes-JSON is not readable JSON"):
        MrvlSimulator().compile(nodes_path, consts_path)


def test_overflow_raises_with_source_nodes(tmp_path):
    compiled = compile_docs(tmp_path, *conv_pair(scale=3000.0))
    x = np.full((1, 3, 6, 6), 10.0, np.float32)
    with pytest.raises(Fp16RangeError, match=r"Conv_7, Relu_7.*inf") as info:
        compiled.run({"x": x})
    assert info.value.source_nodes == ["Conv_7", "Relu_7"]
    assert info.value.layer == conv_layer(conv_pair()[0])["name"]


def test_overflow_can_warn_and_record_instead(tmp_path):
    compiled = compile_docs(tmp_path, *conv_pair(scale=3000.0))
    x = np.full((1, 3, 6, 6), 10.0, np.float32)
    with pytest.warns(Fp16RangeWarning, match="Conv_7"):
        out = compiled.run({"x": x}, on_range_error="warn")[0]
    assert not np.isfinite(out).all()
    [event] = compiled.last_range_events
    assert event.source_nodes == ("Conv_7", "Relu_7") and event.n_inf > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled.run({"x": np.zeros_like(x)}, on_range_error="warn")
    assert compiled.last_range_events == []


@pytest.mark.filterwarnings("ignore::mrvl_convert.runtime.Fp16RangeWarning")
def test_range_events_belong_to_their_own_call_when_calls_overlap(tmp_path):
    compiled = compile_docs(tmp_path, *conv_pair(scale=3000.0))
    hot = np.full((1, 3, 6, 6), 10.0, np.float32)   # overflows float16 in the conv
    feeds = [hot if k % 2 else np.zeros_like(hot) for k in range(40)]

    def events_of(x):
        events = []
        compiled.execute({"x": x}, events, on_range_error="warn")
        return [e.source_nodes for e in events]

    with ThreadPoolExecutor(4) as pool:
        seen = list(pool.map(events_of, feeds))
    assert seen == [[("Conv_7", "Relu_7")] if k % 2 else [] for k in range(40)]


def test_weights_beyond_fp16_range_are_an_fp16_error(tmp_path):
    with pytest.raises(Fp16RangeError, match="kernel_const_name.*float16 range"):
        compile_docs(tmp_path, *conv_pair(scale=1e6))


def test_input_overflowing_fp16_is_reported(tmp_path):
    compiled = compile_docs(tmp_path, *conv_pair())
    with pytest.raises(Fp16RangeError, match="x"):
        compiled.run({"x": np.full((1, 3, 6, 6), 1e5, np.float32)})


@pytest.mark.parametrize("feed,pattern", [
    ({"y": np.zeros((1, 3, 6, 6), np.float32)}, r"tensor 'y'.*unknown input"),
    ({}, r"tensor 'x'.*missing.*\[1, 3, 6, 6\]"),
    ({"x": np.zeros((1, 6, 6, 3), np.float32)}, r"tensor 'x'.*shape \[1, 6, 6, 3\], expected "
                                                r"\[1, 3, 6, 6\]"),
    ({"x": np.array([["a"]])}, r"tensor 'x'.*not numeric"),
])
def test_simulator_input_feed_errors_name_the_input(tmp_path, feed, pattern):
    compiled = compile_docs(tmp_path, *conv_pair())
    with pytest.raises(InputFeedError, match=pattern):
        compiled.run(feed)


def test_get_capability_reports_each_layer():
    nodes, _ = conv_pair()
    bad = copy.deepcopy(nodes)
    conv_layer(bad)["attrs"]["layer_name"] = ["Gelu"]
    bad["nodes"][1]["attrs"]["dst_layout"] = ["NHW"]
    rows = MrvlSimulator().get_capability(bad)
    assert [r["index"] for r in rows] == [1, 2]
    assert not rows[0]["supported"] and "permutations" in rows[0]["reason"]
    assert not rows[1]["supported"] and "Gelu" in rows[1]["reason"]
    assert all(r["supported"] for r in MrvlSimulator().get_capability(nodes))
    json.dumps(rows)  # plain data


def _fc_then_layer_norm():
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.eye(8, dtype=np.float32), "w"),
             numpy_helper.from_array(rng.random(8).astype(np.float32) + 0.5, "gamma"),
             numpy_helper.from_array(rng.random(8).astype(np.float32), "beta")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
             helper.make_node("LayerNormalization", ["h", "gamma", "beta"], ["y"], name="ln",
                              axis=-1, epsilon=1e-5)]
    graph = helper.make_graph(nodes, "fc_ln",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])],
                              inits)
    return onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("engine", ["graph", "layers"])
def test_an_overflow_inside_a_decomposition_names_its_onnx_nodes(tmp_path, engine):
    """A LayerNorm is nine layers and only the last names the ONNX node: an overflow in the
    square of x - mean (|x - mean| > 255) names the LayerNormalization as the layers' source."""
    from mrvl_convert import convert
    from mrvl_convert.errors import Fp16RangeError
    from mrvl_convert.runtime import HybridSession

    result = convert(_fc_then_layer_norm(), str(tmp_path / "o"))
    session = HybridSession(result.out_dir, engine=engine)
    x = np.zeros((1, 4, 8), np.float32)
    x[0, 0, 0] = 1000.0
    with pytest.raises(Fp16RangeError) as info:
        session.run(None, {"x": x})
    assert "a partial result of the layers for ONNX nodes ln" in str(info.value)
    assert list(info.value.source_nodes) == ["ln"]
