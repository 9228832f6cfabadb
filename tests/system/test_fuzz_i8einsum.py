"""Generated deepfilternet-enc-like networks (tests/support/strategies/i8einsum.py: any frames,
bins, groups, inner and hidden sizes, with or without the first Relu as a model output),
quantized by our recipe: one Mrvl subgraph, the depthwise Conv an int8 layer, the grouped-linear
Einsum rewritten, and the artifact bit-equal to its QDQ model (frontend/qdq.py,
frontend/einsum_forms.py, frontend/recurrent_reference.py)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings

from support.strategies.i8einsum import assert_whole_and_bit_equal, converted, enc_nets

pytestmark = pytest.mark.system


@settings(max_examples=max(3, settings.default.max_examples // 6), deadline=None)
@given(net=enc_nets())
def test_enc_like_networks_in_int8_are_one_subgraph_and_bit_equal(net, tmp_path_factory):
    # a session-scoped factory: hypothesis runs many examples in one call of the test
    assert_whole_and_bit_equal(converted(net, tmp_path_factory.mktemp("i8einsum")), net)
