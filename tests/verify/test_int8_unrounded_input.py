"""An int8 artifact whose first layer moves the float32 model input into its first quant layer
(a Flatten, an Unsqueeze: openwakeword's timer, brainmaze's modelA) is bit-equal to its QDQ
model: the simulator hands that input in unrounded (``runtime/program.py quantized_inputs``),
and verify's reference must not round it either (issue 45 finding 7: on main it rounded the
input to fp16 and the artifact FAILed by one int8 step on its Softmax output)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

import mrvl_convert
from support.int8 import converted_int8, float_model


def flatten_head() -> onnx.ModelProto:
    rng = np.random.default_rng(11)
    # named, as exporters name them (verify finds the artifact's layers by node name)
    nodes = [helper.make_node("Flatten", ["x"], ["f"], name="Flatten_0"),
             helper.make_node("Gemm", ["f", "w1", "b1"], ["h"], name="Gemm_1"),
             helper.make_node("Relu", ["h"], ["r"], name="Relu_2"),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["z"], name="Gemm_3"),
             helper.make_node("Softmax", ["z"], ["y"], axis=1, name="Softmax_4")]
    inits = {"w1": rng.standard_normal((32, 16)) / 4, "b1": rng.standard_normal(16) / 4,
             "w2": rng.standard_normal((16, 6)), "b2": rng.standard_normal(6)}
    return float_model(nodes, inits, [1, 4, 8], [1, 6])


def near_boundaries(scale: float, count: int, rng: np.random.Generator) -> np.ndarray:
    """float32 values just above a midpoint between int8 levels whose fp16 rounding falls
    below it: QuantizeLinear of the value and of its fp16 rounding differ by one step."""
    found = []
    for k in rng.permutation(np.arange(-100, 100)):
        mid = np.float32((k + 0.5) * np.float32(scale))
        x = mid
        for _ in range(64):
            x = np.nextafter(x, np.float32(np.inf), dtype=np.float32)
            up = np.rint(np.float32(x) / np.float32(scale))
            down = np.rint(np.float32(np.float16(x)) / np.float32(scale))
            if up != down:
                found.append(x)
                break
        if len(found) == count:
            break
    return np.array(found, np.float32)


def test_a_moved_input_is_quantized_unrounded_in_verify_as_in_the_artifact(tmp_path):
    result, qdq = converted_int8(flatten_head(), tmp_path / "out")
    model = onnx.load(str(qdq))
    quantize = next(n for n in model.graph.node if n.op_type == "QuantizeLinear"
                    and n.input[0] == "f")
    scale = float(numpy_helper.to_array(
        next(i for i in model.graph.initializer if i.name == quantize.input[1])))
    rng = np.random.default_rng(5)
    feeds = [{"x": near_boundaries(scale, 32, rng).reshape(1, 4, 8)} for _ in range(3)]
    comparison = mrvl_convert.compare(qdq, result.out_dir, feeds)
    assert comparison.passed
    assert all(row.max_abs == 0 for row in comparison.judged_rows)
    forms = [f["source_nodes"] for f in result.report.get("int8_forms", [])]
    assert ["Flatten_0"] not in forms
