"""The builder the kernels write their ONNX form into (the graph engine, ``graph_engine.py``).

A kernel's ``to_onnx(builder, inputs)`` emits the nodes that compute what its ``run`` computes,
in the same physical layout (NHWC for 4-D activations), from tensor names to tensor names, before
the fp16 rounding: the engine appends the rounding (``Cast`` to float16 and back) after every
layer that is not ``exact``, as the per-layer simulator rounds after ``run``. Constants go in as
float32 initializers holding the fp16-rounded values the numpy kernel uses.

Layout-sensitive ONNX operators (Conv, pools) take NCHW: a kernel wraps them in a Transpose pair
(``to_nchw`` / ``to_nhwc``), and onnxruntime's transpose optimizer cancels the pairs between
consecutive layers at session creation (it pushes a Transpose through the Cast, ReduceSum and
elementwise nodes between them).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from mrvl_convert.kernels.fp16 import fp16_const
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.kernels.weight_store import WeightStore, point

NCHW_FROM_NHWC = (0, 3, 1, 2)
NHWC_FROM_NCHW = (0, 2, 3, 1)
# Above this many bytes a float32 constant is handed to onnxruntime as an external initializer
# sharing our array (as gemm.py does) instead of being copied into the serialized model.
_EXTERNAL_BYTES = 1024


class OnnxBuilder:
    """Collects the nodes and constants of one segment; names are unique within it."""

    def __init__(self, consts: Dict[str, np.ndarray]) -> None:
        self.consts = consts
        self.nodes: List[Any] = []
        self.initializers: List[Any] = []
        self.weights = WeightStore()  # the external initializers' arrays
        self._count = 0

    def fresh(self, hint: str = "t") -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def op(self, op_type: str, inputs: Sequence[str], **attrs: Any) -> str:
        """One node with one output; returns the output's name."""
        return self.ops(op_type, inputs, 1, **attrs)[0]

    def ops(self, op_type: str, inputs: Sequence[str], outputs: int, **attrs: Any) -> List[str]:
        from onnx import helper

        names = [self.fresh(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names,
                                           name=self.fresh("n"), **attrs))
        return names

    # ------------------------------------------------------------- constants
    def constant(self, value: np.ndarray, hint: str = "c") -> str:
        """An initializer holding ``value`` as it is (float32 or int64)."""
        from onnx import TensorProto, numpy_helper

        name = self.fresh(hint)
        value = np.ascontiguousarray(value)  # external data is read as C-ordered bytes
        if value.dtype == np.float32 and value.nbytes > _EXTERNAL_BYTES:
            tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=value.shape,
                                 data_location=TensorProto.EXTERNAL)
            point(tensor, f"{name}.bin", 0)
            self.weights.add(name, value)
        else:
            tensor = numpy_helper.from_array(value, name)
        self.initializers.append(tensor)
        return name

    def reader(self, name: str) -> Callable[[], np.ndarray]:
        """How to get constant ``name`` back later (for a kernel's numpy form) without holding
        it: the segment may spill its weights to a file (``weight_store.py``)."""
        if name in self.weights:
            return self.weights.reader(name)
        from onnx import numpy_helper

        tensor = next(t for t in self.initializers if t.name == name)
        return lambda: numpy_helper.to_array(tensor)

    def fp16_weight(self, spec: LayerSpec, key: str, perm: Optional[Sequence[int]] = None,
                    ) -> str:
        """The constant named by attribute ``key``, rounded to float16 as the kernels round it
        (``fp16_const``, with its range error), its axes permuted by ``perm`` if given."""
        value = fp16_const(spec, key, spec.const(key, self.consts))
        return self.constant(value if perm is None else value.transpose(perm), "w")

    def float_constant(self, value: np.ndarray) -> str:
        return self.constant(np.asarray(value, dtype=np.float32), "k")

    def shape(self, dims: Sequence[int]) -> str:
        return self.constant(np.asarray(dims, dtype=np.int64), "shape")

    # ---------------------------------------------------------------- layout
    def to_nchw(self, x: str) -> str:
        return self.op("Transpose", [x], perm=list(NCHW_FROM_NHWC))

    def to_nhwc(self, x: str) -> str:
        return self.op("Transpose", [x], perm=list(NHWC_FROM_NCHW))

    def activation(self, x: str, activation: Any) -> str:
        """A fused ``layers.Activation`` (or None) applied to ``x``, as ``activate_inplace``."""
        if activation is None:
            return x
        op = {"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid"}[activation.value]
        return self.op(op, [x])
