"""Weights written as nodes turned into initializers before quantizing.

Why: quantize_static takes a tensor for a weight only if it is an initializer. Paddle's exporter
writes every weight, bias and BatchNormalization statistic as a ``Constant`` node, and other
exporters wrap a weight in an ``Identity`` or a ``Cast``; quantize_static then quantizes such a
weight as an activation (``Constant -> QuantizeLinear -> DequantizeLinear -> Conv``, its scale
calibrated on the samples like any activation), BatchNormalization is not folded
(``fold_bn.py`` folds constant statistics only), and the converter refuses every such Conv
(its weight is dequantized from a tensor computed at run time): the whole model stays on the
CPU. As initializers they are quantized as weights by Marvell's recipe (per-tensor symmetric,
``recipe.recipe()``) and only activations are calibrated.

onnxruntime's own ``quant_pre_process`` is not used: its default symbolic shape inference needs
sympy (not a dependency here), and its graph optimizer rewrites more than the weights: it fuses
Conv with BatchNormalization (which ``fold_bn.py`` does with a stated bound), splits a HardSwish
into an unnamed HardSigmoid and Mul, and fuses a MatMul and its Add into a Gemm named
``<MatMul>/MatMulAddFusion``, so the names ``--keep-fp16`` and the quantization analysis use
are gone.

Requires: a model with IR version 4 or later (below 4, initializers are graph inputs; such a
model is returned unchanged).

Ensures, on the main graph (subgraphs read the new initializers from the outer scope as
before):

- every ``Constant`` node holding a tensor (``value``, ``value_float(s)``, ``value_int(s)``) is
  an initializer of its output's name with the same bytes;
- every ``Identity`` of a constant is an initializer (a copy, under the Identity's output name);
- every ``Cast`` of a constant from one float type to another (float16, float, double) is an
  initializer holding the values numpy's cast gives, which round to nearest even as
  onnxruntime's Cast does;
- every ``Reshape``, ``Squeeze``, ``Unsqueeze`` and ``Transpose`` whose inputs are all constants
  is an initializer holding the same values moved (Paddle adds a Conv's bias as
  ``Add(conv, Reshape(Constant, Constant))``);
- a weight stored in int8 by hand and widened at run time, ``Mul(Cast(int8 constant), scale)``
  (optionally ``Sub`` of a zero point first; a PyTorch export of a weight-only int8 encoder
  writes every Linear so), is an initializer: a ``Cast`` of an 8-bit integer constant to any
  float type, or of a 16-bit one to float or double (every such integer is exact there), and a
  ``Mul`` or ``Sub`` of two float or double constants of one type (numpy broadcasts as ONNX
  does and rounds each IEEE product or difference once, as onnxruntime's kernels do). Without
  this the MatMul's weight is computed at run time, quantize_static calibrates it as an
  activation and the converter keeps every such MatMul in fp16 (0% of the MACs in int8);
- chains of these (``Constant -> Identity -> Cast``) are followed; a constant is an initializer
  that is not also a graph input (one that is can be fed at run time) or a tensor this step
  made;
- a node whose output is a graph output, a Constant holding strings or a sparse tensor, and a
  node numpy cannot evaluate (a Reshape to a wrong element count) stay as they are;
- an initializer only the turned nodes read, or one made and read by none, is dropped; every
  other node, its name and every tensor name are unchanged, so a weight read by two layers
  stays one initializer read by both (quantize_static quantizes it once, per tensor, and both
  layers read its one DequantizeLinear).

Exact: every tensor holds the bits it held (each new initializer is, bit for bit, what
onnxruntime computes for that tensor in the original model), so the model computes what it did.
On onnxruntime at its default optimization level the outputs are bit-equal (it folds these
nodes into initializers itself); run op by op they may differ in the last bits where a kernel
treats an initializer operand otherwise (a MatMul prepacks a constant B and sums in its own
order). ``tests/quantize/test_weights.py`` checks both facts.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Callable, Dict, List, Mapping, Optional, Set

import numpy as np
import onnx
from onnx import numpy_helper

_FLOATS = frozenset({onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT,
                     onnx.TensorProto.DOUBLE})
_DEFAULT_DOMAINS = ("", "ai.onnx")


def weights_as_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose constants written as nodes are initializers (module
    docstring); ``model`` itself if there is nothing to turn."""
    if model.ir_version < 4:
        return model
    graph = model.graph
    fed = {i.name for i in graph.input}
    constants: Dict[str, onnx.TensorProto] = {t.name: t for t in graph.initializer
                                              if t.name not in fed}
    outputs = {o.name for o in graph.output}
    opset = next((o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS), 1)
    made: List[onnx.TensorProto] = []
    kept: List[onnx.NodeProto] = []
    read: Set[str] = set()  # what the nodes turned read
    for node in graph.node:
        tensor = None if set(node.output) & outputs else _constant_output(node, constants,
                                                                           opset)
        if tensor is None:
            kept.append(node)
            continue
        constants[tensor.name] = tensor
        made.append(tensor)
        read.update(node.input)
    if not made:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(kept)
    # an Identity's source read by nothing else would be a second, unused copy of the weight
    unused = (read | {t.name for t in made}) - _referenced(out.graph)
    tensors = [t for t in [*graph.initializer, *made] if t.name not in unused]
    del out.graph.initializer[:]
    out.graph.initializer.extend(tensors)
    return out


