"""The graph engine (runtime/graph_engine.py) against the per-layer numpy path, its specification.

Per layer, on the same inputs: layers that are one float32 operation per element (or a copy)
give identical float16 values; layers that sum (Conv2D, FC, average pools, softmax) or use
onnxruntime's own exp/tanh give the same value or its float16 neighbour, since onnxruntime adds
in another order and the two float32 results round to float16 on either side of a tie point at
most; except where a sum cancels to a value far below the layer's largest, where float32's own
rounding error (a few 2^-24 of the terms) can be several float16 steps of that small value:
there the bound is float32's, CANCELLATION times the layer's largest value. Across a whole network such one-ulp differences propagate, so end to end the engines are
compared with the fp16 tolerance the rest of the suite uses.
"""
from __future__ import annotations

import glob
import os
import warnings
from typing import Dict, List

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.errors import Fp16RangeError
from mrvl_convert.layers import Activation
from mrvl_convert.layers.qnn.sums import Conv2DInt8Kernel, GlobalAvgpool2DInt8Kernel
from mrvl_convert.layers.conv2d import Conv2DKernel
from mrvl_convert.runtime import Fp16RangeWarning, HybridSession, MrvlSimulator
from mrvl_convert.runtime import graph_engine
from mrvl_convert.core.artifact import decode_consts, read_json
from mrvl_convert.kernels.fp16 import is_fp16_valued, round_to_fp16
from mrvl_convert.verify.tolerances import DEFAULT_TOLERANCE
from support import corpus
from support.jsonbuild import SubgraphBuilder, conv2d, to_nhwc, write_pair

# Kinds whose ONNX form is the numpy kernel's float32 operation itself: identical results.
ELEMENTWISE = {"Relu", "Clip", "LeakyRelu", "Sum2D", "Mul2D", "Maxpool2D", "GlobalMaxpool2D",
               "Concat", "reshape", "nn.batch_flatten", "squeeze", "expand_dims",
               "layout_transform", "transpose", "Split", "Resize2D", "Rsqrt", "StridedSlice"}
# float32 accumulation slack relative to a layer's largest output (2^-24 per term, with margin).
CANCELLATION = 2.0 ** -18
TRANSFORMERS = ("vit_tiny", "bert_tiny", "svtr_mix", "c2psa")
SMALL_MODELS = ("mobilenet_v2", "densenet_block", "shufflenet_unit", "paddle_cnn", "yolo_detect",
                "mobilenet_v3_small")


def _converted(name: str, tmp_path) -> "tuple[str, Dict[str, np.ndarray]]":
    model = corpus.model(name)
    shapes = corpus.shapes_for(name)
    result = mrvl_convert.convert(model, tmp_path / "art", shapes=shapes)
    return result.out_dir, corpus.feeds(model, shapes)


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| in float16 steps at the larger magnitude (a and b are float16 values)."""
    big = np.maximum(np.abs(a), np.abs(b)).astype(np.float16)
    return np.abs(a.astype(np.float64) - b) / np.spacing(big).astype(np.float64)


def _one_layer(step, consts, values) -> np.ndarray:
    """``step`` alone as a graph-engine segment, run on the per-layer path's inputs."""
    emitter = graph_engine._Emitter(consts, set())
    assert emitter.add(step), step.spec.layer_name
    segment = graph_engine._finish(emitter, [emitter], [step.node], 1, "test")
    assert graph_engine.run_segment(segment, values, lambda v, s: v[s] if isinstance(v, tuple)
                                    else v)
    out = values[step.node]
    return out[0] if isinstance(out, tuple) else out


def _stage_pairs(out_dir: str) -> List["tuple[str, str]"]:
    nodes = sorted(glob.glob(os.path.join(out_dir, "*-nodes.json")))
    return [(n, n[:-len("-nodes.json")] + "-consts.json") for n in nodes]


def _one_float32_operation(spec) -> bool:
    """Whether the layer is one float32 operation per element (or a copy) in both engines."""
    act = spec.value("activation_type") if "activation_type" in spec.attrs else None
    return spec.layer_name in ELEMENTWISE and act in (None, Activation.RELU)


