"""Builders of small good, bad and odd ONNX models for the CLI, batch and bad-input tests.

Every builder returns an ``onnx.ModelProto`` (or writes a file and returns its path). Models are
built with ``ir_version=8`` because onnx 1.23 writes IR 14 by default and onnxruntime refuses it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 8
OPSET = 13


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array.astype(np.float32), name)


def make(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
         outputs: Sequence[onnx.ValueInfoProto], initializers: Sequence[onnx.TensorProto] = (),
         *, name: str = "g", opset: int = OPSET, ir_version: int = IR_VERSION,
         extra_opsets: Sequence[onnx.OperatorSetIdProto] = ()) -> onnx.ModelProto:
    """A model from parts, with an explicit IR version (never the onnx default 14)."""
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(initializers))
    opsets = [helper.make_opsetid("", opset), *extra_opsets]
    return helper.make_model(graph, opset_imports=opsets, ir_version=ir_version,
                             producer_name="mrvl_convert-tests")


def small_cnn(seed: int = 0, *, channels: int = 4, size: int = 8, classes: int = 10,
              input_name: str = "x", batch: object = 1, name: str = "small_cnn",
              node_prefix: str = "") -> onnx.ModelProto:
    """Conv+Relu+MaxPool+Flatten+Gemm: the smallest CNN the accelerator takes whole.

    ``batch`` may be a string to leave a dynamic (symbolic) batch dimension.
    """
    rng = _rng(seed)
    half = size // 2
    p = node_prefix
    inits = [
        _init(f"{p}w", rng.standard_normal((channels, 3, 3, 3)) * 0.2),
        _init(f"{p}b", rng.standard_normal(channels) * 0.1),
        _init(f"{p}fc_w", rng.standard_normal((classes, channels * half * half)) * 0.1),
        _init(f"{p}fc_b", rng.standard_normal(classes) * 0.1),
    ]
    nodes = [
        helper.make_node("Conv", [input_name, f"{p}w", f"{p}b"], [f"{p}c"], name=f"{p}conv",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", [f"{p}c"], [f"{p}r"], name=f"{p}relu"),
        helper.make_node("MaxPool", [f"{p}r"], [f"{p}m"], name=f"{p}pool", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Flatten", [f"{p}m"], [f"{p}f"], name=f"{p}flatten", axis=1),
        helper.make_node("Gemm", [f"{p}f", f"{p}fc_w", f"{p}fc_b"], ["y"], name=f"{p}fc",
                         transB=1),
    ]
    x = helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [batch, 3, size, size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, classes])
    return make(nodes, [x], [y], inits, name=name)


def cnn_with_cpu_tail() -> onnx.ModelProto:
    """small_cnn + a Sin: one Mrvl stage, then one CPU stage."""
    model = small_cnn()
    model.graph.node[-1].output[0] = "logits"
    model.graph.node.append(helper.make_node("Sin", ["logits"], ["y"], name="sin"))
    return model


def save(model: onnx.ModelProto, path: os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(path))
    return path


# ---- files that are not ONNX at all ----------------------------------------------------------

def random_bytes_file(path: os.PathLike, size: int = 4096, seed: int = 0) -> Path:
    path = Path(path)
    path.write_bytes(_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes())
    return path


def text_file(path: os.PathLike) -> Path:
    path = Path(path)
    path.write_text("this is a text file, not an ONNX model\n" * 20)
    return path


def truncated_file(path: os.PathLike) -> Path:
    """A real model's protobuf cut in the middle of the weights."""
    path = Path(path)
    data = small_cnn(channels=16, size=16).SerializeToString()
    path.write_bytes(data[: len(data) // 2])
    return path


# ---- ONNX that is not a valid graph ----------------------------------------------------------

def empty_graph() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])
    return make([], [x], [x], name="empty")


def checker_failure() -> onnx.ModelProto:
    """A Conv without its required weight input: the ONNX checker refuses it."""
    model = small_cnn()
    conv = model.graph.node[0]
    del conv.input[1:]
    return model


def cycle() -> onnx.ModelProto:
    """relu_a reads relu_b's output and relu_b reads relu_a's."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="add_a"),
             helper.make_node("Relu", ["a"], ["b"], name="relu_b"),
             helper.make_node("Relu", ["b"], ["y"], name="relu_out")]
    return make(nodes, [x], [y], name="cycle")


def missing_initializer() -> onnx.ModelProto:
    model = small_cnn()
    keep = [t for t in model.graph.initializer if t.name != "fc_w"]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    return model


def unknown_domain() -> onnx.ModelProto:
    model = small_cnn()
    node = helper.make_node("Frobnicate", ["y0"], ["y"], name="frob", domain="com.example")
    model.graph.node[-1].output[0] = "y0"
    model.graph.node.append(node)
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    return model


def dynamic_batch(input_name: str = "x") -> onnx.ModelProto:
    return small_cnn(batch="N", input_name=input_name, name="dynamic")


def with_opset(opset: int) -> onnx.ModelProto:
    """A one-Relu model declaring the given default-domain opset (checker not run here)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    return make([helper.make_node("Relu", ["x"], ["y"], name="relu")], [x], [y], opset=opset,
                name=f"opset{opset}")


