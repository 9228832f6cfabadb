"""An int8 row's agreement with fp32, from verify's rows against fp32 (``verify/quant_cost.py``;
an output with one value per sample is judged there by its error over its peak,
``verify/output_kinds.py``): the worst cosine over the outputs with more than one value, the
worst error over peak of the one-value outputs, the outputs int8 wrecks, and top-1 only for an
output that is a class distribution, one a Softmax or LogSoftmax writes (through ops that only
move, cast or (de)quantize its values): verify reports top-1 for every ``[N, K]`` output, but a
regression output's argmax (a face detector's box) says nothing in a table of many models.
"""
from __future__ import annotations

from typing import Any, Dict, Sequence, Set

import onnx

_DISTRIBUTIONS = {"Softmax", "LogSoftmax"}
_CARRIERS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose", "Cast",
             "QuantizeLinear", "DequantizeLinear"}


def class_distributions(model: onnx.ModelProto) -> Set[str]:
    """The model's outputs a Softmax or LogSoftmax writes, through ``_CARRIERS``."""
    producer = {out: node for node in model.graph.node for out in node.output}
    found = set()
    for output in model.graph.output:
        node = producer.get(output.name)
        while node is not None and node.op_type in _CARRIERS and node.input:
            node = producer.get(node.input[0])
        if node is not None and node.op_type in _DISTRIBUTIONS:
            found.add(output.name)
    return found


def agreement(rows: Sequence[Any], wrecked: Sequence[Any],
              model: onnx.ModelProto) -> Dict[str, Any]:
    """``cosine``, ``top1``, ``one_value_err`` and ``wrecked`` (names) from verify's ``rows``
    (each with ``tensor``, ``cosine``, ``top1``, ``over_peak``) and its ``wrecked`` rows."""
    classes = class_distributions(model)
    cos = [r.cosine for r in rows if r.cosine is not None]
    top1 = [r.top1 for r in rows if r.top1 is not None and r.tensor in classes]
    errs = [r.over_peak for r in rows if r.over_peak is not None]
    return {"cosine": min(cos) if cos else None, "top1": min(top1) if top1 else None,
            "one_value_err": max(errs) if errs else None,
            "wrecked": [r.tensor for r in wrecked]}
