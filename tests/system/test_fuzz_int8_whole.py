"""Generated madmom-like networks on a batchless ``[frames, bins]`` input (frames above the
device batch, any bins, channels, first window and Elu alpha), quantized by our recipe: one Mrvl
subgraph as in fp16 (the input's lift alone on CPU), every Pad folded into its Conv, and the
artifact bit-equal to its QDQ model (``frontend/qdq_pads.py``, ``rules/batch_axis.py``)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, note, settings

from support.strategies.int8_whole import convert_frames_net, frames_nets, verify_bit_equal

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
