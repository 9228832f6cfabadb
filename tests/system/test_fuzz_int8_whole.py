"""Generated madmom-like networks on a batchless ``[frames, bins]`` input (frames above the
device batch, any bins, channels, first window and Elu alpha), quantized by our recipe: one Mrvl
subgraph as in fp16 (the input's lift alone on CPU), every Pad folded into its Conv, and the
artifact bit-equal to its QDQ model (``frontend/qdq_pads.py``, ``rules/batch_axis.py``); and a
keras global max pool or a reflect / edge Pad before a Conv, one Mrvl subgraph, bit-equal."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, note, settings

import numpy as np

from support.int8 import converted_int8
from support.strategies.int8_whole import (assert_bit_equal, convert_frames_net, frames_nets,
                                           int8_heads, verify_bit_equal)

pytestmark = pytest.mark.system


@settings(max_examples=max(3, settings.default.max_examples // 6), deadline=None)
@given(net=frames_nets())
def test_frames_networks_in_int8_are_one_subgraph_and_bit_equal(net):
    with tempfile.TemporaryDirectory(prefix="int8_whole_") as tmp:
        result = convert_frames_net(net, Path(tmp) / "out")
        note(str(result.summary))
        assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 1)
        assert not [n for n in result.report["nodes"] if n["op_type"] == "Pad"
                    and n["placement"] != "mrvl"]
        verify_bit_equal(result, net)


@settings(max_examples=max(3, settings.default.max_examples // 6), deadline=None)
@given(model=int8_heads())
def test_int8_heads_are_one_subgraph_and_bit_equal(model):
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    with tempfile.TemporaryDirectory(prefix="int8_heads_") as tmp:
        result, qdq = converted_int8(model, Path(tmp) / "out")
        note(str(result.summary))
        assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0)
        feeds = [{"x": x} for x in np.random.default_rng(0).uniform(-1, 1, [3] + shape)
                 .astype(np.float32)]
        assert_bit_equal(qdq, result, feeds)
