"""``--keep-fp16 auto --min-agreement`` tries recipes before it keeps layers in fp16 (issue 44,
``tune/layer_recipes.py``): a classifier trained in the test where one layer (conv3) loses its
decisions to a systematic rounding error of its weights, which bias correction of that layer
alone takes out, and another (conv2) to a per-tensor weight scale that no recipe mends (a huge
weight that reads a channel that is always 0, with nothing for equalization to trade it with).
The search finds both: conv3 int8 with its bias corrected, conv2 in fp16, nothing else; the
written artifact carries the recipe and its held-out figure is the search's."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import mrvl_convert
from mrvl_convert.cli.convert import main
from mrvl_convert.quantize.recipe import quantize_int8
from mrvl_convert.tune.keep_fp16 import quantize_keep_fp16
from mrvl_convert.tune.layer_recipes import CLIPS, _qdq_error, mse_ranges
from support.int8 import float_model
from support.trained import conv_nchw, pooled_fc, saved_classifier, template_images

CLASSES = 3
TARGET = 0.95
STEP = 0.05  # conv3's int8 weight step: its largest weight is 127 of them
LEVELS = 8


def images(count: int, seed: int) -> "tuple[np.ndarray, np.ndarray]":
    return template_images(count, seed, CLASSES)


def weights() -> dict:
    rng = np.random.default_rng(7)
    w1, b1 = rng.standard_normal((8, 3, 3, 3)) * 0.4, np.full(8, 0.1)
    b1[7], w1[7] = -1e3, 0.0  # channel 7: always 0, no weight range to equalize with
    w2, b2 = rng.standard_normal((8, 8, 1, 1)) * 0.5, np.full(8, 0.1)
    w2[:, 7] = 0.0
    w2[0, 7] = 400.0  # reads only zeros: the whole per-tensor int8 range of conv2
    w2[7], b2[7] = 0.0, -1.0  # channel 7 of conv2's Clip: always 0
    # conv3: every weight 0.45 of a step above a multiple of the step (127 steps: the weight
    # that reads channel 7, always 0), so each rounds down by the same amount: on inputs that
    # are all >= 0 the int8 output is shifted, and little else
    w3 = (rng.integers(-LEVELS, LEVELS + 1, (8, 8, 3, 3)) + 0.45) * STEP
    w3[:, 7] = 0.0
    w3[0, 7, 0, 0] = 127 * STEP
    return {"w1": w1, "b1": b1, "w2": w2, "b2": b2, "w3": w3, "b3": np.zeros(8)}


def features(x: np.ndarray, w: dict) -> np.ndarray:
    r1 = np.maximum(conv_nchw(x, w["w1"], w["b1"], 1), 0)
    r2 = np.clip(conv_nchw(r1, w["w2"], w["b2"], 0), 0, 6)
    return np.maximum(conv_nchw(r2, w["w3"], w["b3"], 0), 0).mean(axis=(2, 3))


def trained_classifier() -> onnx.ModelProto:
    w = weights()
    x, labels = images(256, 1)
    f = np.concatenate([features(x, w), np.ones((len(x), 1))], axis=1)
    fit = np.linalg.lstsq(f, np.eye(CLASSES)[labels], rcond=None)[0]  # the training
    inits = {**w, "wf": fit[:-1], "bf": fit[-1], "lo": np.array(0.0), "hi": np.array(6.0)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2"),
             helper.make_node("Clip", ["c2", "lo", "hi"], ["r2"], name="clip2"),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], name="conv3"),
             helper.make_node("Relu", ["c3"], ["r3"], name="relu3"), *pooled_fc("r3")]
    return float_model(nodes, inits, [1, 3, 8, 8], [1, CLASSES])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return saved_classifier(trained_classifier(), tmp_path_factory.mktemp("recipes"), CLASSES)


def test_the_classifier_is_trained(trained):
    src, calibration, labels, _ = trained
    reference = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    predicted = reference.run(None, {"x": calibration["x"][:1]})[0]
    got = [reference.run(None, {"x": calibration["x"][r:r + 1]})[0].argmax()
           for r in range(len(labels))]
    assert predicted.shape == (1, CLASSES) and np.mean(np.array(got) == labels) > 0.9


def test_the_search_corrects_one_layer_and_keeps_the_other_in_fp16(trained):
    src, calibration, _, tmp = trained
    result = quantize_keep_fp16(src, tmp / "keep.onnx", calibration, "auto",
                                min_agreement=TARGET, threshold_db=-100.0)
    assert result.reached and result.held_out_before < TARGET
    assert result.kept == ["conv2", "clip2"]  # conv2 (with its Clip) in fp16, nothing else
    assert "conv3" in result.recipes.bias_nodes  # conv3 int8, its bias corrected
    kept = [c for c in result.recipe_trials if c.kept]
    assert [c.recipe for c in kept] == ["bias_correction"]
    assert "bias_correction" in result.summary() and result.curve[0].recipes >= 1
    doc = result.to_dict()
    assert "conv3" in doc["recipes"]["bias_nodes"] and doc["recipe_trials"]
    assert result.int8_mac_share > 0.85  # conv3, the largest layer, stays int8


@pytest.mark.slow
def test_without_the_recipes_the_search_misses_or_pays_in_fp16(trained):
    """The same search with recipes=False (the search as it was): it misses the target, or
    keeps conv3 in fp16 too."""
    src, calibration, _, tmp = trained
    plain = quantize_keep_fp16(src, tmp / "plain.onnx", calibration, "auto",
                               min_agreement=TARGET, threshold_db=-100.0, recipes=False)
    assert not plain.reached or "conv3" in plain.kept


def test_the_cli_artifact_carries_the_recipe_and_measures_the_held_out_figure(trained, capsys):
    src, calibration, _, tmp = trained
    np.savez(tmp / "cal.npz", **calibration)
    out = tmp / "cli"
    code = main([str(src), "-o", str(out), "--quantize", "int8", "--calibration",
                 str(tmp / "cal.npz"), "--keep-fp16", "auto", "--min-agreement", str(TARGET),
                 "--snr-threshold", "-100"])
    assert code == 0
    manifest = json.loads((out / "clf" / "manifest.json").read_text())["quantization"]
    assert "conv3" in manifest["layer_recipes"]["bias_correction"]
    auto = manifest["keep_fp16_auto"]
    assert auto["nodes"] == ["conv2", "clip2"] and auto["reached"]
    reference = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    hybrid = mrvl_convert.HybridSession(out / "clf")
    x = calibration["x"]
    same = [hybrid.run(None, {"x": x[r:r + 1]})[0].argmax()
            == reference.run(None, {"x": x[r:r + 1]})[0].argmax() for r in auto["held_out_rows"]]
    assert float(np.mean(same)) == auto["held_out"]
    assert "bias_correction" in capsys.readouterr().out


def test_mse_range_clips_a_heavy_tail_and_leaves_a_uniform_tensor(tmp_path):
    """The range recipe's choice: a heavy-tailed tensor (Student's t, 2 degrees of freedom)
    is clipped well below its absmax; one uniform over [-1, 1] keeps its whole range (left
    out). The clip chosen is the least error over all the tensor's values of the grid."""
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 65536])
    u = helper.make_tensor_value_info("u", onnx.TensorProto.FLOAT, [1, 65536])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["a"]),
                               helper.make_node("Identity", ["u"], ["b"])], "g", [x, u],
                              [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                               for n in "ab"])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    rng = np.random.default_rng(0)
    a = rng.standard_t(2, (1, 65536)).astype(np.float32)
    b = rng.uniform(-1, 1, (1, 65536)).astype(np.float32)
    ranges = mse_ranges(Path(path), [{"x": a, "u": b}], ["a", "b"])
    assert "b" not in ranges and ranges["a"] < 0.8 * np.abs(a).max()
    top = float(np.abs(a).max())
    errors = {c: _qdq_error(a.astype(np.float64), top * c) for c in CLIPS}
    assert ranges["a"] == pytest.approx(top * min(errors, key=errors.get), rel=0.35)


def test_an_activation_range_sets_that_tensors_int8_scale(trained):
    """quantize_int8's activation_ranges: the tensor named (relu3's output) gets scale
    absmax / 127, and so does the Relu's input (``quantize/relu_ranges.py``: they share it);
    the others keep the calibrated one."""
    src, calibration, _, tmp = trained
    plain = quantize_int8(src, tmp / "r0.onnx", calibration)
    ranged = quantize_int8(src, tmp / "r1.onnx", calibration, activation_ranges={"r3": 0.5})
    a, b = scales(plain), scales(ranged)
    assert b["r3"] == b["c3"] == pytest.approx(0.5 / 127, rel=1e-6) != a["r3"]
    assert {k: v for k, v in a.items() if k not in ("r3", "c3")} == \
        {k: v for k, v in b.items() if k not in ("r3", "c3")}


def scales(qdq: Path) -> dict:
    """Per quantized tensor of a QDQ model, its scale."""
    model = onnx.load(str(qdq))
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    return {n.input[0]: float(inits[n.input[1]]) for n in model.graph.node
            if n.op_type == "QuantizeLinear" and n.input[1] in inits}
