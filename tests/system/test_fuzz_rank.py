"""Property tests over random 1-D signal networks (tests/support/strategies/rank.py): each
converts (or fails with a MrvlConvertError), its hybrid run is within an fp16 tolerance of
onnxruntime fp32, and the ops rank_lift.py lifted to their 4-D views run on Mrvl."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import event, given, note, settings

import mrvl_convert
from mrvl_convert import MrvlConvertError
from support.strategies.rank import rank_models

pytestmark = pytest.mark.system


def _tolerance(ref: np.ndarray) -> float:
    """fp16's 11 bits over a few tens of roundings with O(1) layer gains: a few 1e-3 of the
    magnitude; 2e-2 * max(1, max|ref|), as tests/system/test_fuzz_pipeline.py argues, still
    sits far below an O(1) mistake (a wrong pad, stride, axis or layout)."""
    return 2e-2 * max(1.0, float(np.max(np.abs(ref), initial=0.0)))


def _reference(gm):
    session = ort.InferenceSession(gm.model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, gm.feeds)))


# A quarter of the profile's examples (each converts and runs a model): a few seconds quick.
@settings(max_examples=max(8, settings.default.max_examples // 4))
@given(gm=rank_models())
def test_random_1d_networks_convert_run_within_fp16_and_lift_onto_mrvl(gm):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "art"
        try:
            result = mrvl_convert.convert(gm.model, out)
        except MrvlConvertError as exc:
            note(f"refused: {exc}")
            event("refused")
            return
        event("converted")
        entries = result.report["nodes"]
        assert {e["name"] for e in entries} == {n.name for n in gm.model.graph.node}
        lifted = [e for e in entries if "4-D view" in e.get("canonical", "")]
        assert lifted, "the leading Conv1d is always lifted"
        off = [(e["name"], e.get("reason")) for e in lifted if e["placement"] != "mrvl"]
        assert not off, off
        want = _reference(gm)
        got = mrvl_convert.HybridSession(out).run(None, gm.feeds)
        for (name, ref), value in zip(want.items(), got):
            assert value.shape == ref.shape, name
            err = float(np.max(np.abs(value - ref), initial=0.0))
            assert err <= _tolerance(ref), f"{name}: {err:.4g}"


@settings(max_examples=max(4, settings.default.max_examples // 8))
@given(gm=rank_models())
def test_random_int8_1d_networks_put_their_lifted_convolutions_and_pools_on_mrvl(gm):
    """The same networks quantized (Marvell's int8 recipe): the lifted Conv1d, pools and BN
    run on Mrvl (a Pad between its Q/DQ pair and its Conv may not: that is the int8 recipe's
    placement, on 2-D models too)."""
    from mrvl_convert.quantize.recipe import Quantization

    shape = list(gm.feeds["x"].shape)
    samples = np.random.default_rng(1).standard_normal([6] + shape[1:]).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            result = mrvl_convert.convert(gm.model, Path(tmp) / "art",
                                          quantize=Quantization(calibration={"x": samples}))
        except MrvlConvertError as exc:
            note(f"refused: {exc}")
            event("refused")
            return
        event("converted")
        heavy = [e for e in result.report["nodes"] if "4-D view" in e.get("canonical", "")
                 and e["op_type"] in ("Conv", "MaxPool", "AveragePool", "BatchNormalization")]
        off = [(e["name"], e.get("reason")) for e in heavy if e["placement"] != "mrvl"]
        assert heavy and not off, off
