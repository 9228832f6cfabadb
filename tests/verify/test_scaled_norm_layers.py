"""``compare(layers=True)`` of an artifact whose norms were scaled by powers of two
(``frontend/norm_range.py``) against a float model: each layer of a scaled norm is compared with
the reference's tensor scaled alike (``norm_scales.scaled_like``, exact in float32 barring
underflow). Before, only a QDQ reference was scaled: against a float one (the T5 encoder's
float form) the squares, their mean and the reciprocal square root were "off" by 1 - 4**-k and
4**k - 1 (0.999 and 31 relative at k 5) while the artifact computed them right, and
``--layers`` named the first norm as the first layer over tolerance."""
from __future__ import annotations

import numpy as np

import mrvl_convert
from mrvl_convert.verify.compare import compare
from mrvl_convert.verify.norm_scales import norm_scales
from support.norm_models import NORM, norm_model


def test_a_scaled_norms_layers_match_a_float_reference_scaled_alike(tmp_path):
    model = norm_model("t5")
    rng = np.random.default_rng(3)
    feeds = [{"x": rng.standard_normal((1, 8, 16)).astype(np.float32)} for _ in range(3)]
    scales = norm_scales(model, feeds)
    assert scales.get(NORM, 0) >= 3  # squares beyond fp16 unscaled
    mrvl_convert.convert(model, tmp_path / "art", norm_scales=scales)
    report = compare(model, tmp_path / "art", feeds, layers=True)
    layers = {r.tensor: r for r in report.rows if r.kind == "layer"}
    norm = [layers[t] for t in ("sq", "ms", "v", "r") if t in layers]
    assert norm, sorted(layers)
    for row in norm:
        assert row.passed and row.max_rel < 0.01, (row.tensor, row.max_rel)
    assert report.passed, report.summary_line()
