"""Property tests over random recurrent cells (tests/support/strategies/recurrent.py): the
unrolled cell computes what the cell does on onnxruntime within recurrent_unroll.py's bound
(layout 1, which onnxruntime does not run, against the layout-0 cell on the transposed
inputs), and a batch-1 cell converts to one Mrvl subgraph whose hybrid run is within verify's
fp16 tolerance."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings

import mrvl_convert
from support.recurrent import bound, cell_model, run, unrolled
from support.strategies.recurrent import recurrent_cells

pytestmark = pytest.mark.system


def _layout0_reference(cell):
    """The layout-0 twin's outputs on the transposed inputs, turned back to layout 1."""
    spec = dict(cell.spec, layout=0)
    twin = cell_model(**spec)
    feeds = {k: v.transpose(1, 0, 2).copy() for k, v in cell.feeds.items()}
    want = run(twin, feeds)
    return {k: v.transpose(2, 0, 1, 3) if k == "Y" else v.transpose(1, 0, 2)
            for k, v in want.items()}, bound(twin, feeds)


@settings(max_examples=max(10, settings.default.max_examples // 2))
@given(cell=recurrent_cells())
def test_random_cells_unrolled_compute_what_the_cell_does(cell):
    if cell.spec["layout"]:
        want, limit = _layout0_reference(cell)
    else:
        want, limit = run(cell.model, cell.feeds), bound(cell.model, cell.feeds)
    got = run(unrolled(cell.model)[0], cell.feeds)
    assert set(got) == set(want)
    for name, value in want.items():
        assert got[name].shape == value.shape, name
        assert np.max(np.abs(got[name] - value)) <= limit, (name, limit)


# Each example converts and runs a model: a few, of up to 6 steps, keep it to seconds.
@settings(max_examples=max(3, settings.default.max_examples // 10), deadline=None)
@given(cell=recurrent_cells(layouts=(0,), batches=(1,), steps=6))
def test_random_batch1_cells_are_one_mrvl_subgraph_within_fp16(cell):
    with tempfile.TemporaryDirectory() as tmp:
        result = mrvl_convert.convert(cell.model, Path(tmp) / "art")
        stages = result.manifest["stages"]
        assert [s["kind"] for s in stages].count("mrvl") == 1, stages
        # a CPU stage may only lay a time-major input or output out from or to the batch-1
        # tensor the Mrvl subgraph reads or writes (rules/batch_axis): views, and it fits
        cpu_ops = {n.op_type for s in stages if s["kind"] == "cpu"
                   for n in onnx.load(str(Path(tmp) / "art" / s["onnx"])).graph.node}
        assert cpu_ops <= {"Reshape", "Squeeze", "Unsqueeze", "Transpose"}, cpu_ops
        assert result.report["device"]["fits"] is True, result.report["device"]["reasons"]
        comparison = mrvl_convert.compare(cell.model, Path(tmp) / "art", [cell.feeds])
        assert comparison.passed, comparison.summary_line()