def duplicate_tensor() -> onnx.ModelProto:
    """Two nodes both produce tensor 'r'."""
    model = small_cnn()
    dup = helper.make_node("Relu", ["c"], ["r"], name="relu_again")
    model.graph.node.insert(2, dup)
    return model


# ---- external data ---------------------------------------------------------------------------

def save_external(model: onnx.ModelProto, path: os.PathLike, *, location: Optional[str] = None,
                  threshold: int = 16) -> Path:
    """Save with every tensor above ``threshold`` bytes in one side file next to the model."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location or f"{path.name}.data", size_threshold=threshold)
    return path


def write_huge_model(path: os.PathLike, total_bytes: int = (2 << 30) + (64 << 20),
                     classes: int = 4) -> Path:
    """Write a CNN whose weights exceed 2 GiB (the protobuf limit) as ``path`` + ``path.data``.

    A tiny conv, then a chain of 8192x8192 FCs (256 MiB each, 0.5 * identity) and a small head.
    The weights are streamed to the side file, so building it needs little memory.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    location = f"{path.name}.data"
    channels, size = 8, 64
    features = channels * (size // 2) ** 2                 # 8192
    n_fc = max(1, -(-total_bytes // (features * features * 4)))
    rng = _rng(0)
    inits = [_init("w", rng.standard_normal((channels, 3, 3, 3)) * 0.2),
             _init("b", np.zeros(channels))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["m"], name="pool", kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("Flatten", ["m"], ["h0"], name="flatten", axis=1)]
    with open(path.parent / location, "wb") as data:
        for k in range(n_fc):
            inits.append(_external(f"fc{k}_w", (features, features), data, location,
                                   _scaled_identity_rows(features, 0.5)))
            inits.append(_init(f"fc{k}_b", np.zeros(features)))
            nodes.append(helper.make_node("Gemm", [f"h{k}", f"fc{k}_w", f"fc{k}_b"],
                                          [f"h{k + 1}"], name=f"fc{k}", transB=1))
    inits.append(_init("head_w", rng.standard_normal((classes, features)) * 0.01))
    nodes.append(helper.make_node("Gemm", [f"h{n_fc}", "head_w"], ["y"], name="head", transB=1))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, classes])
    onnx.save_model(make(nodes, [x], [y], inits, name="huge"), str(path))
    return path


def _scaled_identity_rows(n: int, scale: float, chunk: int = 512):
    for first in range(0, n, chunk):
        block = np.zeros((min(chunk, n - first), n), np.float32)
        block[np.arange(block.shape[0]), first + np.arange(block.shape[0])] = scale
        yield block


def _external(name: str, dims: Sequence[int], data, location: str, blocks) -> onnx.TensorProto:
    """A float32 initializer whose bytes (yielded block by block) are appended to ``data``."""
    offset = data.tell()
    for block in blocks:
        data.write(np.ascontiguousarray(block, dtype="<f4").tobytes())
    tensor = onnx.TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(dims))
    for key, value in (("location", location), ("offset", offset),
                       ("length", data.tell() - offset)):
        tensor.external_data.add(key=key, value=str(value))
    tensor.data_location = TensorProto.EXTERNAL
    return tensor


# ---- odd names -------------------------------------------------------------------------------

ODD_NODE_NAMES = ["../../escape", "/abs/path", "with space ü", "日本語", "back\\slash"]
ODD_TENSOR_NAMES = {"c": "../c/../../t", "r": ".hidden", "m": "..", "f": "ünïcødé ñ:colon",
                    "w": "weights/../../w", "b": "C:\\bias with space"}


def odd_names() -> onnx.ModelProto:
    """small_cnn with node and tensor names holding separators, spaces and non-ASCII letters."""
    model = small_cnn()
    renames = ODD_TENSOR_NAMES
    for node, new in zip(model.graph.node, ODD_NODE_NAMES):
        node.name = new
        node.input[:] = [renames.get(n, n) for n in node.input]
        node.output[:] = [renames.get(n, n) for n in node.output]
    for tensor in model.graph.initializer:
        tensor.name = renames.get(tensor.name, tensor.name)
    return model


def bad_model_files(directory: os.PathLike) -> List[Path]:
    """A few broken model files of different kinds, for batch tests."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return [random_bytes_file(directory / "garbage.onnx"),
            save(cycle(), directory / "cyclic.onnx"),
            save(dynamic_batch(), directory / "dynamic.onnx")]
