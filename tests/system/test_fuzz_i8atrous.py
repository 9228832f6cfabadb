"""Property tests over TensorFlow's atrous Conv quantized with Marvell's recipe
(``tests/support/strategies/i8atrous.py``: ``space_to_batch.py``'s forms, blocks 2..4, kernels
1..5, SAME or VALID, batch 1 or 2, plain or depthwise, per-channel ops and a GELU, every tensor
between QDQ pairs as quantize_static writes them). For each: the QDQ model's canonical graph
has the dilated Conv, no SpaceToDepth/DepthToSpace/Pad, and onnxruntime gives it the QDQ
model's outputs bit for bit (``space_to_batch.py``'s int8 bound, measured exact); a few are
converted whole and verified against their QDQ model. Quick profile by default."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings

import mrvl_convert
from support.int8 import converted_int8
from support.models import canonicalized
from support.strategies.i8atrous import int8_atrous_specs, qdq_atrous, run_qdq
from support.strategies.space_to_batch import atrous_model

pytestmark = pytest.mark.system

_FEW = settings(max_examples=max(2, settings.default.max_examples // 10), deadline=None)


@_FEW
@given(spec=int8_atrous_specs())
def test_the_int8_rewrite_keeps_the_qdq_model_outputs_bit_for_bit(spec):
    qdq, feeds = qdq_atrous(spec)
    canonical, proto = canonicalized(qdq)
    assert "space-to-batch" in canonical.rewritten.get("atrous_conv", ""), spec
    assert not {"SpaceToDepth", "DepthToSpace"} & {n.op_type for n in proto.graph.node}, spec
    for feed in feeds:
        np.testing.assert_array_equal(run_qdq(proto, feed), run_qdq(qdq, feed), err_msg=str(spec))


@_FEW
@given(spec=int8_atrous_specs())
def test_an_int8_atrous_conv_is_one_mrvl_subgraph_and_verifies(spec, tmp_path_factory):
    # as in fp16 (test_fuzz_space_to_batch.py): a GELU left in [o, n, H, W] with n > 1 stays
    assume(spec["n"] == 1 or not spec["gelu"] or spec["form"] != "s2d")
    model, feed = atrous_model(spec)
    result, qdq = converted_int8(model, tmp_path_factory.mktemp("i8atrous") / "art")
    summary = result.summary
    assert (summary["mrvl_subgraphs"], summary["cpu_subgraphs"]) == (1, 0), (spec, [
        (e["name"], e.get("reason")) for e in result.report["nodes"] if e["placement"] == "cpu"])
    assert mrvl_convert.compare(qdq, result.out_dir, [feed], with_floor=False).passed, spec
