"""Strategies for onnxruntime's dynamic int8 forms (``quantize_dynamic``), hand-built: x ->
DynamicQuantizeLinear -> MatMulInteger or ConvInteger (int8 weights; a ConvInteger's uint8 at
onnxruntime 1.18, which has no int8 kernel for it) -> [the old form's bias in accumulator
units: Div by the scales, Floor, Cast to int32, Add] -> Cast to float -> Mul by the input's
times the weight's scale -> [Add of a float bias]. Widths reach accumulators far over fp16's
65504, which the fp16 floor must not round."""
from __future__ import annotations

from typing import List, Tuple

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from support.onnxref import ORT_CONV_INTEGER_INT8


@st.composite
def dynamic_int8_models(draw) -> Tuple[onnx.ModelProto, List[int], str]:
    """(model, input shape, the accumulator's float form's name)."""
    conv = draw(st.booleans())
    width = draw(st.integers(16, 96)) if conv else draw(st.integers(32, 640))
    outs = draw(st.integers(1, 8))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    shape = [1, width, 4, 4] if conv else [1, width]
    # onnxruntime 1.18 runs ConvInteger for uint8 weights only: there the conv's weights are
    # uint8 about a zero point of 128 (quantize_dynamic's weight_type=QUInt8), as wide.
    unsigned = conv and not ORT_CONV_INTEGER_INT8
    wtype, wzero = (np.uint8, 128) if unsigned else (np.int8, 0)
    weight = wzero + rng.integers(-127, 128, (outs, width, 3, 3) if conv else (width, outs))
    inits = [numpy_helper.from_array(weight.astype(wtype), "w"),
             numpy_helper.from_array(np.array(draw(st.sampled_from([1e-3, 0.02])), np.float32),
                                     "w_scale"),
             numpy_helper.from_array(np.array(wzero, wtype), "w_zero")]
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "x_scale", "x_zero"]),
             helper.make_node("Mul", ["x_scale", "w_scale"], ["scales"])]
    nodes.append(helper.make_node("ConvInteger", ["xq", "w", "x_zero", "w_zero"], ["acc"],
                                  pads=[1, 1, 1, 1]) if conv else
                 helper.make_node("MatMulInteger", ["xq", "w", "x_zero", "w_zero"], ["acc"]))
    acc = "acc"
    bias = (rng.standard_normal(outs) * 0.1).astype(np.float32)
    if draw(st.booleans()):  # the old form: the bias in accumulator units, added as int32
        inits.append(numpy_helper.from_array(bias, "b"))
        nodes += [helper.make_node("Div", ["b", "scales"], ["b_units"]),
                  helper.make_node("Floor", ["b_units"], ["b_floor"]),
                  helper.make_node("Cast", ["b_floor"], ["b_int"], to=TensorProto.INT32)]
        if conv:
            inits.append(numpy_helper.from_array(np.array([1, outs, 1, 1], np.int64), "bs"))
            nodes.append(helper.make_node("Reshape", ["b_int", "bs"], ["b_shaped"]))
        nodes.append(helper.make_node("Add", [acc, "b_shaped" if conv else "b_int"],
                                      ["acc_biased"]))
        acc = "acc_biased"
    nodes += [helper.make_node("Cast", [acc], ["acc_float"], to=TensorProto.FLOAT),
              helper.make_node("Mul", ["acc_float", "scales"], ["y"])]
    graph = helper.make_graph(nodes, "dynamic_int8",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return model, shape, "acc_float"
