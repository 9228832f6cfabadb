"""ONNX forms, for the graph engine, of the kernels whose layer modules give none themselves.

Why: in a transformer every LayerNorm (ReduceMean, Power, Rsqrt) and every attention product
(BatchMatmul) used to run in numpy, cutting a block into five or six graph-engine segments; the
numpy step, the segment calls and the value hand-overs between them were most of the hybrid's
time on ViT- and BERT-sized models. With these forms such a model is one segment.

Each form computes what the kernel's ``run`` computes, in the same layout, before the fp16
rounding the engine appends (``onnx_form.py``'s contract):

- ReduceMean: ``np.mean(x, axis, dtype=float32)`` is a float32 sum divided by the count;
  ``ReduceMean`` sums in its own order (and may scale by the reciprocal count): the same
  float16 value or its neighbour, as for every summing layer;
- Power: ``Pow(x, exponent)`` with the exponent the kernel's float32 scalar (onnxruntime and
  numpy both square exactly for 2, the LayerNorm's exponent);
- Rsqrt: ``Reciprocal(Sqrt(x))``, each correctly rounded in both libraries: identical;
- BatchMatmul: ``MatMul``, whose broadcasting of the leading axes is numpy's ``matmul``'s; a
  constant operand is the kernel's fp16-rounded one.

A form is looked up by the kernel's exact class, so a subclass with another ``run`` (an int8
kernel) never takes it, as ``graph_engine.has_onnx_form`` rules for forms on the classes.

Range checks (``graph_engine.range_checks``): these kernels' own ``passes_nonfinite`` is the
safe False, which left every LayerNorm input and every attention operand with a ``ReduceSum``
check of its own. ``passes_nonfinite`` here says when an inf or NaN in an input always leaves
one in the output, for both the numpy kernel and its form:

- ReduceMean: every input value is a term of some output's sum (inf + -inf is NaN);
- BatchMatmul: every value of either operand multiplies a whole row or column of the other into
  a sum (inf * 0 is NaN), and the shared axis K is never empty;
- Power with a positive exponent: inf ** e is inf, NaN ** e NaN (with e <= 0, inf ** e is 0 or
  1). Rsqrt maps inf to 0: it keeps the default.

``finite_on_finite`` names the layers that cannot overflow on a finite input: whenever their
output holds inf or NaN, so does their input, and a check on the input's side finds it. An add
of a constant of magnitude at most 8 (a LayerNorm's epsilon, a hard-swish's 3, a GELU's 1): a
float16 value is at most 65504, the sum then at most 65512, below 65520 where rounding to
float16 overflows; a product with a constant of magnitude at most 1 (a hard-swish's 1/6, a
GELU's 0.5, attention's scale): never larger than its input. A fused Relu, Tanh or Sigmoid
makes no inf either. A mean (ReduceMean, GlobalAvgpool2D) of float16 values is at most their
largest magnitude times (1 + a few float32 roundings), far below 65520, in any summation
order.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable, List, Mapping, Optional, Sequence

import numpy as np

from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.layers.batch_matmul import BatchMatmulKernel
from mrvl_convert.layers.mul2d import Mul2DKernel
from mrvl_convert.layers.pool import GlobalAvgpool2DKernel
from mrvl_convert.layers.power import PowerKernel
from mrvl_convert.layers.reduce import ReduceMeanKernel
from mrvl_convert.layers.rsqrt import RsqrtKernel
from mrvl_convert.layers.sum2d import Sum2DKernel

Form = Callable[[Any, OnnxBuilder, Sequence[str]], Optional[List[str]]]


def _reduce_mean(kernel: ReduceMeanKernel, b: OnnxBuilder, inputs: Sequence[str]) -> List[str]:
    return [b.op("ReduceMean", [inputs[0]], axes=[kernel.axis], keepdims=int(kernel.keep))]


def _power(kernel: PowerKernel, b: OnnxBuilder, inputs: Sequence[str]) -> List[str]:
    return [b.op("Pow", [inputs[0], b.float_constant(kernel.exponent)])]


def _rsqrt(kernel: RsqrtKernel, b: OnnxBuilder, inputs: Sequence[str]) -> List[str]:
    return [b.op("Reciprocal", [b.op("Sqrt", [inputs[0]])])]


def _batch_matmul(kernel: BatchMatmulKernel, b: OnnxBuilder, inputs: Sequence[str]
                  ) -> List[str]:
    other = inputs[1] if kernel.const is None else b.constant(kernel.const, "w")
    return [b.op("MatMul", [inputs[0], other])]


FORMS: Mapping[type, Form] = MappingProxyType({
    ReduceMeanKernel: _reduce_mean,
    PowerKernel: _power,
    RsqrtKernel: _rsqrt,
    BatchMatmulKernel: _batch_matmul,
})


def _every_input(kernel: Any, index: int) -> bool:
    return True


def _positive_exponent(kernel: PowerKernel, index: int) -> bool:
    return bool(kernel.exponent > 0)


PASSES_NONFINITE: Mapping[type, Callable[[Any, int], bool]] = MappingProxyType({
    ReduceMeanKernel: _every_input,
    BatchMatmulKernel: _every_input,
    PowerKernel: _positive_exponent,
})


def passes_nonfinite(kernel: Any, index: int) -> bool:
    """``kernel.passes_nonfinite(index)``, or this module's rule for its exact class."""
    rule = PASSES_NONFINITE.get(type(kernel))
    return kernel.passes_nonfinite(index) if rule is None else rule(kernel, index)


# Constant operands within these bounds keep a finite float16 input's result finite.
ADD_BOUND, MUL_BOUND = 8.0, 1.0


def finite_on_finite(kernel: Any) -> bool:
    """Whether ``kernel`` (a mean, or a Sum2D or Mul2D of one activation and a constant) gives
    a finite output whenever its input is finite, after rounding to float16."""
    if type(kernel) in (ReduceMeanKernel, GlobalAvgpool2DKernel):
        return True
    const = getattr(kernel, "const", None)
    if const is None or type(kernel) not in (Sum2DKernel, Mul2DKernel):
        return False
    bound = ADD_BOUND if type(kernel) is Sum2DKernel else MUL_BOUND
    return bool(np.all(np.abs(const) <= bound))


def runtime_form(kernel_class: type) -> Optional[Form]:
    """The form given here for exactly this kernel class, or None."""
    return FORMS.get(kernel_class)
