"""The int8 FC's bias Add (``mrvl.qnn_fc_tokens``' optional bias role): a per-step Gemm head
after an unrolled cell, which ``frontend/step_heads.py`` writes as an int8 MatMul by its weight
``[C, O]`` and an Add of its int32 bias, so that ``sequence_lift.py`` lifts it to ``[1, T, C]``.
The layer adds the bias in its int32 accumulator, as the Gemm did, when the bias is int32 in the
scale input_scale x weight_scale (as ``check_qdq_weights`` asks of a Gemm's input 2)."""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import producer, scale_of, static_shape
from mrvl_convert.rules.qnn_checks import (BIAS_SCALE_RTOL, QNN_CHECKS, Details,
                                          dequantized_const)


def check_qdq_bias(node: gs.Node, args: Mapping[str, Any], graph: gs.Graph) -> Details:
    """An Add of the int8 MatMul before it (input 0) and an int32 constant ``[O]`` (input 1)
    in the scale input_scale x weight_scale."""
    matmul, bias = producer(node.inputs[0]), node.inputs[1]
    out = static_shape(matmul.outputs[0]) if matmul is not None else None
    if matmul is None or matmul.op != "MatMul" or not out or static_shape(bias) != out[-1:]:
        return {"detail": f"{bias.name} is not a bias [O] added to a MatMul's output"}
    issue = dequantized_const(bias, "int32") or dequantized_const(matmul.inputs[1], "int8")
    if issue:
        return {"detail": issue}
    product = float(np.float32(scale_of(producer(matmul.inputs[0])))
                    * np.float32(scale_of(producer(matmul.inputs[1]))))
    scale = scale_of(producer(bias))
    if abs(scale - product) > BIAS_SCALE_RTOL * product:
        return {"detail": f"its scale {scale!r} is not input_scale x weight_scale ({product!r})"}
    return None


# Every int8 check: qnn_checks.py's and this one (checks.py registers them).
INT8_CHECKS = MappingProxyType({**QNN_CHECKS, "qdq_bias": check_qdq_bias})
