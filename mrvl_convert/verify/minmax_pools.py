"""Which Max/Min nodes the artifact pools exactly rather than lowers as a gap.

``layers/_max_pairs.py`` computes a Max/Min whose operands all have its output's shape as a
max pooling (exact: no value rounds); only one with an operand that broadcasts is
``o + Relu(f - o)`` (``layers/_minmax.py``), whose gap rounds. verify's references
(``floor_minmax.py``, ``kept_fp16.py``) round the gap of the latter alone. Reads only.
"""
from __future__ import annotations

from typing import Set

import onnx


def pooled_minmax(proto: onnx.ModelProto, infer: bool = True) -> Set[str]:
    """The Max/Min nodes (by name, an unnamed one by its output) whose operands all have the
    output's shape, as the value infos say (with ``infer``, shapes inferred first where the
    model carries none; no inference without a Max/Min)."""
    nodes = [n for n in proto.graph.node if n.op_type in ("Max", "Min")]
    if not nodes:
        return set()
    if infer:
        try:
            proto = onnx.shape_inference.infer_shapes(proto)
        except Exception:  # noqa: BLE001 - a model onnx cannot shape: its value infos as are
            pass
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in [*proto.graph.value_info, *proto.graph.input, *proto.graph.output]}
    return {n.name or n.output[0] for n in nodes if dims.get(n.output[0]) is not None
            and all(dims.get(name) == dims[n.output[0]] for name in n.input)}
