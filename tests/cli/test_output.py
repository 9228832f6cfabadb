"""What the mrvl-convert command prints (cli/output.py): the progress bar and the table."""
from __future__ import annotations

import io

from mrvl_convert.batch import Outcome
from mrvl_convert.cli.output import _Progress, format_table


def test_progress_bar_on_a_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True
    stream = Tty()
    with _Progress(2, quiet=False, stream=stream) as progress:
        assert progress.bar is not None
        progress.update(Outcome("a.onnx", "a", "ok", "out/a", seconds=0.1))
        progress.update(Outcome("b.onnx", "b", "failed", "out/b", error="x"))
    assert "2/2" in stream.getvalue()


def test_table_lists_failures() -> None:
    rows = [Outcome("a.onnx", "a", "ok", "out/a", {"mrvl_nodes": 4, "cpu_nodes": 1,
                                                   "mrvl_subgraphs": 1, "cpu_subgraphs": 1,
                                                   "transitions": 1}, 1.5, mrvl_mac_share=0.9876,
                    codegen={"layer_set": "upstream-0.19", "beyond_upstream": []}),
            Outcome("b.onnx", "b", "failed", "out/b", error="bad", error_type="ShapeError")]
    lines = format_table(rows).splitlines()
    assert lines[2].split() == ["a", "ok", "4", "1", "1", "1", "1", "98.8%", "v0.19", "1.50"]
    assert lines[3].split() == ["b", "failed", "-", "-", "-", "-", "-", "-", "-", "0.00",
                                "ShapeError"]


def test_codegen_line_names_the_kinds_beyond_v019() -> None:
    from pathlib import Path

    from mrvl_convert.cli.output import codegen_line
    beyond = [{"kind": "Sigmoid", "layers": 3, "composites": ["mrvl.sigmoid"]},
              {"kind": "Mul2D", "layers": 1, "composites": ["mrvl.mul"]}]
    needs = Outcome("a.onnx", "a", "ok", "out/a",
                    codegen={"layer_set": "marvell", "beyond_upstream": beyond})
    line = codegen_line(needs, Path("out"))
    assert line.startswith("a: needs the newer Marvell codegen (--layer-set marvell) for "
                           "Sigmoid x3, Mul2D x1: upstream TVM v0.19")
    only = Outcome("b.onnx", "b", "ok", "out/b",
                   codegen={"layer_set": "upstream-0.19", "beyond_upstream": []})
    assert codegen_line(only, Path("out")) == ""
