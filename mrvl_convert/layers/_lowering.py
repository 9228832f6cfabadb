"""Helpers every layer module's lowering shares: building a ``Layer`` from a composite."""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from mrvl_convert.core.graph import static_shape
from mrvl_convert.ir.layout import NHWC, Layer, TensorLayout
from mrvl_convert.ir.match import Composite
from mrvl_convert.layers._kind import Activation

# The ONNX op a fused ``act`` step may be, and the activation_type it becomes.
_ACTIVATIONS = {"Relu": Activation.RELU, "Tanh": Activation.TANH, "Sigmoid": Activation.SIGMOID}


def activation(composite: Composite) -> Optional[Activation]:
    """The activation fused by the composite's optional ``act`` step, if it has one."""
    node = composite.binding.node("act")
    return None if node is None else _ACTIVATIONS[node.op]


def new_layer(composite: Composite, kind: str, inputs: Sequence[int],
              in_layouts: Sequence[TensorLayout], out_layout: TensorLayout,
              attrs: Dict[str, Any], consts: Sequence[Tuple[str, np.ndarray]] = ()) -> Layer:
    return Layer(kind=kind, rule=composite.rule.name,
                 source_nodes=[n.name for n in composite.nodes], inputs=list(inputs),
                 in_layouts=list(in_layouts), out_layout=out_layout, attrs=attrs,
                 consts=list(consts))


def spatial_out(composite: Composite) -> TensorLayout:
    """The composite's output as an NHWC tensor."""
    return TensorLayout(tuple(static_shape(composite.output)), NHWC, "NCHW")
