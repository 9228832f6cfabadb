"""Which tensor of the original model each Mrvl layer computes, and its output in that tensor's
element order: what ``compare(..., layers=True)`` needs to compare layer by layer.

A layer's tensor is the output of the last of its ``source_nodes`` in the model's node order
(the end of the fused chain), with the nodes named as the converter named them
(``load.name_nodes``). Its value is the layer's fp16 output in the simulator's physical layout:
4-D NHWC for most layers, which goes back to NCHW by one transpose; a token tensor (and any
tensor an elementwise layer keeps in the order it already has) lies in the model's order. Which
of the two a layer's output is: the one whose shape is the model's, else its physical letters. Reshape-family layers
(``reshape``, ``nn.batch_flatten``, ``squeeze``) reshape their input as it is, NHWC or NCHW
(FORMATS.md), and a Transpose in front of the model's reshape (Keras style) is absorbed by the
converter; so their output is put in the model's order by replaying, on the NCHW form of their
input, the absorbed Transposes that lead to the model's reshape.

A batchless or frame-lifted model (``batchless_lift``, ``sequence_lift``: its ``[H, W, C]`` or
``[T, F]`` tensors computed as ``[1, H, W, C]``, ``[1, T, F]``) has tensors that are a layer's
elements with unit axes fewer or more: of the orders a layer's output (or a reshape layer's
input) can be in, the one whose shape is the model's tensor's, else the only one whose shape
is, unit axes aside, is taken, and given the model's shape (unit axes move no element). Only
where both orders fit alike (every non-unit dim equal) do the physical letters decide.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import onnx

from mrvl_convert.layers import CATALOGUE
from mrvl_convert.frontend.load import name_nodes
from mrvl_convert.runtime.session import HybridSession, LayerOutput

# Elementwise nodes of a QDQ model, seen through on the way back to an absorbed Transpose.
_ELEMENTWISE_QDQ = ("QuantizeLinear", "DequantizeLinear")
# Layers that only move bytes (the catalogue's reshape-like kinds).
RESHAPE_LAYERS = frozenset(k.name for k in CATALOGUE.values() if k.reshape_like)


@dataclass(frozen=True)
class LayerPlan:
    """One Mrvl layer to compare: ``tensor`` is the original model's tensor it computes (empty
    if unknown); a non-empty ``skip`` says why it is not compared. ``perms`` are the
    Transposes the model applies between the layer's NCHW input and its first source node (a
    reshape, or an elementwise node such as a QuantizeLinear: the converter absorbed them);
    ``source`` the model's shape of the tensor a reshape layer reads (empty if unknown)."""

    stage: str
    layer: str
    layer_name: str
    shape: List[int]
    tensor: str = ""
    skip: str = ""
    perms: Tuple[Tuple[int, ...], ...] = ()
    source: Tuple[int, ...] = ()

    @property
    def note(self) -> str:
        return f"Mrvl layer {self.layer} ({self.layer_name}, stage {self.stage})"


