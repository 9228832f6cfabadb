"""onnxruntime's dynamic int8 linear layers (``quantize_dynamic``) as float MatMuls, for
``foreign_int8.py``: ``DynamicQuantizeLinear(x) -> MatMulInteger(xq, Wq, xzp, wzp) -> Cast ->
Mul(x_scale * w_scale)`` becomes ``MatMul(x, (Wq - wzp) * w_scale)``. The device's int8 takes
scales fixed at conversion; a scale computed per input at run time has no carrier, so these
layers run in fp16 (whatever ``--foreign-int8`` says), and no longer on the CPU as
MatMulInteger, which no Marvell layer takes.

Contract.
  Requires: a ``QdqGraph``; a chain as above whose weight, weight zero point and weight scale
  are constants (per tensor or per output column), each node read only by the next.
  Ensures: the last Mul computes the float MatMul under its own output name; the rest of the
  chain is left unread (``QdqGraph.commit`` drops it).
  Bound: not exact against the given model: its per-input uint8 quantization of ``x`` (half a
  step of its run-time scale per element) is gone; the weights are its dequantized ones,
  bit for bit. What that costs is in the measured cost.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import onnx

from mrvl_convert.frontend.qdq_graph import QdqGraph


def dynamic_matmuls(graph: QdqGraph) -> int:
    """How many MatMulInteger chains ``float_matmuls`` would rewrite."""
    return sum(_chain(graph, n) is not None for n in graph.g.node if n.op_type == "MatMulInteger")


def float_matmuls(graph: QdqGraph) -> int:
    """Rewrite every such chain (module docstring); returns how many."""
    done = 0
    for node in list(graph.g.node):
        found = _chain(graph, node) if node.op_type == "MatMulInteger" else None
        if found is None:
            continue
        x, weight, output_mul = found
        name = graph.add_const(f"{node.name}_dequantized_weight", weight)
        output_mul.op_type = "MatMul"
        del output_mul.input[:]
        output_mul.input.extend([x, name])
        del output_mul.attribute[:]
        done += 1
    return done


def only_reader(graph: QdqGraph, name: str, op: str) -> Optional[onnx.NodeProto]:
    """The one node reading ``name`` when it is an ``op``, else None."""
    readers = graph.readers.get(name, [])
    return readers[0] if len(readers) == 1 and readers[0].op_type == op else None


def scaled_output(graph: QdqGraph, integer: onnx.NodeProto, quantize: onnx.NodeProto,
                  after: Optional[onnx.NodeProto] = None
                  ) -> Optional[Tuple[onnx.NodeProto, np.ndarray]]:
    """(the Mul by ``x_scale * w_scale``, the constant ``w_scale``) after ``integer``'s Cast
    (``after``: an integer node between them, e.g. a bias Add), or None."""
    cast = only_reader(graph, (after or integer).output[0], "Cast")
    output_mul = only_reader(graph, cast.output[0], "Mul") if cast is not None else None
    if output_mul is None:
        return None
    other = [t for t in output_mul.input if t != cast.output[0]]
    scales = graph.producer.get(other[0]) if len(other) == 1 else None
    w_scale = weight_scale(graph, scales, quantize)
    return None if w_scale is None else (output_mul, w_scale)


def weight_scale(graph: QdqGraph, scales: Optional[onnx.NodeProto],
                 quantize: onnx.NodeProto) -> Optional[np.ndarray]:
    """The constant factor of ``scales`` = Mul(the run-time x_scale, w_scale), or None."""
    if scales is None or scales.op_type != "Mul" or quantize.output[1] not in scales.input:
        return None
    w_scale = [graph.const(t) for t in scales.input if t != quantize.output[1]]
    return w_scale[0] if len(w_scale) == 1 else None


def _chain(graph: QdqGraph, matmul: onnx.NodeProto
           ) -> Optional[Tuple[str, np.ndarray, onnx.NodeProto]]:
    """(x, the float weight, the output Mul) of a dynamic int8 MatMul chain, or None."""
    quantize = graph.producer.get(matmul.input[0])
    weight = graph.const(matmul.input[1])
    if quantize is None or quantize.op_type != "DynamicQuantizeLinear" or weight is None \
            or matmul.input[2:3] != quantize.output[2:3]:  # x's zero point: the run-time one
        return None
    zero = graph.const(matmul.input[3]) if len(matmul.input) > 3 and matmul.input[3] else 0
    found = scaled_output(graph, matmul, quantize)
    if found is None or zero is None:
        return None
    output_mul, w_scale = found
    wide = weight.astype(np.int64) - np.asarray(zero).astype(np.int64)
    return quantize.input[0], (wide.astype(np.float32) * w_scale.astype(np.float32)), output_mul
