"""``--keep-fp32 auto`` on a model whose weights are Constant nodes, not initializers (as
PaddlePaddle exports them: slanet-plus has 484 Constant nodes and no initializer). The fp16
analysis measured each layer's weights-alone cost on initializers only, so it found no weight,
ranked no layer, and auto kept nothing while verify failed."""
from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import helper

from mrvl_convert.tune.keep_fp32 import convert_keep_fp32
from mrvl_convert.verify.fp16_analysis import analyze_fp16
from mrvl_convert import convert
from support.fp16_sensitive import cancelling_model
from support.loop_decoder import loop_decoder


def as_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every initializer a Constant node in front of the graph's nodes."""
    nodes = [helper.make_node("Constant", [], [t.name], name=f"const_{t.name}", value=t)
             for t in model.graph.initializer]
    nodes += list(model.graph.node)
    del model.graph.initializer[:]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.checker.check_model(model)
    return model


@pytest.fixture()
def constant_model(tmp_path) -> Path:
    path = tmp_path / "constants.onnx"
    onnx.save(as_constants(cancelling_model()), path)
    return path


def test_the_analysis_measures_weights_held_by_constant_nodes(constant_model, tmp_path):
    """The cancelling Conv's fp16 weights cost the outputs most, whether its weights are
    initializers or Constant nodes (the model is the same function)."""
    convert(constant_model, tmp_path / "art")
    analysis = analyze_fp16(constant_model, tmp_path / "art")
    assert analysis.costliest and "conv_cancel" in analysis.costliest[0].op_nodes
    figures = analysis.weights[analysis.costliest[0].layer]
    assert figures.initializers == ["w_cancel", "b_cancel"]
    assert figures.output_snr_db < 20  # 67% off at the outputs (fp16_sensitive.py)


def test_auto_keeps_the_layer_whose_constant_weights_fp16_costs(constant_model, tmp_path):
    result = convert_keep_fp32(constant_model, tmp_path / "art", "auto")
    assert result.before["passed"] is False
    assert "conv_cancel" in result.kept and "conv_dup" not in result.kept
    assert result.after["passed"] is True
    assert result.held_out["after"]["passed"] is True


def test_a_loop_model_with_constant_weights_has_its_backbone_measured(tmp_path):
    """A Conv backbone in front of a decoder Loop onnx cannot infer (slanet-plus's form),
    its weights Constant nodes: the Conv layer's weights-alone figure is measured."""
    path = tmp_path / "loop.onnx"
    onnx.save(as_constants(loop_decoder()), path)
    convert(path, tmp_path / "art")
    analysis = analyze_fp16(path, tmp_path / "art")
    conv = next(r for r in analysis.layers.rows if "conv" in r.op_nodes)
    assert analysis.weights[conv.layer].initializers == ["w", "b"]
    assert conv in analysis.costliest
