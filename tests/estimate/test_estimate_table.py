"""The --estimate table: totals by default, every layer with -v, columns aligned whatever the
names, and a table for a model whose verify failed."""
from __future__ import annotations

from mrvl_convert.cli.convert import main as cli_main
from mrvl_convert.estimate import format_table
from support.badmodels import save
from support.models import small_cnn

LONG = "a_stage_name_much_longer_than_the_thirty_four_columns_of_the_table_mrvl_0"


def _estimate(stage_name: str, tensor: str) -> dict:
    layer = {"layer": f"{stage_name}_0", "kind": "Conv2D", "macs": 2_000_000,
             "weight_bytes": 4096, "ddr_bytes": 8192, "microseconds": 12.5, "bound": "compute"}
    return {"profile": {"name": "p"}, "tiles": 8, "mrvl_microseconds": 12.5,
            "transfer_microseconds": 40.0, "total_microseconds": 52.5,
            "stages": [{"name": stage_name, "kind": "mrvl", "matmul_macs": 2_000_000,
                        "weight_bytes": 4096, "ddr_bytes": 8192, "microseconds": 12.5,
                        "layers": [layer]},
                       {"name": "cpu_1", "kind": "cpu"}],
            "boundaries": [{"tensor": tensor, "from": stage_name, "to": "cpu_1", "cut": True,
                            "bytes": 2048, "microseconds": 20.0},
                           {"tensor": "x", "from": "host", "to": stage_name, "cut": False,
                            "bytes": 2048, "microseconds": 20.0}]}


def _misaligned(text: str) -> list:
    """The rows whose figure does not end where the header's 'est. us' ends."""
    lines = text.splitlines()
    end = lines[1].index("est. us") + len("est. us")
    return [line for line in lines[3:-1]
            if not (line[end - 1:end].isdigit() or line[end - 3:end] == "n/a")
            or line[end:end + 1] not in ("", " ")]


def test_totals_by_default_layers_with_verbose():
    est = _estimate("m_mrvl_0", "t")
    short, full = format_table(est), format_table(est, layers=True)
    assert "m_mrvl_0_0" not in short and "Mrvl stage, 1 layers" in short and "-v" in short
    assert "cut t" not in short and "cuts (1 tensors)" in short and "host i/o (1 tensors)" in short
    assert "m_mrvl_0_0" in full and "Conv2D" in full and "cut t" in full


def test_long_stage_and_tensor_names_keep_the_columns_aligned():
    text = format_table(_estimate(LONG, LONG + "_output_tensor"), layers=True)
    assert LONG in text and _misaligned(text) == [], text


def test_cli_default_is_totals_and_verbose_lists_layers(tmp_path, capsys):
    model = save(small_cnn(), tmp_path / "cnn.onnx")
    assert cli_main([str(model), "-o", str(tmp_path / "a"), "--estimate"]) == 0
    out = capsys.readouterr().out
    assert "ESTIMATE (not a measurement)" in out and "Mrvl stage" in out
    assert "Conv2D" not in out
    assert cli_main([str(model), "-o", str(tmp_path / "b"), "--estimate", "-v"]) == 0
    assert "Conv2D" in capsys.readouterr().out


def test_table_printed_for_a_model_whose_verify_failed(tmp_path, capsys):
    model = save(small_cnn(), tmp_path / "cnn.onnx")
    code = cli_main([str(model), "-o", str(tmp_path / "a"), "--estimate", "--verify",
                     "--atol", "0", "--rtol", "1e-9"])     # fp16 cannot meet these
    assert code == 3
    assert "cnn: ESTIMATE (not a measurement)" in capsys.readouterr().out
