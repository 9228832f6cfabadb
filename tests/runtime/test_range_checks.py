"""The graph engine's range checks: which rounded values it sums, and that leaving one out never
hides an overflow the per-layer path reports (runtime/range_checks.py).

A value's own check may be left out only when every layer reading it passes inf and NaN on
(``Kernel.passes_nonfinite``); these tests overflow such a layer and expect the same error, naming
the same layer, from both engines.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import mrvl_convert
from mrvl_convert.errors import Fp16RangeError
from mrvl_convert.runtime import HybridSession, MrvlSimulator
from mrvl_convert.runtime import graph_engine
from mrvl_convert.kernels.windows import reads_every_position
from support import corpus
from support.jsonbuild import SubgraphBuilder, conv2d, pool, to_nhwc, write_pair
from support.strategies.cnn import cnn_models


def _chain(second: str, scale: float = 3000.0):
    """x -> Conv2D "Conv_7" (3x3, no activation, weights times ``scale``) -> ``second`` ->
    Clip(0, 6). ``second``: "conv" (1x1, no activation), "strided" (1x1, stride 2: it skips
    positions), "relu" (1x1 with a fused Relu) or "maxpool" (2x2, stride 2)."""
    rng = np.random.default_rng(0)
    b = SubgraphBuilder()
    x = to_nhwc(b, b.input("x", (1, 3, 6, 6)))
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * scale
    y = conv2d(b, x, w, None, (4, 4), source_nodes=["Conv_7"])
    w1 = rng.standard_normal((4, 4, 1, 1)).astype(np.float32)
    if second == "maxpool":
        z = pool(b, y, "Maxpool2D", (2, 2), (2, 2), strides=(2, 2))
    elif second == "strided":
        z = conv2d(b, y, w1, None, (2, 2), strides=(2, 2), source_nodes=["Conv_8"])
    else:
        z = conv2d(b, y, w1, None, (4, 4), relu=second == "relu", source_nodes=["Conv_8"])
    clip = b.layer("Clip", [z], b.shapes[z], {"a_min": ["0.000000"], "a_max": ["6.000000"]},
                   source_nodes=["Clip_9"])
    return b.docs([clip]), y


def _checked_nodes(compiled) -> set:
    [segment] = [p for p in compiled.graph.parts if isinstance(p, graph_engine.Segment)]
    return {key[0] for key in segment.checks}


@pytest.mark.parametrize("second,checked_here", [("conv", False), ("strided", True),
                                                  ("relu", True), ("maxpool", True)])
def test_overflow_is_reported_where_the_per_layer_path_reports_it(tmp_path, second,
                                                                  checked_here):
    docs, first = _chain(second)
    paths = write_pair(str(tmp_path), "t", *docs)
    compiled = MrvlSimulator().compile(*paths)
    assert [type(p).__name__ for p in compiled.graph.parts] == ["Segment"]
    # A 1x1 conv reading every position passes an inf on; a stride that skips positions, a
    # fused Relu (-inf -> 0) or a max pool (-inf loses) does not, so Conv_7 keeps its check.
    assert (first in _checked_nodes(compiled)) is checked_here
    hot = np.full((1, 3, 6, 6), 10.0, np.float32)
    layers = MrvlSimulator(engine="layers").compile(*paths)
    with pytest.raises(Fp16RangeError) as want:
        layers.run({"x": hot})
    with pytest.raises(Fp16RangeError) as got:
        compiled.run({"x": hot})
    assert got.value.source_nodes == want.value.source_nodes == ["Conv_7"]
    compiled.run({"x": np.ones_like(hot)})  # in range: no error
    assert compiled.last_range_events == []


def test_windows_that_skip_positions_are_seen():
    assert reads_every_position(6, 0, 3, 1, 1, 4)
    assert reads_every_position(7, 1, 3, 2, 1, 4)
    assert not reads_every_position(6, 0, 1, 2, 1, 3)      # 1x1, stride 2
    assert reads_every_position(6, 0, 2, 1, 3, 3)          # dilation 3, taps interleave
    assert not reads_every_position(6, 0, 2, 2, 2, 2)      # dilation 2 and stride 2
    assert not reads_every_position(7, 0, 3, 2, 1, 2)      # floor mode drops the last column


@pytest.mark.parametrize("name", ["mobilenet_v3_small", "mobilenet_v2"])
def test_every_overflowing_layer_of_a_corpus_model_is_found(tmp_path, name):
    """Each Conv2D in turn made to overflow (its weights scaled up in the simulator's constants):
    the graph engine raises exactly when the per-layer path does, naming the same nodes."""
    model = corpus.built(name)
    shapes = corpus.shapes_for(name)
    feed = corpus.feeds(model, shapes)
    result = mrvl_convert.convert(model, str(tmp_path / "art"), shapes=shapes)
    session = HybridSession(result.out_dir, threads=1)
    [stage] = [s for s in session.stages if s.kind == "mrvl"]
    compiled = stage.runner
    convs = [s for s in compiled.steps if s.spec.layer_name == "Conv2D"]
    assert len(convs) > 10
    checked = {key[0] for p in compiled.graph.parts if isinstance(p, graph_engine.Segment)
               for key in p.checks}
    reported = unchecked = 0
    paths = _stage_files(session, stage.name)
    inputs = [feed[n] for n in compiled.input_names]
    for step in convs:
        trial = _with_scaled_weights(*paths, step.spec.name, tmp_path / step.spec.name)
        outcomes = [_outcome(trial, engine, inputs) for engine in ("layers", "graph")]
        assert outcomes[0] == outcomes[1], step.spec.name
        reported += outcomes[0] is not None
        unchecked += outcomes[0] is not None and step.node not in checked
    # Most overflow and are reported; some of those were found through the layers reading them.
    assert reported > 10 and unchecked > 2


@pytest.mark.parametrize("name", ["vit_tiny", "bert_tiny"])
def test_every_overflowing_fc_of_a_transformer_is_found(tmp_path, name):
    """Each FC of a transformer in turn made to overflow: the graph engine raises exactly when
    the per-layer path does, naming the same nodes, with the LayerNorm pieces and attention
    products leaving their inputs' checks to their own (their kernels' ``passes_nonfinite``)."""
    model = corpus.built(name)
    shapes = corpus.shapes_for(name)
    feed = corpus.feeds(model, shapes)
    result = mrvl_convert.convert(model, str(tmp_path / "art"), shapes=shapes)
    session = HybridSession(result.out_dir, threads=1)
    [stage] = [s for s in session.stages if s.kind == "mrvl"]
    compiled = stage.runner
    checked = {key[0] for p in compiled.graph.parts for key in p.checks}
    fcs = [s for s in compiled.steps if s.spec.layer_name == "FC"]
    paths = _stage_files(session, stage.name)
    _, env = session.run(None, feed, capture=True)  # bert_tiny's embedding is a CPU stage
    inputs = [env[n] for n in compiled.input_names]
    reported, unchecked = [], 0
    for step in fcs:
        trial = _with_scaled_weights(*paths, step.spec.name, tmp_path / step.spec.name)
        outcomes = [_outcome(trial, engine, inputs) for engine in ("layers", "graph")]
        assert outcomes[0] == outcomes[1], step.spec.name
        reported.append(outcomes[0] is not None)
        unchecked += outcomes[0] is not None and step.node not in checked
    assert sum(reported) > len(fcs) // 2 and unchecked > 2
    # At most one check per layer that can swallow an inf (a LayerNorm's Rsqrt, a Softmax, a
    # fused tanh) and per output: LayerNorm means, attention products and squares pass it on.
    swallowing = [s for s in compiled.steps
                  if not all(s.kernel.passes_nonfinite(i) for i in range(len(s.inputs)))
                  and s.spec.layer_name not in ("ReduceMean", "BatchMatmul", "Power")]
    assert len(checked) <= len(swallowing) + len(compiled.heads)


def _with_scaled_weights(nodes_path, consts_path, layer: str, directory) -> "tuple[str, str]":
    """A copy of a Nodes-JSON / Constants-JSON pair, in ``directory``, with ``layer``'s kernel
    scaled up to just inside float16's range (the weights load, the products overflow)."""
    import base64
    import json

    with open(nodes_path) as f:
        nodes = json.load(f)
    with open(consts_path) as f:
        consts = json.load(f)
    [node] = [n for n in nodes["nodes"] if n.get("name") == layer]
    entry = consts[node["attrs"]["kernel_const_name"][0]]
    values = np.frombuffer(base64.b64decode(entry["data_base64"]), np.float32)
    values = values * np.float32(60000.0 / float(np.abs(values).max()))
    entry.update(data_base64=base64.b64encode(values.tobytes()).decode(),
                 min=str(float(values.min())), max=str(float(values.max())))
    return write_pair(str(directory), os.path.basename(nodes_path)[:-len("-nodes.json")],
                      nodes, consts)


