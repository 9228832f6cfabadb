"""Benchmark models built with onnx.helper (opset 13, IR version 8, NCHW float32).

* ``resnet(depths=(3, 4, 6, 3), ...)``: ResNet-50-style bottleneck network laid
  out like a PyTorch (torchvision) export with un-fused BatchNorm: Conv (no
  bias) -> BatchNormalization -> Relu, torch-style node/tensor/initializer
  names (``/layer1/layer1.0/conv1/Conv``, ``layer1.0.conv1.weight``, ...).
  Seeded random weights, scaled so activations stay O(1) through the network
  (the accelerator runs fp16). ``depths=(3, 4, 6, 3)`` is ResNet-50,
  ``(3, 4, 23, 3)`` ResNet-101, ``(6, 8, 12, 6)`` a doubled-depth ResNet-50.
* ``mnist_cnn_like(batch=1)``: the trained example model from
  ``examples/mnist_cnn/mnist_cnn.onnx``.
* ``save(model, path)``: write a model with ``onnx.save``.

Generated models are not committed (ResNet-50 is ~100 MB): build them at run
time into a temporary directory.

Self-check: ``python benchmarks/models.py`` (checker, shape inference, one
onnxruntime run per model).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
IR_VERSION = 8
EXPANSION = 4
BN_EPS = 1e-5
MNIST_CNN_PATH = Path(__file__).resolve().parent.parent / "examples" / "mnist_cnn" / "mnist_cnn.onnx"


class _Builder:
    """Accumulates nodes and initializers with PyTorch-exporter style names."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def init(self, name: str, arr: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(arr, dtype=np.float32), name))
        return name

    def node(self, op: str, scope: str, inputs: list[str], **attrs) -> str:
        # torch >= 1.13 exporter: node "/layer1/layer1.0/conv1/Conv",
        # output "/layer1/layer1.0/conv1/Conv_output_0"
        name = f"{scope}/{op}"
        out = f"{name}_output_0"
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int, module: str, scope: str,
             gain: float = 2.0) -> str:
        # He-normal (fan_in) init: std = sqrt(gain / fan_in); gain 2 for a ReLU that follows
        fan_in = cin * k * k
        w = self.rng.standard_normal((cout, cin, k, k), dtype=np.float32) * np.float32(np.sqrt(gain / fan_in))
        wname = self.init(f"{module}.weight", w)
        p = k // 2
        return self.node("Conv", scope, [x, wname], dilations=[1, 1], group=1,
                         kernel_shape=[k, k], pads=[p, p, p, p], strides=[stride, stride])

    def bn(self, x: str, c: int, module: str, scope: str, gamma: float = 1.0) -> str:
        # "Trained-looking" stats: running var ~ U(0.5, 1.5), small means, gamma
        # around `gamma`, small betas. Conv outputs here have ~unit variance, so
        # BN keeps activations O(1).
        r = self.rng
        scale = self.init(f"{module}.weight", gamma * r.uniform(0.8, 1.2, c))
        bias = self.init(f"{module}.bias", r.normal(0.0, 0.05, c))
        mean = self.init(f"{module}.running_mean", r.normal(0.0, 0.05, c))
        var = self.init(f"{module}.running_var", r.uniform(0.5, 1.5, c))
        return self.node("BatchNormalization", scope, [x, scale, bias, mean, var],
                         epsilon=BN_EPS, momentum=0.9)


def _bottleneck(b: _Builder, x: str, cin: int, width: int, stride: int, name: str, scope: str,
                v1: bool = False) -> tuple[str, int]:
    cout = width * EXPANSION
    # v1 (the ONNX model zoo's ResNet-50 v1) strides the first 1x1 conv; torchvision the 3x3
    s1, s2 = (stride, 1) if v1 else (1, stride)
    y = b.conv(x, cin, width, 1, s1, f"{name}.conv1", f"{scope}/conv1")
    y = b.bn(y, width, f"{name}.bn1", f"{scope}/bn1")
    y = b.node("Relu", f"{scope}/relu", [y])
    y = b.conv(y, width, width, 3, s2, f"{name}.conv2", f"{scope}/conv2")
    y = b.bn(y, width, f"{name}.bn2", f"{scope}/bn2")
    y = b.node("Relu", f"{scope}/relu_1", [y])
    y = b.conv(y, width, cout, 1, 1, f"{name}.conv3", f"{scope}/conv3", gain=1.0)
    # small gamma on the last BN of the residual branch (as trained ResNets
    # have) so the residual stream grows slowly with depth
    y = b.bn(y, cout, f"{name}.bn3", f"{scope}/bn3", gamma=0.3)
    if stride != 1 or cin != cout:
        s = b.conv(x, cin, cout, 1, stride, f"{name}.downsample.0", f"{scope}/downsample/downsample.0", gain=1.0)
        # the shortcut also feeds the residual stream: keep it ~unit variance
        s = b.bn(s, cout, f"{name}.downsample.1", f"{scope}/downsample/downsample.1", gamma=0.7)
    else:
        s = x
    y = b.node("Add", scope, [y, s])
    y = b.node("Relu", f"{scope}/relu_2", [y])
    return y, cout


