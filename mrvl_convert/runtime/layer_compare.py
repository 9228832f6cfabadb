"""Which tensor of the original model each Mrvl layer computes, and its output in that tensor's
element order: what ``compare(..., layers=True)`` needs to compare layer by layer.

A layer's tensor is the output of the last of its ``source_nodes`` in the model's node order
(the end of the fused chain), with the nodes named as the converter named them
(``load.name_nodes``). Its value is the layer's fp16 output in the simulator's physical layout:
4-D NHWC for most layers, which goes back to NCHW by one transpose. Reshape-family layers
(``reshape``, ``nn.batch_flatten``, ``squeeze``) reshape their NHWC input as it is (FORMATS.md),
so their element order is the model's only when the model itself transposed to NHWC first (a
Keras-style Transpose the converter absorbed); their output is put in the model's order by
replaying, on the NCHW form of their input, the Transposes that lead to the model's reshape.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, List, Mapping, Sequence, Tuple

import numpy as np
import onnx

from ..load import name_nodes
from .session import HybridSession, LayerOutput

RESHAPE_LAYERS = ("reshape", "nn.batch_flatten", "squeeze")


@dataclass(frozen=True)
class LayerPlan:
    """One Mrvl layer to compare: ``tensor`` is the original model's tensor it computes (empty
    if unknown); a non-empty ``skip`` says why it is not compared. ``perms`` are the
    Transposes the model applies between a reshape layer's NCHW input and its reshape."""

    stage: str
    layer: str
    layer_name: str
    shape: List[int]
    tensor: str = ""
    skip: str = ""
    perms: Tuple[Tuple[int, ...], ...] = ()

    @property
    def note(self) -> str:
        return f"Mrvl layer {self.layer} ({self.layer_name}, stage {self.stage})"


def layer_plans(session: HybridSession, proto: onnx.ModelProto,
                compared: set) -> List[LayerPlan]:
    """One plan per Mrvl layer with ONNX source nodes, in run order, leaving out layers whose
    tensor is already in ``compared`` (boundary tensors, outputs, an earlier layer's)."""
    named = onnx.ModelProto()
    named.CopyFrom(proto)
    name_nodes(named)
    nodes = list(named.graph.node)
    position = {node.name: k for k, node in enumerate(nodes)}
    producer = {out: node for node in nodes for out in node.output}
    seen = set(compared)
    plans = []
    for stage in session.stages:
        if stage.kind != "mrvl":
            continue
        for spec in stage.runner.layers:
            if not spec.source_nodes:
                continue  # a layout_transform the converter added: nothing to compare with
            plan = LayerPlan(stage.name, spec.name, spec.layer_name, list(spec.shape))
            missing = [n for n in spec.source_nodes if n not in position]
            if missing:
                plans.append(replace(plan, skip=f"source node {missing[0]!r} is not in the "
                                                f"original model"))
                continue
            order = sorted(position[n] for n in spec.source_nodes)
            tensor = nodes[order[-1]].output[0]
            if tensor in seen:
                continue
            seen.add(tensor)
            perms = _transposes_before(nodes[order[0]], producer) \
                if spec.layer_name in RESHAPE_LAYERS else ()
            plans.append(replace(plan, tensor=tensor, perms=perms))
    return plans


def _transposes_before(node: onnx.NodeProto,
                       producer: Mapping[str, onnx.NodeProto]) -> Tuple[Tuple[int, ...], ...]:
    """The perms of the Transpose chain that feeds ``node``, in the order they apply."""
    perms: List[Tuple[int, ...]] = []
    source = producer.get(node.input[0])
    while source is not None and source.op_type == "Transpose":
        perm = next((tuple(a.ints) for a in source.attribute if a.name == "perm"), None)
        if perm is None:
            break
        perms.insert(0, perm)
        source = producer.get(source.input[0])
    return tuple(perms)


def layer_values(plans: Sequence[LayerPlan],
                 trace: Sequence[LayerOutput]) -> Dict[str, np.ndarray]:
    """The traced layer outputs by their ONNX tensor, in that tensor's element order."""
    by_layer = {(t.stage, t.spec.name): t for t in trace}
    return {plan.tensor: np.ascontiguousarray(_model_order(plan, by_layer[(plan.stage,
                                                                           plan.layer)]))
            for plan in plans}


def _model_order(plan: LayerPlan, out: LayerOutput) -> np.ndarray:
    value, spec = out.value, out.spec
    if plan.layer_name in RESHAPE_LAYERS:
        source = spec.input_shapes[0]
        if len(source) != 4 or spec.string("data_layout", "NHWC") != "NHWC":
            return value
        # Undo the reshape, go back to the model's NCHW, replay its Transposes: the elements
        # in the order the model's reshape sees them (the caller reshapes to its shape).
        value = value.reshape(source).transpose(0, 3, 1, 2)
        for perm in plan.perms:
            value = value.transpose(perm)
        return value
    if value.ndim == 4 and spec.string("out_layout", "NHWC") == "NHWC":
        return value.transpose(0, 3, 1, 2)
    return value
