"""Recurrent heads as exporters write them convert to ONE Mrvl subgraph: tf2onnx's
bidirectional LSTMs (directions joined on the last axis of ``[T, N, h]``, the last steps'
states on ``[N, h]``: frontend/concat_views.py) and PyTorch's GRU states (``Y_h`` joined on
axis 0, rows picked by scalar Gathers, joined on the last axis into a Gemm:
frontend/pick_forms.py, then concat_views.py). On main each was cut where those Concats and
Gathers stayed on the CPU (hey_mycroft_v0.1: 3 Mrvl / 2 CPU, plcmos_v2: 2 / 2). The hybrid run
passes verify against onnxruntime fp32; the int8 conversion is one Mrvl subgraph too and
passes against its QDQ model."""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.quantize.recipe import Quantization
from support.exporter_picks import tf2onnx_bilstm, torch_gru_states

pytestmark = pytest.mark.system

MODELS = {"tf2onnx_bilstm": tf2onnx_bilstm, "torch_gru_states": torch_gru_states}
REWRITTEN = {"tf2onnx_bilstm": ["cat_dirs", "cat_last"],
             "torch_gru_states": ["pick_a", "pick_b", "cat_picked", "cat_features"]}


@pytest.mark.parametrize("form", sorted(MODELS))
def test_the_exporters_recurrent_head_is_one_mrvl_subgraph(tmp_path, form):
    model = MODELS[form]()
    result = mrvl_convert.convert(model, tmp_path / "art")
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"], result.report["cut_by"]
    assert result.report["device"]["fits"] is True, result.report["device"]["reasons"]
    for name in REWRITTEN[form]:
        entry = result.placement(name)
        assert entry["placement"] == "mrvl" and entry["canonical"], entry
    comparison = mrvl_convert.compare(model, tmp_path / "art", samples=3)
    assert comparison.passed, comparison.summary_line()


@pytest.mark.parametrize("form", sorted(MODELS))
def test_int8_converts_and_passes_against_its_qdq_model(tmp_path, form):
    """One Mrvl subgraph in int8 too: the Concat before the head FC is not moved past its QDQ
    pair alone (concat_sinking.py), so the int8 FC reads a dequantized input; on main the
    Concats, Gathers and the head stayed on the CPU."""
    model = MODELS[form]()
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    samples = np.random.default_rng(0).standard_normal([16] + shape).astype(np.float32)
    result = mrvl_convert.convert(model, tmp_path / "art",
                                  quantize=Quantization(calibration={"x": samples}))
    on_cpu = {n["op_type"] for n in result.report["nodes"] if n["placement"] == "cpu"}
    assert not on_cpu, on_cpu
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    qdq = tmp_path / "art" / result.manifest["quantization"]["file"]
    comparison = mrvl_convert.compare(qdq, tmp_path / "art", samples=3)
    assert comparison.passed, comparison.summary_line()