def _outcome(paths, engine: str, inputs) -> object:
    """The source nodes the simulator's range error names, or None when the run is in range."""
    try:
        MrvlSimulator(engine=engine).compile(*paths).run(inputs)
    except Fp16RangeError as exc:
        return exc.source_nodes
    return None


def _stage_files(session: HybridSession, stage: str) -> "tuple[str, str]":
    [doc] = [d for d in session.manifest["stages"] if d.get("name") == stage]
    return tuple(os.path.join(session.artifact_dir, doc[key])
                 for key in ("nodes_json", "consts_json"))


@settings(max_examples=max(5, settings.default.max_examples // 3))
@given(gm=cnn_models(max_blocks=4), data=st.data())
def test_generated_models_report_an_overflow_alike_in_both_engines(gm, data):
    """Random CNNs (tests/support/strategies/cnn.py): one Conv2D or FC, drawn, made to overflow;
    both engines raise, naming the same nodes, or neither does."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            result = mrvl_convert.convert(gm.model, os.path.join(tmp, "art"))
            session = HybridSession(result.out_dir, threads=1)
            _, env = session.run(None, gm.feeds, capture=True)
        except mrvl_convert.MrvlConvertError:
            return
        layers = [(stage, step) for stage in session.stages if stage.kind == "mrvl"
                  for step in stage.runner.steps if "kernel_const_name" in step.spec.attrs]
        if not layers:
            return
        stage, step = data.draw(st.sampled_from(layers), label="layer")
        event(step.spec.layer_name)
        trial = _with_scaled_weights(*_stage_files(session, stage.name), step.spec.name,
                                     os.path.join(tmp, "trial"))
        runs = getattr(stage.runner, "runs", 1)  # a batch run in chunks: the first chunk
        inputs = [env[t.name][:len(env[t.name]) // runs] for t in stage.inputs]
        want, got = (_outcome(trial, engine, inputs) for engine in ("layers", "graph"))
        event("overflow" if want is not None else "in range")
        assert got == want


def test_constant_bounds_keep_the_largest_float16_value_finite():
    """The bounds of Sum2D's and Mul2D's ``finite_on_finite``: the largest float16 value plus
    or times the largest constant allowed still rounds to a finite float16, in float32 as the
    kernels compute."""
    from mrvl_convert.kernels.fp16 import round_to_fp16
    from mrvl_convert.layers.mul2d import MUL_BOUND
    from mrvl_convert.layers.sum2d import ADD_BOUND

    top = np.float32(65504.0)
    for value in (top + np.float32(ADD_BOUND), -top - np.float32(ADD_BOUND),
                  top * np.float32(MUL_BOUND)):
        assert round_to_fp16(np.array([value], np.float32))[1]
    assert not round_to_fp16(np.array([top + np.float32(16.0)], np.float32))[1]


def test_hard_swish_adds_leave_their_check_to_the_input(tmp_path):
    """In MobileNetV3's hard-swish (x + 3, clipped, times x) the add cannot overflow on a finite
    x, and x reaches a check through the product: the add needs no check of its own. The
    corpus test above overflows every Conv2D and finds each alike in both engines."""
    model = corpus.built("mobilenet_v3_small")
    result = mrvl_convert.convert(model, str(tmp_path / "art"),
                                  shapes=corpus.shapes_for("mobilenet_v3_small"))
    [stage] = [s for s in HybridSession(result.out_dir, threads=1).stages if s.kind == "mrvl"]
    [segment] = stage.runner.graph.parts
    bounded = {s.node for s in segment.steps if s.kernel.finite_on_finite()}
    assert len(bounded) > 10
    assert not bounded & {node for node, _ in segment.checks}
