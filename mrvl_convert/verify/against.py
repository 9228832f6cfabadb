"""Judge outputs with a named criterion, and compare a device (or mlsim) output file with the
simulator's outputs on the same inputs.

- ``rejudge``: the output rows of a comparison judged again by Marvell's criterion
  (``criteria.py``), the hybrid run the test and fp32 onnxruntime the reference;
- ``compare_against``: the outputs in Marvell's ``-output.json`` (``marvell_files.py``) are the
  test, the simulator's outputs the reference (as ``compare_json.py --test_json_file
  device.json --base_json_file mlsim.json``), judged by ``ours`` (the tolerances) or ``marvell``.
"""
from __future__ import annotations

import os
from typing import Any, List, Mapping

import numpy as np

from mrvl_convert.runtime.session import HybridSession
from mrvl_convert.verify.criteria import MARVELL, check_name, marvell_criterion, quantize_of
from mrvl_convert.verify.marvell_files import read_output_json
from mrvl_convert.verify.metrics import Worst
from mrvl_convert.verify.report import Comparison, Row
from mrvl_convert.verify.tolerances import Tolerances


def rejudge(rows: List[Row], got: Mapping[str, List[np.ndarray]],
            want: Mapping[str, List[np.ndarray]], quantize: str) -> None:
    """Judge the float output rows again by Marvell's criterion, every sample (in place)."""
    crit = marvell_criterion()
    for row in rows:
        if row.kind != "output" or row.tensor not in got or row.note.startswith("shape"):
            continue
        if not np.issubdtype(np.asarray(want[row.tensor][0]).dtype, np.floating):
            continue
        checks = [crit.check(g, w, quantize) for g, w in zip(got[row.tensor], want[row.tensor])]
        failed = next((c for c in checks if not c.passed), None)
        row.passed = failed is None
        row.note = _join(row.note, f"criterion marvell ({quantize}): " + (
            "passed" if failed is None else failed.describe(row.tensor)))


def compare_against(artifact_dir: "str | os.PathLike[str]", feed: Mapping[str, Any],
                    against: "str | os.PathLike[str]", *, criterion: str = "ours",
                    tolerances: "Tolerances | None" = None, **session_options: Any
                    ) -> Comparison:
    """The outputs in ``against`` compared with the simulator's on ``feed`` (one sample)."""
    check_name(criterion)
    tols = tolerances or Tolerances()
    session = HybridSession(artifact_dir, on_range_error="warn", **session_options)
    specs = session.output_specs
    test = read_output_json(against, specs)
    base = dict(zip([s.name for s in specs], session.run(None, dict(feed))))
    rows = []
    for spec in specs:
        row = Row(spec.name, "output", list(spec.shape),
                  tolerance=tols.for_tensor(spec.name).to_dict())
        if spec.name not in test:
            row.passed, row.note = False, f"not in {against}: not compared"
        else:
            _figures(row, test[spec.name], np.asarray(base[spec.name]), tols)
        rows.append(row)
    if criterion == MARVELL:
        present = list(test)
        rejudge(rows, {n: [test[n]] for n in present},
                {n: [np.asarray(base[n], dtype=np.float64)] for n in present},
                quantize_of(session.manifest))
    return Comparison(rows, 1, [e.describe() for e in session.last_range_events])


def _figures(row: Row, got: np.ndarray, want: np.ndarray, tols: Tolerances) -> None:
    worst = Worst()
    worst.add(got.astype(np.float64), want.astype(np.float64))
    row.max_abs, row.max_rel, row.cosine = worst.max_abs, worst.max_rel, worst.cosine
    row.passed = worst.within(tols.for_tensor(row.tensor))


def _join(note: str, more: str) -> str:
    return f"{note}; {more}" if note else more

