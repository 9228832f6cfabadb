"""verify's int8 reference rounds a Concat's inputs where the simulator rounds them
(``verify/kept_inputs.py``). A Mrvl stage whose float32 input (a dequantized tensor a CPU stage
hands over) is read by an exact Concat behind an exact layout_transform gets that input rounded
to fp16 (``runtime/program.py quantized_inputs``: a Concat is no quant layer); the reference
concatenated it unrounded, so the Concat's QuantizeLinear moved values near a boundary by one
step and an int8 Conv after it made that several output steps: ICLabelNet FAILed against its own
QDQ model (at the Softmax after that Conv) on integ11; it is bit-equal now."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert

C, H = 8, 4


def _qdq_model() -> onnx.ModelProto:
    """a, b (float) -> Concat -> QuantizeLinear -> DequantizeLinear -> Conv (int8 weights) ->
    QuantizeLinear -> DequantizeLinear -> y: the Concat of float stage inputs is an fp16 layer
    behind the layout_transforms, as ICLabelNet's Concat of dequantized CPU-stage results."""
    rng = np.random.default_rng(3)
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, C, H, H])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, C, H, H])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, H, H])
    inits = [numpy_helper.from_array(rng.integers(-127, 128, (16, 2 * C, 3, 3)).astype(np.int8),
                                     "wq"),
             numpy_helper.from_array(np.float32(0.01), "ws"),
             numpy_helper.from_array(np.float32(0.07), "xs"),  # 4-sigma inputs over 127 steps
             numpy_helper.from_array(np.float32(0.5), "ys"),
             numpy_helper.from_array(np.int8(0), "zp")]
    nodes = [helper.make_node("Concat", ["a", "b"], ["ab"], name="cat", axis=1),
             helper.make_node("QuantizeLinear", ["ab", "xs", "zp"], ["abq"], name="abq"),
             helper.make_node("DequantizeLinear", ["abq", "xs", "zp"], ["abd"], name="abd"),
             helper.make_node("DequantizeLinear", ["wq", "ws", "zp"], ["w"], name="wd"),
             helper.make_node("Conv", ["abd", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "ys", "zp"], ["cq"], name="cq"),
             helper.make_node("DequantizeLinear", ["cq", "ys", "zp"], ["y"], name="cd")]
    graph = helper.make_graph(nodes, "cat", [a, b], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_an_int8_artifact_whose_concat_reads_a_rounded_input_matches_its_qdq_model(
        tmp_path) -> None:
    model = _qdq_model()
    result = mrvl_convert.convert(model, tmp_path / "a")
    assert result.summary["mrvl_subgraphs"] == 1 and result.summary["cpu_subgraphs"] == 0
    rng = np.random.default_rng(0)
    feeds = [{n: (rng.standard_normal((1, C, H, H)) * 2).astype(np.float32) for n in "ab"}
             for _ in range(4)]
    comparison = mrvl_convert.compare(model, tmp_path / "a", feeds)
    assert comparison.passed, comparison.format_table()
    assert all(r.max_abs == 0 for r in comparison.judged_rows), comparison.format_table()
