"""An output int8 wrecks (cosine against fp32 below 0.9) while the artifact passes against its
QDQ model is named, in the line, the table, summary.json and on stderr (issue 45: a face
detector's output at cosine 0.0 against fp32, and the CLI said ok)."""
from __future__ import annotations

import json

import numpy as np
import onnx

from mrvl_convert.cli.convert import main as convert_main
from mrvl_convert.verify.compare import compare
from support.int8 import converted_int8
from support.models import small_cnn


def test_a_wrecked_output_is_named_beside_a_pass(tmp_path):
    model = small_cnn()
    # calibrated on inputs 1000x smaller than the verify feeds: every activation saturates
    result, qdq = converted_int8(model, tmp_path / "art", span=1e-3)
    report = compare(qdq, result.out_dir, fp32=model)
    assert report.passed  # the conversion is exact: the QDQ model is as wrecked
    assert [r.tensor for r in report.fp32.wrecked] == [o.name for o in model.graph.output]
    assert "warning: int8 wrecks" in report.summary_line()
    assert "int8 wrecks" in report.format_table()
    assert report.fp32.to_dict()["wrecked"] == [o.name for o in model.graph.output]


def test_the_cli_says_it_even_when_quiet(tmp_path, capsys):
    model = small_cnn()
    onnx.save(model, str(tmp_path / "m.onnx"))
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "cal.npz", **{model.graph.input[0].name: rng.uniform(
        -1e-3, 1e-3, [16] + shape[1:]).astype(np.float32)})
    code = convert_main([str(tmp_path / "m.onnx"), "-o", str(tmp_path / "out"), "-q",
                         "--quantize", "int8", "--calibration", str(tmp_path / "cal.npz"),
                         "--verify"])
    assert code == 0
    assert "warning: m: int8 wrecks" in capsys.readouterr().err
    row = json.loads((tmp_path / "out" / "summary.json").read_text())["models"][0]
    assert row["verify"]["fp32"]["wrecked"] == [o.name for o in model.graph.output]


def test_a_good_int8_output_is_not_named(tmp_path):
    model = small_cnn()
    result, qdq = converted_int8(model, tmp_path / "art", span=3.0)
    report = compare(qdq, result.out_dir, fp32=model)
    assert report.fp32.wrecked == [] and "wrecks" not in report.summary_line()