@pytest.mark.parametrize("name", SMALL_MODELS)
def test_every_layer_within_one_fp16_ulp_of_the_per_layer_path(name, tmp_path):
    assert "Conv2D" in _every_layer_checked(name, tmp_path)


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_runtime_forms_within_one_fp16_ulp_of_the_per_layer_path(name, tmp_path):
    """The ONNX forms of a LayerNorm's pieces and attention's products (ReduceMean, Power,
    Rsqrt, BatchMatmul ``to_onnx``) hold the
    same per-layer contract, and they are what makes a transformer block one segment."""
    checked = _every_layer_checked(name, tmp_path)
    assert "BatchMatmul" in checked
    if name != "c2psa":  # the others normalise with LayerNorms, decomposed
        assert {"ReduceMean", "Rsqrt"} <= checked
    if name == "vit_tiny":  # the head reads the class token: a 3-D StridedSlice
        assert "StridedSlice" in checked
    session = HybridSession(tmp_path / "art", threads=1)
    for stage in session.stages:
        if stage.kind == "mrvl":
            plan = stage.runner.graph
            assert [type(p) for p in plan.parts] == [graph_engine.Segment]
            # What the segment makes stays in onnxruntime: only its inputs are released.
            assert set(plan.release[0]) <= {node for node, _ in plan.parts[0].inputs}


def _every_layer_checked(name: str, tmp_path) -> set:
    """Every layer with an ONNX form, alone as a segment, against the per-layer path on the
    same inputs; the kinds checked."""
    out_dir, feed = _converted(name, tmp_path)
    _, env = HybridSession(out_dir, engine="layers").run(None, feed, capture=True)
    checked = set()
    for nodes_path, consts_path in _stage_pairs(out_dir):
        compiled = MrvlSimulator(engine="layers").compile(nodes_path, consts_path)
        consts = decode_consts(consts_path, read_json(consts_path, "c", max_bytes=None))
        trace: list = []
        compiled.execute([env[n] for n in compiled.input_names], [], trace=trace)
        values = {node.index: round_to_fp16(np.asarray(env[node.name], np.float32))[0]
                  for node in compiled.inputs}
        values.update({spec.index: out for spec, out in trace})
        for step in compiled.steps:
            if graph_engine.onnx_form(step.kernel) is None or any(step.slots):
                continue
            got = _one_layer(step, consts, {i: values[i] for i in step.inputs})
            want = values[step.node]
            where = f"{step.spec.layer_name} {step.spec.name}"
            assert is_fp16_valued(got), where   # the Cast pair survived onnxruntime's rewrites
            if _one_float32_operation(step.spec):
                np.testing.assert_array_equal(got, want, err_msg=where)
            else:
                # Where a sum cancels to far below the layer's scale, float32's own error (a few
                # 2^-24 of the terms) can span several fp16 steps of the small result.
                slack = np.abs(got - want) <= CANCELLATION * float(np.abs(want).max())
                assert bool(((_ulps(got, want) <= 1.0) | slack).all()), where
            checked.add(step.spec.layer_name)
    return checked


@pytest.mark.parametrize("name", SMALL_MODELS + TRANSFORMERS)
def test_default_engine_matches_the_per_layer_path_end_to_end(name, tmp_path):
    out_dir, feed = _converted(name, tmp_path)
    session = HybridSession(out_dir, threads=1)
    assert session.simulator.engine == "graph"
    assert all(stage.runner.graph is not None for stage in session.stages if stage.kind == "mrvl")
    [graph], env = session.run(None, feed, capture=True)
    for stage in session.stages:
        if stage.kind == "mrvl":
            assert all(is_fp16_valued(env[t.name]) for t in stage.outputs)
    [layers] = HybridSession(out_dir, threads=1, engine="layers").run(None, feed)
    scale = float(np.abs(layers).max())
    assert float(np.abs(graph - layers).max()) <= DEFAULT_TOLERANCE.max_rel * scale


def _conv_then_clip(scale: float, a_max: str = "6.000000"):
    """Conv2D (source nodes Conv_7) then Clip(0, a_max): the clip hides an overflow to inf."""
    rng = np.random.default_rng(0)
    b = SubgraphBuilder()
    x = b.input("x", (1, 3, 6, 6))
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * scale
    y = conv2d(b, to_nhwc(b, x), w, np.zeros(4, np.float32), (4, 4), relu=False,
               source_nodes=["Conv_7"])
    z = b.layer("Clip", [y], b.shapes[y], {"a_min": ["0.000000"], "a_max": [a_max]},
                source_nodes=["Clip_8"])
    return b.docs([z])


