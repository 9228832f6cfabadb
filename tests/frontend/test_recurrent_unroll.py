"""``frontend/recurrent_unroll.py``: LSTM, GRU and RNN over a static sequence unrolled into one
input-projection MatMul and per-step FC + gates. Each form (cell x direction x initial states x
outputs used, GRU's ``linear_before_reset``, batch 1 and 2) runs before and after on
onnxruntime; the outputs agree within the module's bound (the sums' order only). Layout 1,
which onnxruntime does not run, is checked against the layout-0 cell on the transposed input.
Every form it does not take stays, with its reason in ``kept``."""
from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest

from mrvl_convert.core.macs import node_macs
from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.recurrent_unroll import MAX_STEPS, unroll_recurrent
from support.recurrent import bound, cell_model, feeds_for, run, unrolled

def assert_agrees(model: onnx.ModelProto, seed: int = 1) -> None:
    feeds = feeds_for(model, seed)
    want = run(model, feeds)
    got = run(unrolled(model)[0], feeds)
    assert set(got) == set(want)
    limit = bound(model, feeds)
    for name, value in want.items():
        assert got[name].shape == value.shape, name
        assert np.max(np.abs(got[name] - value)) <= limit, (name, limit)


FORMS = [(op, direction, states, lbr, batch)
         for op, direction, states, batch in itertools.product(
             ("LSTM", "GRU", "RNN"), ("forward", "reverse", "bidirectional"),
             ("none", "inputs", "constants"), (1, 2))
         for lbr in ((0, 1) if op == "GRU" else (0,))]


@pytest.mark.parametrize("op,direction,states,lbr,batch", FORMS)
def test_every_form_computes_what_the_cell_does(op, direction, states, lbr, batch):
    assert_agrees(cell_model(op, direction, states=states, lbr=lbr, batch=batch))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("used", [(True, False, False), (False, True, False),
                                  (False, False, True), (True, True, True)])
def test_any_of_the_outputs_may_be_used(op, used):
    if op != "LSTM" and used[2]:
        used = used[:2]
    if not any(used):
        pytest.skip("a cell with no output")
    assert_agrees(cell_model(op, "bidirectional", states="inputs", outputs=used))


def test_without_a_bias_and_with_default_activations_spelled_out():
    assert_agrees(cell_model("LSTM", "bidirectional", bias=False,
                             activations=["Sigmoid", "Tanh", "Tanh"] * 2))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_layout_1_is_the_layout_0_cell_on_the_transposed_sequence(op):
    flat = cell_model(op, "bidirectional", states="inputs", batch=2)
    batchwise = cell_model(op, "bidirectional", states="inputs", batch=2, layout=1)
    feeds = feeds_for(flat)
    want = run(flat, feeds)
    turned = {"x": feeds["x"].transpose(1, 0, 2).copy()}
    turned.update({k: v.transpose(1, 0, 2).copy() for k, v in feeds.items() if k != "x"})
    got = run(unrolled(batchwise)[0], turned)
    limit = bound(flat, feeds)
    assert np.max(np.abs(got["Y"] - want["Y"].transpose(2, 0, 1, 3))) <= limit
    for name in set(want) - {"Y"}:
        assert np.max(np.abs(got[name] - want[name].transpose(1, 0, 2))) <= limit


def test_the_projection_is_one_matmul_and_the_macs_are_the_cells():
    """With an initial state every step's H R^T is computed: the MatMuls' MACs are the
    cell's exactly; the projection of every step and direction is one MatMul."""
    model = cell_model("LSTM", "bidirectional", steps=6, width=5, hidden=4, states="inputs")
    cell = gs.import_onnx(model).nodes[0]
    _, graph, done = unrolled(model)
    matmuls = [n for n in graph.nodes if n.op == "MatMul"]
    projection = next(n for n in matmuls if n.name == "cell")
    assert projection.outputs[0].shape == [1, 6, 2 * 4 * 4]
    assert len(matmuls) == 1 + 6 * 2  # the projection, then one H R^T a step and direction
    assert sum(node_macs(n) for n in matmuls) == node_macs(cell)
    assert "T=6" in done.rewritten["cell"]
    assert {done.derived[n.name] for n in graph.nodes if n.name != "cell"} == {"cell"}


def test_a_zero_initial_state_skips_the_first_steps_products():
    model = cell_model("GRU", "forward", steps=4, width=3, hidden=5)
    cell = gs.import_onnx(model).nodes[0]
    _, graph, _ = unrolled(model)
    skipped = 1 * 3 * 5 * 5  # one direction's first H R^T, batch 1
    assert sum(node_macs(n) for n in graph.nodes if n.op == "MatMul") == node_macs(cell) - skipped


@pytest.mark.parametrize("form,words", [
    (dict(lens=[3]), "sequence_lens"),
    (dict(clip=1.0), "clip"),
    (dict(activations=["Relu", "Tanh", "Tanh"]), "activations ['Relu'"),
    (dict(activation_alpha=[0.5]), "activation_alpha"),
    (dict(input_forget=1), "input_forget=1"),
    (dict(peepholes=True), "peephole"),
    (dict(steps=MAX_STEPS + 1, width=1, hidden=1), f"T={MAX_STEPS + 1} steps, over the "
                                                   f"{MAX_STEPS}"),
])
def test_what_is_not_unrolled_stays_with_its_reason(form, words):
    model = cell_model("LSTM", **form)
    graph, done = gs.import_onnx(model), Rewrites()
    assert not unroll_recurrent(graph, done, 14)
    assert [n.op for n in graph.nodes] == ["LSTM"]
    assert words in done.kept["cell"] and "runs on the CPU" in done.kept["cell"]


def test_sequence_lens_all_t_is_unrolled():
    assert_agrees(cell_model("GRU", "bidirectional", batch=2, lens=[5, 5]))


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_before_opset_13_squeeze_takes_its_axes_as_an_attribute(op):
    """A batch-1 bidirectional cell's sequence and states enter by Squeeze/Unsqueeze: at
    opset 11 (ddddocr's common) their axes are attributes, or onnxruntime refuses the graph."""
    assert_agrees(cell_model(op, "bidirectional", states="inputs", opset=11))