def _referenced(graph: onnx.GraphProto) -> Set[str]:
    """Every tensor name a node of ``graph`` or of its subgraphs reads, and its outputs."""
    names = {o.name for o in graph.output}
    for node in graph.node:
        names.update(node.input)
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                names |= _referenced(sub)
    return names


def _constant_output(node: onnx.NodeProto, constants: Dict[str, onnx.TensorProto],
                     opset: int) -> Optional[onnx.TensorProto]:
    """The initializer standing for ``node``'s one output, or None if it is not a constant."""
    if node.domain not in _DEFAULT_DOMAINS or len(node.output) != 1 or not node.output[0]:
        return None
    name = node.output[0]
    if node.op_type == "Constant":
        return _constant_value(node, name)
    if node.op_type not in _TURNED or not node.input or any(
            i not in constants or constants[i].data_location == onnx.TensorProto.EXTERNAL
            for i in node.input if i):
        return None
    if node.op_type == "Identity":
        tensor = onnx.TensorProto()
        tensor.CopyFrom(constants[node.input[0]])
        tensor.name = name
        return tensor
    try:
        if node.op_type == "Cast":
            return _cast(constants[node.input[0]], node, name)
        inputs = [numpy_helper.to_array(constants[i]) if i else None for i in node.input]
        moved = _MOVES[node.op_type](inputs, _attributes(node), opset)
    except (ValueError, IndexError, KeyError, TypeError):
        return None  # a malformed node stays, for onnxruntime to name in its own refusal
    return None if moved is None else numpy_helper.from_array(moved, name)


def _attributes(node: onnx.NodeProto) -> Dict[str, object]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _axes(inputs: List[Optional[np.ndarray]], attrs: Dict[str, object], opset: int
          ) -> Optional[List[int]]:
    """Squeeze's and Unsqueeze's axes: an input from opset 13 on, an attribute before."""
    if opset >= 13:
        given = inputs[1] if len(inputs) > 1 else None
        return None if given is None else [int(a) for a in given.reshape(-1)]
    return [int(a) for a in attrs["axes"]] if "axes" in attrs else None


def _reshape(inputs: List[Optional[np.ndarray]], attrs: Dict[str, object], opset: int
             ) -> Optional[np.ndarray]:
    data, shape = inputs[0], inputs[1] if len(inputs) > 1 else None
    if shape is None:
        return None
    keep_zero = bool(attrs.get("allowzero", 0))
    dims = [data.shape[i] if d == 0 and not keep_zero else int(d)
            for i, d in enumerate(shape.reshape(-1))]
    return data.reshape(dims)