def resnet(depths=(3, 4, 6, 3), width: int = 64, batch: int = 1, image: int = 224,
           num_classes: int = 1000, seed: int = 0, v1: bool = False) -> onnx.ModelProto:
    """ResNet-style bottleneck network (ResNet-50 for the defaults, ~25.56M params).

    Input ``input`` [batch, 3, image, image] float32, output ``logits``
    [batch, num_classes]. Stem: 7x7/2 conv + BN + ReLU + 3x3/2 max pool (pad 1);
    stages of bottleneck blocks (1x1, 3x3 with the stride, 1x1 x4 expansion;
    projection shortcut conv+BN where the shape changes); residual Add + ReLU;
    GlobalAveragePool, Flatten, Gemm(transB=1). ``v1=True`` puts the stride on the first
    1x1 conv of a block, as ResNet-50 v1 of the ONNX model zoo does (torchvision: on the 3x3).
    """
    b = _Builder(seed)
    x = b.conv("input", 3, width, 7, 2, "conv1", "/conv1")
    x = b.bn(x, width, "bn1", "/bn1")
    x = b.node("Relu", "/relu", [x])
    x = b.node("MaxPool", "/maxpool", [x], ceil_mode=0, dilations=[1, 1],
               kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])
    cin = width
    for si, depth in enumerate(depths):
        layer = f"layer{si + 1}"
        for bi in range(depth):
            stride = 2 if (si > 0 and bi == 0) else 1
            name = f"{layer}.{bi}"
            x, cin = _bottleneck(b, x, cin, width * 2 ** si, stride, name, f"/{layer}/{name}",
                                 v1=v1)
    x = b.node("GlobalAveragePool", "/avgpool", [x])
    x = b.node("Flatten", "", [x], axis=1)
    fc_w = b.init("fc.weight", b.rng.standard_normal((num_classes, cin), dtype=np.float32)
                  * np.float32(1.0 / np.sqrt(cin)))
    fc_b = b.init("fc.bias", b.rng.normal(0.0, 0.01, num_classes))
    b.nodes.append(helper.make_node("Gemm", [x, fc_w, fc_b], ["logits"], name="/fc/Gemm",
                                    alpha=1.0, beta=1.0, transB=1))

    depth_name = 2 + 3 * sum(depths)  # conv layers on the main path + fc
    graph = helper.make_graph(
        b.nodes, f"resnet{depth_name}",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, image, image])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, num_classes])],
        initializer=b.inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             ir_version=IR_VERSION, producer_name="mrvl_convert benchmarks/models.py")


def mnist_cnn_like(batch: int = 1) -> onnx.ModelProto:
    """The trained example MNIST CNN (examples/mnist_cnn/mnist_cnn.onnx).

    The file has batch 1; for another ``batch`` the input/output batch
    dimensions are rewritten (every op in it is batch-agnostic).
    """
    model = onnx.load(os.fspath(MNIST_CNN_PATH))
    if batch != 1:
        for vi in list(model.graph.input) + list(model.graph.output):
            vi.type.tensor_type.shape.dim[0].dim_value = batch
        onnx.checker.check_model(model)
    return model


def save(model: onnx.ModelProto, path) -> Path:
    """Write ``model`` to ``path`` with onnx.save (creating parent dirs); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, os.fspath(path))
    return path


def param_count(model: onnx.ModelProto, trainable_only: bool = True) -> int:
    """Number of weights in the initializers (BN running stats excluded by default)."""
    return sum(int(np.prod(t.dims)) for t in model.graph.initializer
               if not (trainable_only and (t.name.endswith(".running_mean") or t.name.endswith(".running_var"))))


def _self_check() -> None:
    import tempfile
    import time

    import onnxruntime as ort

    def check(name: str, model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        assert model.ir_version == IR_VERSION, model.ir_version
        assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [OPSET]
        assert all(n.name for n in model.graph.node), "unnamed node"
        assert len({n.name for n in model.graph.node}) == len(model.graph.node), "duplicate node names"
        with tempfile.TemporaryDirectory() as d:
            p = save(model, Path(d) / f"{name}.onnx")
            size = p.stat().st_size
            onnx.checker.check_model(os.fspath(p), full_check=True)
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        (y,) = sess.run(["logits"], {"input": x})
        assert np.isfinite(y).all()
        print(f"{name}: {len(model.graph.node)} nodes, {param_count(model):,} params, "
              f"{size / 2**20:.1f} MiB, logits {y.shape} max|.| {np.abs(y).max():.3g} "
              f"std {y.std():.3g} ({time.perf_counter() - t0:.1f}s)")
        return y

    rng = np.random.default_rng(1)
    r50 = resnet()
    assert param_count(r50) == 25_557_032, param_count(r50)  # torchvision resnet50
    for name, model, shape in [
        ("resnet50", r50, (1, 3, 224, 224)),
        ("resnet50_x2depth", resnet(depths=(6, 8, 12, 6)), (1, 3, 224, 224)),
        ("resnet_small_b2", resnet(depths=(1, 1, 1, 1), width=16, batch=2, image=64, num_classes=10),
         (2, 3, 64, 64)),
    ]:
        y = check(name, model, rng.standard_normal(shape, dtype=np.float32))
        assert np.abs(y).max() < 1e3

    mnist = mnist_cnn_like()
    data = np.load(MNIST_CNN_PATH.with_name("heldout.npz"))
    y = check("mnist_cnn", mnist, data["images"][:1])
    assert y.argmax() == data["labels"][0]
    y4 = check("mnist_cnn_b4", mnist_cnn_like(batch=4), data["images"][:4])
    assert (y4.argmax(1) == data["labels"][:4]).all()
    print("ok")


if __name__ == "__main__":
    _self_check()
