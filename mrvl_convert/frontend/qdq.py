"""QDQ models (onnxruntime's QuantFormat.QDQ): one DequantizeLinear per consumer.

quantize_static writes one QuantizeLinear -> DequantizeLinear pair per tensor, and the
DequantizeLinear's output feeds every consumer (a residual branch, a weight shared by two
convolutions). The int8 rules (``rules/marvell/qnn.yaml``) fuse each consumer with the
DequantizeLinear in front of it, so each consumer gets its own copy here: exact, since a
DequantizeLinear is a pure elementwise function of its inputs (onnxruntime's
``DedicatedQDQPair`` option writes models this way to begin with).
"""
from __future__ import annotations

from typing import Dict

import onnx_graphsurgeon as gs


def dedicate_dequantize(graph: gs.Graph) -> Dict[str, str]:
    """Give every consumer of a shared DequantizeLinear its own copy (named
    ``<node>_for_<consumer>``); returns new node name -> the node it copies."""
    outputs = {t.name for t in graph.outputs}
    copies: Dict[str, str] = {}
    for node in list(graph.nodes):
        out = node.outputs[0] if node.op == "DequantizeLinear" and node.outputs else None
        if out is None or out.name in outputs or len(out.outputs) < 2:
            continue
        for consumer in list(out.outputs)[1:]:
            name = f"{node.name}_for_{consumer.name}"
            copy = gs.Variable(f"{out.name}_for_{consumer.name}", dtype=out.dtype, shape=out.shape)
            for i, tensor in enumerate(consumer.inputs):
                if tensor is out:
                    consumer.inputs[i] = copy
            graph.nodes.append(gs.Node(node.op, name, dict(node.attrs), list(node.inputs),
                                       [copy], domain=node.domain))
            copies[name] = node.name
    return copies