def _unsqueeze(inputs: List[Optional[np.ndarray]], attrs: Dict[str, object], opset: int
             ) -> Optional[np.ndarray]:
    axes = _axes(inputs, attrs, opset)
    if axes is None:
        return None
    rank = inputs[0].ndim + len(axes)
    return np.expand_dims(inputs[0], tuple(sorted(a + rank if a < 0 else a for a in axes)))


def _squeeze(inputs: List[Optional[np.ndarray]], attrs: Dict[str, object], opset: int
             ) -> Optional[np.ndarray]:
    axes = _axes(inputs, attrs, opset)
    data = inputs[0]
    if axes is None:
        return np.squeeze(data)
    return np.squeeze(data, tuple(axes))  # numpy refuses an axis out of range, as ONNX does


def _transpose(inputs: List[Optional[np.ndarray]], attrs: Dict[str, object], opset: int
             ) -> Optional[np.ndarray]:
    perm = attrs.get("perm")
    return np.transpose(inputs[0], None if perm is None else [int(p) for p in perm])


def _scaled(inputs: List[Optional[np.ndarray]], attrs: Dict[str, object], opset: int,
            combine: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Optional[np.ndarray]:
    """A dequantizing step of a weight (``combine``: multiply or subtract) on two constants of
    one float type; None for another type, where numpy's arithmetic may round otherwise."""
    if len(inputs) != 2 or any(v is None or v.dtype not in _ARITHMETIC_TYPES for v in inputs) \
            or inputs[0].dtype != inputs[1].dtype:
        return None
    return combine(inputs[0], inputs[1]).astype(inputs[0].dtype)


# Data movement of a constant: every value kept, only its place changed
_MOVES: Mapping[str, Callable[..., Optional[np.ndarray]]] = MappingProxyType({
    "Reshape": _reshape, "Unsqueeze": _unsqueeze, "Squeeze": _squeeze, "Transpose": _transpose,
    # not moves: a weight's dequantizing scale and zero point, each rounded once (docstring)
    "Mul": lambda i, a, o: _scaled(i, a, o, np.multiply),
    "Sub": lambda i, a, o: _scaled(i, a, o, np.subtract)})
_TURNED = frozenset({"Identity", "Cast", *_MOVES})
_ARITHMETIC_TYPES = (np.dtype(np.float32), np.dtype(np.float64))
# integer types whose every value a float type holds exactly: 8 bits in float16 on, 16 in float
_EXACT_INTS = MappingProxyType({
    onnx.TensorProto.INT8: _FLOATS, onnx.TensorProto.UINT8: _FLOATS,
    onnx.TensorProto.INT16: frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE}),
    onnx.TensorProto.UINT16: frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE})})


def _constant_value(node: onnx.NodeProto, name: str) -> Optional[onnx.TensorProto]:
    if len(node.attribute) != 1:
        return None
    attr = node.attribute[0]
    if attr.name == "value":
        tensor = onnx.TensorProto()
        tensor.CopyFrom(attr.t)
        tensor.name = name
        return tensor
    values = {"value_float": lambda: np.array(attr.f, np.float32),
              "value_floats": lambda: np.array(attr.floats, np.float32),
              "value_int": lambda: np.array(attr.i, np.int64),
              "value_ints": lambda: np.array(attr.ints, np.int64)}
    if attr.name not in values:  # strings and sparse tensors are no weights
        return None
    return numpy_helper.from_array(values[attr.name](), name)


def _cast(source: onnx.TensorProto, node: onnx.NodeProto, name: str
          ) -> Optional[onnx.TensorProto]:
    to = next((a.i for a in node.attribute if a.name == "to"), None)
    exact = to in _FLOATS and (source.data_type in _FLOATS
                               or to in _EXACT_INTS.get(source.data_type, ()))
    if not exact:
        return None
    dtype = onnx.helper.tensor_dtype_to_np_dtype(to)
    return numpy_helper.from_array(numpy_helper.to_array(source).astype(dtype), name)


__all__ = ["weights_as_initializers"]