@pytest.mark.filterwarnings("ignore::mrvl_convert.runtime.Fp16RangeWarning")
def test_range_error_inside_a_segment_names_the_layer(tmp_path):
    paths = write_pair(str(tmp_path), "t", *_conv_then_clip(3000.0))
    compiled = MrvlSimulator().compile(*paths)
    assert [type(p).__name__ for p in compiled.graph.parts] == ["Segment"]
    hot = np.full((1, 3, 6, 6), 10.0, np.float32)
    with pytest.raises(Fp16RangeError, match=r"Conv_7.*inf") as info:
        compiled.run({"x": hot})
    assert info.value.source_nodes == ["Conv_7"]
    with pytest.warns(Fp16RangeWarning, match="Conv_7"):
        [out] = compiled.run({"x": hot}, on_range_error="warn")
    assert np.isfinite(out).all()   # the clip hid it: only the per-layer check can see it
    [event] = compiled.last_range_events
    assert event.source_nodes == ("Conv_7",) and event.n_inf > 0
    [want] = MrvlSimulator(on_range_error="warn", engine="layers").compile(*paths).run(
        {"x": hot})
    np.testing.assert_array_equal(out, want)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled.run({"x": np.ones_like(hot)})
    assert compiled.last_range_events == []


def test_input_beyond_fp16_is_reported_by_the_graph_engine(tmp_path):
    compiled = MrvlSimulator().compile(*write_pair(str(tmp_path), "t", *_conv_then_clip(1.0)))
    with pytest.raises(Fp16RangeError, match="x"):
        compiled.run({"x": np.full((1, 3, 6, 6), 1e5, np.float32)})


def test_trace_runs_layer_by_layer_and_equals_the_layers_engine(tmp_path):
    out_dir, feed = _converted("shufflenet_unit", tmp_path)
    _, graph_trace = HybridSession(out_dir).run_layers(feed)
    _, layer_trace = HybridSession(out_dir, engine="layers").run_layers(feed)
    assert len(graph_trace) == len(layer_trace) > 10
    for a, b in zip(graph_trace, layer_trace):
        assert a.spec.name == b.spec.name
        np.testing.assert_array_equal(a.value, b.value)


# bert_tiny: its token lookup a CPU stage before the Mrvl one (yolo_detect was one Mrvl and one
# CPU stage until frontend/concat_views.py put its head's 3-D Concats on the accelerator)
@pytest.mark.parametrize("name,stages,spin", [("paddle_cnn", 1, "1"), ("bert_tiny", 2, "0")])
def test_segments_take_the_thread_budget_and_spin_only_when_alone(tmp_path, name, stages, spin):
    """A model that is one segment is one onnxruntime session, whose idle workers may spin as
    onnxruntime's own do; with other stages between calls, they must sleep."""
    out_dir, _ = _converted(name, tmp_path)
    session = HybridSession(out_dir, threads=2)
    assert len(session.stages) == stages
    segments = [p for stage in session.stages if stage.kind == "mrvl"
                for p in stage.runner.graph.parts if isinstance(p, graph_engine.Segment)]
    assert segments
    for segment in segments:
        options = segment.session.get_session_options()
        assert options.intra_op_num_threads == 2
        assert options.inter_op_num_threads == 1
        assert options.get_session_config_entry("session.intra_op.allow_spinning") == spin


def test_int8_kernels_do_not_inherit_a_float_onnx_form():
    assert graph_engine.has_onnx_form(Conv2DKernel)
    assert not graph_engine.has_onnx_form(Conv2DInt8Kernel)
    assert not graph_engine.has_onnx_form(GlobalAvgpool2DInt8Kernel)


def test_unknown_engine_is_refused(tmp_path):
    with pytest.raises(ValueError, match="engine must be one of"):
        MrvlSimulator(engine="fast")


@pytest.mark.parametrize("a_max,exact", [("6.000000", True), ("0.100000", False)])
def test_clip_with_bounds_on_the_fp16_grid_needs_no_rounding(tmp_path, a_max, exact):
    """Its output is then an input value or a bound, already on the grid (as for Relu)."""
    compiled = MrvlSimulator(engine="layers").compile(
        *write_pair(str(tmp_path), "t", *_conv_then_clip(1.0, a_max)))
    assert compiled.steps[-1].kernel.exact is exact