def named_copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` with its nodes named as the converter names them."""
    named = onnx.ModelProto()
    named.CopyFrom(proto)
    name_nodes(named)
    return named


def layer_plans(session: HybridSession, form: onnx.ModelProto,
                compared: set) -> List[LayerPlan]:
    """One plan per Mrvl layer with ONNX source nodes, in run order, leaving out layers whose
    tensor is already in ``compared`` (boundary tensors, outputs, an earlier layer's).
    ``form``: the model as the converter rewrote it (``float_form.mapped_form``), whose nodes
    are looked up, so a layer of a node canonicalization added, or of a node whose value a fold
    changed, maps to its tensor."""
    nodes = list(form.graph.node)
    position = {node.name: k for k, node in enumerate(nodes)}
    producer = {out: node for node in nodes for out in node.output}
    shapes = static_shapes(form)
    seen = set(compared)
    plans = []
    for stage in session.stages:
        if stage.kind != "mrvl":
            continue
        runs = getattr(stage.runner, "runs", 1)  # a batch run in chunks: the traces hold all
        for spec in stage.runner.layers:
            if not spec.source_nodes:
                continue  # a layout_transform the converter added: nothing to compare with
            shape = list(spec.shape)
            plan = LayerPlan(stage.name, spec.name, spec.layer_name,
                             [shape[0] * runs] + shape[1:] if shape else shape)
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
            first = nodes[order[0]]
            plan = replace(plan, perms=_transposes_before(first, producer,
                                                          {t.name for t in stage.inputs}))
            if spec.layer_name in RESHAPE_LAYERS:
                plan = replace(plan, source=shapes.get(first.input[0], ()))
            plans.append(replace(plan, tensor=tensor))
    return plans


def static_shapes(proto: onnx.ModelProto) -> Dict[str, Tuple[int, ...]]:
    """Each tensor's static shape where ``proto`` records one (the rewritten form does)."""
    shapes = {}
    graph = proto.graph
    for info in list(graph.input) + list(graph.value_info) + list(graph.output):
        dims = info.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes[info.name] = tuple(int(d.dim_value) for d in dims)
    return shapes


def unit_free(shape: Sequence[int]) -> Tuple[int, ...]:
    """A shape without its unit axes: two shapes equal so hold the same elements in one order."""
    return tuple(int(d) for d in shape if d != 1)


def onto(value: np.ndarray, shape: Optional[Sequence[int]]) -> np.ndarray:
    """``value`` given ``shape`` where the two differ only in unit axes, else as it is."""
    if shape is None or tuple(value.shape) == tuple(shape):
        return value
    return value.reshape(shape) if unit_free(value.shape) == unit_free(shape) else value


def _only_fit(orders: Sequence[np.ndarray], shape: Optional[Sequence[int]]
              ) -> Optional[np.ndarray]:
    """Of ``orders`` (one layer value's candidate element orders), the one whose shape is
    ``shape``, else the only one that is unit axes aside (given ``shape``); None if none or
    both do."""
    if not shape:
        return None
    exact = [v for v in orders if tuple(v.shape) == tuple(shape)]
    if exact:
        return exact[0] if len(exact) == 1 else None
    loose = [v for v in orders if unit_free(v.shape) == unit_free(shape)]
    return loose[0].reshape(shape) if len(loose) == 1 else None


def _transposes_before(node: onnx.NodeProto, producer: Mapping[str, onnx.NodeProto],
                       stage_inputs: set) -> Tuple[Tuple[int, ...], ...]:
    """The perms of the Transposes the converter absorbed in front of ``node``, in the order
    they apply: the chain of Transposes feeding it, up to a stage input (a Transpose before
    that ran on CPU, and its output is what the stage gets)."""
    perms: List[Tuple[int, ...]] = []
    tensor = node.input[0]
    while tensor not in stage_inputs:
        source = producer.get(tensor)
        if source is not None and source.op_type in _ELEMENTWISE_QDQ:
            tensor = source.input[0]  # an int8 region's edges keep the layout
            continue
        if source is None or source.op_type != "Transpose":
            break
        perm = next((tuple(a.ints) for a in source.attribute if a.name == "perm"), None)
        if perm is None:
            break
        perms.insert(0, perm)
        tensor = source.input[0]
    return tuple(perms)


def layer_values(plans: Sequence[LayerPlan], trace: Sequence[LayerOutput],
                 shapes: Mapping[str, Sequence[int]]) -> Dict[str, np.ndarray]:
    """The traced layer outputs by their ONNX tensor, in that tensor's element order
    (``shapes``: the model's shape of each tensor)."""
    by_layer = {(t.stage, t.spec.name): t for t in trace}
    return {plan.tensor: np.ascontiguousarray(
        _model_order(plan, by_layer[(plan.stage, plan.layer)], shapes.get(plan.tensor)))
        for plan in plans}


def _physical_letters(spec) -> str:
    """The axis letters of a layer's output as it lies: the ``<layout>`` of its ``func_name``
    (``n<k>_<layer>_<in>[2<out>]``, always the physical order), else ``out_layout``. A layer
    written R4 says ``NHWC`` in ``out_layout`` whatever order it computes in (a token tensor,
    or any tensor an elementwise layer keeps in the order it has, is in its logical order)."""
    name = spec.string("func_name", "")
    prefix = f"_{spec.layer_name}_"
    if prefix in name:
        suffix = name.split(prefix, 1)[1]
        return suffix.rsplit("2", 1)[-1]
    return spec.string("out_layout", "NHWC")


def _model_order(plan: LayerPlan, out: LayerOutput,
                 shape: Optional[Sequence[int]] = None) -> np.ndarray:
    value, spec = out.value, out.spec
    if plan.layer_name in RESHAPE_LAYERS:
        return _reshape_input_order(plan, value, spec)
    if value.ndim != 4:
        return onto(value, shape)
    nchw = value.transpose(0, 3, 1, 2)
    fit = _only_fit((nchw, value), shape)
    if fit is None and shape and plan.perms and not any(
            unit_free(v.shape) == unit_free(shape) for v in (nchw, value)):
        # neither order is the model's: a Transpose in front of the layer's node was absorbed
        # (an int8 stage's Quantize of a Transpose); replayed, the only order that fits
        fit = _only_fit((_replayed(nchw, plan.perms),), shape)
    if fit is not None:
        return fit
    return onto(nchw if _physical_letters(spec) == "NHWC" else value, shape)


def _replayed(value: np.ndarray, perms: Sequence[Tuple[int, ...]]) -> np.ndarray:
    """``value`` put through the Transposes ``perms`` (those of its rank), in order."""
    for perm in perms:
        if len(perm) == value.ndim:
            value = value.transpose(perm)
    return value


def _reshape_input_order(plan: LayerPlan, value: np.ndarray, spec) -> np.ndarray:
    """A reshape layer's output in the order the model's reshape reads its input (the caller
    reshapes it to the model's shape)."""
    source, layout = spec.input_shapes[0], spec.string("data_layout", "NHWC")
    if len(source) != 4 or layout not in ("NHWC", "NCHW"):
        return value
    # Undo the reshape: the input as laid. Back to the model's NCHW and the absorbed
    # Transposes replayed, it is what a 4-D NCHW model's reshape reads; a batchless or lifted
    # model's reshape reads the input as laid (its [1, T, F, C] is NHWC): the shape says which.
    laid = value.reshape([-1, *source[1:]])  # axis 0: every run of a chunked batch
    replayed = _replayed(laid.transpose(0, 3, 1, 2) if layout == "NHWC" else laid, plan.perms)
    fit = _only_fit((replayed, laid), plan.source)
    return replayed if fit is None else fit
