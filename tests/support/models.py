"""Small hand-built ONNX models for the converter's tests (seeded weights, every node named)."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Builder:
    """Append nodes one by one; tracks names so tests read like the network they build."""

    def __init__(self, seed: int = 0, opset: int = 13) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: List[onnx.NodeProto] = []
        self.inits: List[onnx.TensorProto] = []
        self.inputs: List[onnx.ValueInfoProto] = []
        self.opset = opset
        self._n = 0

    def input(self, name: str, shape: Sequence, dtype=TensorProto.FLOAT) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, dtype, list(shape)))
        return name

    def const(self, array: np.ndarray, name: Optional[str] = None) -> str:
        self._n += 1
        name = name or f"c{self._n}"
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, *shape: int, scale: Optional[float] = None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        scale = scale if scale is not None else (2.0 / max(fan_in, 1)) ** 0.5
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32))

    def op(self, op_type: str, inputs: Sequence[str], name: Optional[str] = None,
           outputs: int = 1, **attrs) -> str:
        self._n += 1
        name = name or f"{op_type}_{self._n}"
        outs = [f"{name}_out{i}" if i else f"{name}_out" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0]

    def conv(self, x: str, cin: int, cout: int, k: int = 3, bias: bool = True, **attrs) -> str:
        group = attrs.get("group", 1)
        ins = [x, self.weight(cout, cin // group, k, k)]
        if bias:
            ins.append(self.const((self.rng.standard_normal(cout) * 0.1).astype(np.float32)))
        return self.op("Conv", ins, kernel_shape=[k, k], **attrs)

    def bn(self, x: str, c: int) -> str:
        rng = self.rng
        return self.op("BatchNormalization", [
            x, self.const((1 + 0.1 * rng.standard_normal(c)).astype(np.float32)),
            self.const((0.1 * rng.standard_normal(c)).astype(np.float32)),
            self.const((0.1 * rng.standard_normal(c)).astype(np.float32)),
            self.const((0.5 + rng.random(c)).astype(np.float32))], epsilon=1e-5)

    def gemm(self, x: str, fin: int, fout: int, **attrs) -> str:
        w = self.weight(fout, fin) if attrs.get("transB") else self.weight(fin, fout)
        return self.op("Gemm", [x, w, self.const(np.full(fout, 0.05, np.float32))], **attrs)

    def matmul_add(self, x: str, fin: int, fout: int) -> str:
        y = self.op("MatMul", [x, self.weight(fin, fout)])
        return self.op("Add", [y, self.const(np.full(fout, 0.05, np.float32))])

    def model(self, outputs: Sequence[str], *, ir_version: int = 8, name: str = "test_model",
              shapes: Optional[Dict[str, Sequence[int]]] = None) -> onnx.ModelProto:
        """``shapes``: output shapes to declare where shape inference finds none (onnx before
        1.17 does not follow a Shape -> Gather -> Concat target into a Reshape)."""
        graph = helper.make_graph(self.nodes, name, self.inputs, [], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  ir_version=ir_version)
        # Declare each output with the type and shape that inference finds for it.
        inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
        for o in outputs:
            if o in (shapes or {}):
                model.graph.output.append(
                    helper.make_tensor_value_info(o, TensorProto.FLOAT, list(shapes[o])))
            else:
                model.graph.output.append(inferred[o])
        onnx.checker.check_model(model)
        return model


def small_cnn(*, sigmoid: bool = False, keras_transpose: bool = False, batch: int = 1,
              seed: int = 0) -> onnx.ModelProto:
    """Conv-Relu-Pool, [Sin], Conv-Relu-Pool, [Transpose], Flatten, Gemm-Relu, Gemm.

    ``sigmoid``: put an op in the middle that no layer set maps (Sin: Sigmoid, which this once
    was, is a layer of the newer Marvell set), so the model is cut there."""
    b = Builder(seed)
    x = b.input("x", [batch, 3, 16, 16])
    y = b.op("Relu", [b.conv(x, 3, 8, pads=[1, 1, 1, 1])], name="relu1")
    y = b.op("MaxPool", [y], name="pool1", kernel_shape=[2, 2], strides=[2, 2])
    if sigmoid:
        y = b.op("Sin", [y], name="sig")
    y = b.op("Relu", [b.conv(y, 8, 4, pads=[1, 1, 1, 1])], name="relu2")
    y = b.op("MaxPool", [y], name="pool2", kernel_shape=[2, 2], strides=[2, 2])
    if keras_transpose:
        y = b.op("Transpose", [y], name="to_nhwc", perm=[0, 2, 3, 1])
    y = b.op("Flatten", [y], name="flatten", axis=1)
    y = b.op("Relu", [b.gemm(y, 64, 16, transB=1)], name="relu3")
    y = b.gemm(y, 16, 10, transB=1)
    return b.model([y])


def run_ort(model: onnx.ModelProto, feeds: Dict[str, np.ndarray],
            outputs: Optional[Sequence[str]] = None, optimize: bool = True
            ) -> Dict[str, np.ndarray]:
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = list(outputs) if outputs else [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def ort_sqrt_is_fast() -> bool:
    """onnxruntime's Sqrt is Eigen's fast psqrt (x * rsqrt(x), one Newton step; 1.18), not
    correctly rounded (frontend/rsqrt_forms.py): its sqrt(+inf) is NaN, where a correctly
    rounded Sqrt (1.32) gives +inf."""
    b = Builder(opset=13)
    x = b.input("x", [1, 8])
    [y] = run_ort(b.model([b.op("Sqrt", [x])]), {"x": np.full((1, 8), np.inf, np.float32)},
                  optimize=False).values()
    return bool(np.isnan(y).all())


def mrvl_cpu_mrvl_model(seed: int = 0) -> onnx.ModelProto:
    """conv-relu-pool | Sin (no layer set maps it) | conv-relu-flatten-gemm."""
    rng = np.random.default_rng(seed)

    def init(name, shape, scale):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32),
                                       name)

    inits = [init("w1", (8, 3, 3, 3), 0.3), init("b1", (8,), 0.1),
             init("w2", (16, 8, 3, 3), 0.2), init("b2", (16,), 0.1),
             init("wf", (10, 16 * 6 * 6), 0.05), init("bf", (10,), 0.1)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Sin", ["p1"], ["s1"], name="sigmoid"),
        helper.make_node("Conv", ["s1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Flatten", ["r2"], ["f"], name="flatten", axis=1),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], name="fc", transB=1)]
    graph = helper.make_graph(
        nodes, "mrvl_cpu_mrvl",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def save_conv_relu(path: Path, channels: int = 4) -> Path:
    """Conv -> Relu saved at ``path``: one Mrvl stage, quick to convert (the batch tests' model;
    ``channels`` changes its output, so two runs of one name can be told apart)."""
    w = numpy_helper.from_array(np.ones((channels, 3, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 8, 8])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def conv_then_cpu_tail(relu_name: str = "relu") -> onnx.ModelProto:
    """Conv+Relu (a Mrvl stage), then Mod by a 1 KiB constant (a CPU stage with a weight)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    m = numpy_helper.from_array((rng.random((1, 4, 8, 8)) + 0.5).astype(np.float32), "m")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name=relu_name),
             helper.make_node("Mod", ["r", "m"], ["y"], name="mod", fmod=1)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w, m])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def canonicalized(model: onnx.ModelProto):
    """The converter's canonical graph of ``model`` and that graph as a ``ModelProto``
    onnxruntime runs, to compare a rewrite with the original."""
    import onnx_graphsurgeon as gs

    from mrvl_convert.frontend.canonicalize import canonicalize
    from mrvl_convert.frontend.load import load_model

    loaded = load_model(model)
    canonical = canonicalize(loaded)
    proto = gs.export_onnx(canonical.graph, do_type_check=False)
    proto.ir_version = 8
    # The loaded model's: an opset < 11 model is at 11 once loaded (frontend/opset_upgrade.py).
    proto.opset_import[0].version = loaded.proto.opset_import[0].version
    return canonical, proto
