"""The float model quantize_static gets holds no -inf mask and calibrates no non-finite constant.

Why: a traced PyTorch decoder adds a causal mask, a constant of 0 and -inf, to its attention
scores before a Softmax (g2p-id's tiny-pron). quantize_static quantizes that constant like any
other operand: its symmetric scale is ``inf / 127`` and ``-inf / inf`` is NaN, so the QDQ model
(the reference the int8 artifact is verified against) computes NaN scores. The conversion
clamps such a mask anyway (``frontend/mask_constants.py``); here the same function clamps it
on the float model first, so quantize_static quantizes the mask the artifact will hold. Any
other constant holding inf or NaN cannot be given an int8 scale at all: the nodes reading it
are left in float (``nodes_to_exclude``), with a reason for the manifest.

Bound: the mask clamp's own (``frontend/mask_constants.py``: bit-equal Softmax weights while
every score stays within +-16300; a row with every position masked differs); the constants
kept in float change nothing.

Requires: an ONNX model whose constants are initializers (``weights.py`` ran).
Ensures: the mask constants ``clamp_mask_constants`` clamps are new initializers read in
their place (every other node and tensor as it was, same names, same order; a mask two
Adds read is one new initializer; the old one stays, unread by those Adds);
``nonfinite_readers`` names every node reading a float initializer holding inf or NaN.
"""
from __future__ import annotations

from typing import List

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import numpy_helper

from mrvl_convert.frontend.mask_constants import clamp_mask_constants

REASON = ("reads a constant holding inf or NaN, which has no int8 scale (quantize_static "
          "would write NaN): left in float (quantize/finite.py)")


def masks_clamped(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with its additive-mask constants clamped as the conversion clamps
    them (module docstring); the model itself when there is none."""
    graph = gs.import_onnx(model)
    before = [list(node.inputs) for node in graph.nodes]
    if not clamp_mask_constants(graph):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    added = set()  # a mask two Adds read is clamped twice, under one name: one initializer
    # gs keeps the proto's node order (no cleanup or sort here): node i is the proto's node i
    for node, proto_node, inputs in zip(graph.nodes, out.graph.node, before):
        for index, (old, new) in enumerate(zip(inputs, node.inputs)):
            if new is not old:
                if new.name not in added:
                    out.graph.initializer.append(numpy_helper.from_array(new.values, new.name))
                    added.add(new.name)
                proto_node.input[index] = new.name
    return out


def nonfinite_readers(model: onnx.ModelProto) -> List[str]:
    """The names of the nodes (main graph) reading a float initializer that holds inf or NaN."""
    bad = {t.name for t in model.graph.initializer
           if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                              onnx.TensorProto.DOUBLE)
           and not np.isfinite(numpy_helper.to_array(t)).all()}
    return [node.name for node in model.graph.node if bad.intersection(node.input)]
