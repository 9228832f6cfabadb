"""Elementwise and data-movement layers: layout_transform, Sum2D, Concat, reshape family."""
from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np

from .gemm import NUMPY_GEMM, GemmEngine
from .kernel_base import Kernel, first_string, fp16_const
from .layerspec import LayerSpec
from .ufuncs import relu_inplace


class LayoutTransform(Kernel):
    """out = in.transpose([src.index(c) for c in dst]), e.g. NCHW -> NHWC."""

    exact = True

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        src, dst = spec.string("src_layout"), spec.string("dst_layout")
        issue = _layout_issue(src, dst)
        if issue:
            raise spec.error("attrs.src_layout", issue)
        in_shape = spec.input_shapes[0]
        if len(in_shape) != len(src):
            raise spec.error("attrs.src_layout", f"{src!r} does not fit input shape "
                                                 f"{list(in_shape)}")
        self.perm = tuple(src.index(ch) for ch in dst)
        spec.expect_shape(tuple(in_shape[p] for p in self.perm))

    def run(self, x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(x.transpose(self.perm))

    @classmethod
    def capability_issue(cls, attrs: Mapping[str, Any]) -> Optional[str]:
        return _layout_issue(first_string(attrs, "src_layout"), first_string(attrs, "dst_layout"))


def _layout_issue(src: str, dst: str) -> Optional[str]:
    if not src or sorted(src) != sorted(dst) or len(set(src)) != len(src):
        return f"src_layout {src!r} and dst_layout {dst!r} are not permutations of each other"
    return None


class Sum2D(Kernel):
    """Elementwise add of two same-shape activations, or of one activation and a constant
    (``input_const_name``, already in physical order, broadcastable); optional relu."""

    num_inputs = None

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        shapes = spec.input_shapes
        self.const = None
        if len(shapes) == 1:
            const = spec.const("input_const_name", consts)
            try:
                out = np.broadcast_shapes(shapes[0], const.shape)
            except ValueError:
                raise spec.error("attrs.input_const_name", f"constant shape {list(const.shape)}"
                                 f" does not broadcast with input {list(shapes[0])}") from None
            self.const = fp16_const(spec, "input_const_name", const)
        elif len(shapes) == 2:
            if shapes[0] != shapes[1]:
                raise spec.error("inputs", f"Sum2D inputs must have the same physical shape, "
                                           f"got {list(shapes[0])} and {list(shapes[1])}")
            if "input_const_name" in spec.attrs:
                raise spec.error("attrs.input_const_name", "given with two activation inputs")
            out = shapes[0]
        else:
            raise spec.error("inputs", f"expected 1 input (+ constant) or 2, got {len(shapes)}")
        spec.expect_shape(out)
        self.relu = spec.relu()

    def run(self, a: np.ndarray, b: Optional[np.ndarray] = None) -> np.ndarray:
        y = a + (self.const if b is None else b)
        if self.relu:
            relu_inplace(y)
        return y


class Concat(Kernel):
    """np.concatenate along the physical axis ``axis``."""

    num_inputs = None
    exact = True

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        shapes = spec.input_shapes
        rank = len(shapes[0])
        axis = spec.int1("axis")
        if not -rank <= axis < rank:
            raise spec.error("attrs.axis", f"{axis} is out of range for rank {rank}")
        self.axis = axis % rank
        for k, shape in enumerate(shapes):
            rest = [d for i, d in enumerate(shape) if i != self.axis]
            ref = [d for i, d in enumerate(shapes[0]) if i != self.axis]
            if len(shape) != rank or rest != ref:
                raise spec.error("inputs", f"input {k} shape {list(shape)} does not concatenate "
                                           f"with {list(shapes[0])} on axis {self.axis}")
        out = list(shapes[0])
        out[self.axis] = sum(s[self.axis] for s in shapes)
        spec.expect_shape(out)

    def run(self, *xs: np.ndarray) -> np.ndarray:
        return np.concatenate(xs, axis=self.axis)


class Reshape(Kernel):
    """reshape, nn.batch_flatten, squeeze: the physical input is already in the order the
    reshape needs (FORMATS.md), so this is a plain C-order reshape to ``shape``."""

    exact = True

    def __init__(self, spec: LayerSpec, consts: Mapping[str, np.ndarray],
                 gemm: GemmEngine = NUMPY_GEMM) -> None:
        super().__init__(spec, consts, gemm)
        in_shape = spec.input_shapes[0]
        if int(np.prod(in_shape)) != int(np.prod(spec.shape)):
            raise spec.error("shape", f"{list(spec.shape)} does not hold the "
                                      f"{int(np.prod(in_shape))} elements of input "
                                      f"{list(in_shape)}")
        self.out_shape = spec.shape

    def run(self, x: np.ndarray) -> np.ndarray:
        return x.reshape(self.out_shape)
