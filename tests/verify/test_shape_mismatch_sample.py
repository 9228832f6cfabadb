"""A decoder Loop's step count can differ between the hybrid and fp32 in one sample only
(slanet-plus: fp16 noise moves an end-token decision): the row's note names that sample's
shapes. It named sample 0's, equal ones ("hybrid [1, 10, 8], fp32 [1, 10, 8]")."""
from __future__ import annotations

import numpy as np

from mrvl_convert.runtime.stages import TensorSpec
from mrvl_convert.verify.compare import _row
from mrvl_convert.verify.tolerances import DEFAULT_TOLERANCE


def test_the_note_names_the_sample_whose_shapes_differ():
    want = [np.zeros((1, 10, 8), np.float32), np.zeros((1, 11, 8), np.float32)]
    got = [np.zeros((1, 10, 8), np.float32), np.zeros((1, 12, 8), np.float32)]
    row = _row(TensorSpec("steps", (None, None, 8), "float32"), "output", got, want,
               DEFAULT_TOLERANCE)
    assert not row.passed
    assert row.note == "shape mismatch in sample 1: hybrid [1, 12, 8], fp32 [1, 11, 8]"
