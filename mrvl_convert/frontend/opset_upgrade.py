"""An old-opset model brought to opset ``TARGET_OPSET`` by onnx's version converter, so the
rules see one spelling of each op instead of a rule per old form (``Slice`` with its starts and
ends as attributes before opset 10, ``Upsample`` before 10, ``Clip`` with min/max attributes,
``Pad`` with its pads as an attribute before 11...).

Requires: a checked ``ModelProto`` whose default-domain opset is at least 7 (``load.py``).
Ensures: a model below ``TARGET_OPSET`` is returned converted to it, its nodes keeping their
names and output tensors where the converter replaced one node by one (the Constant nodes it
adds for attributes that became inputs are initializers), and the note says so; where the
converter fails (an op without an adapter, a model it cannot serialise), or the result does not
pass the checker, the model is returned as given and the note says why: that is not an error,
the rules then see the old forms. A model at ``TARGET_OPSET`` or later is returned untouched
with no note.

Exact: the adapters used rewrite an op into the newer op of the same semantics (attributes as
constant inputs; Upsample(nearest) as Resize(asymmetric, floor), which is its definition), so the
converted model computes what the given one did, bit for bit; ``tests/frontend/
test_opset_upgrade.py`` runs both on onnxruntime and compares.

``TARGET_OPSET`` is 11, the oldest opset the rules and the fuzz tests cover (11, 13, 17, 19):
a model from 11 on is left as it is (converting it would cost a serialisation of every weight
and gain no form the rules lack, and Softmax's semantics change at 13).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import AbstractSet, Dict, List, Optional

import onnx
from onnx import numpy_helper, version_converter

TARGET_OPSET = 11


@dataclass(frozen=True)
class OpsetUpgrade:
    model: onnx.ModelProto
    given: int                    # the model's default-domain opset
    used: int                     # the opset of ``model``
    note: Optional[str] = None    # what happened (converted, or why not), for the report


def upgrade_opset(proto: onnx.ModelProto, given: int) -> OpsetUpgrade:
    """``proto`` (opset ``given``) at ``TARGET_OPSET`` where onnx's converter can bring it."""
    if given >= TARGET_OPSET:
        return OpsetUpgrade(proto, given, given)
    try:
        converted = version_converter.convert_version(proto, TARGET_OPSET)
        onnx.checker.check_model(converted)
    except Exception as exc:  # onnx raises RuntimeError/ValidationError/others: all mean "no"
        why = " ".join(str(exc).split())[:300] or type(exc).__name__
        return OpsetUpgrade(proto, given, given,
                            f"kept at opset {given}: onnx's version converter cannot bring it to "
                            f"{TARGET_OPSET} ({why})")
    if converted.ir_version < 4:  # IR 3 lists initializers as inputs; from IR 4 they are not
        initializers_not_inputs(converted)
    converted.ir_version = max(proto.ir_version, 6)  # opset 11 needs IR 6; keep a later one
    constants_as_initializers(converted, {n.name for n in proto.graph.node if n.name})
    refused = _old_resize_semantics(converted)
    if refused is not None:
        return OpsetUpgrade(proto, given, given, f"kept at opset {given}: {refused}")
    _restore_names(proto, converted)
    return OpsetUpgrade(converted, given, TARGET_OPSET,
                        f"converted from opset {given} to {TARGET_OPSET} by onnx's version "
                        "converter (exact)")


def at_target_opset(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` converted to ``TARGET_OPSET`` where it is older and onnx's converter can
    (``upgrade_opset``); ``proto`` as given otherwise. What quantize hands onnxruntime, whose
    ``quantize_static`` would otherwise convert an opset < 10 model itself, after our rewrites
    (and fail on an IR 3 model whose folded weights are not graph inputs)."""
    default = [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")]
    return upgrade_opset(proto, default[0]).model if default else proto


def _old_resize_semantics(converted: onnx.ModelProto) -> Optional[str]:
    """Every Resize of the converted model came from an Upsample or a Resize-10 (the given
    opset has no coordinate_transformation_mode): onnx's converter leaves opset 11's defaults
    (half_pixel, round_prefer_floor), which move a linear Upsample's samples. Written as the old
    ops compute on onnxruntime: asymmetric coordinates, nearest by floor. A nearest shrink (a
    scale below 1, or scales not constant) has no such form (onnxruntime's Resize-10 rounds it
    up there): the reason the model is kept as given, else None."""
    values = {t.name: numpy_helper.to_array(t) for t in converted.graph.initializer}
    for node in converted.graph.node:
        if node.op_type != "Resize" or any(a.name == "coordinate_transformation_mode"
                                           for a in node.attribute):
            continue
        mode = next((a.s for a in node.attribute if a.name == "mode"), b"nearest")
        node.attribute.append(onnx.helper.make_attribute("coordinate_transformation_mode",
                                                         "asymmetric"))
        if mode == b"nearest":
            scales = values.get(node.input[2]) if len(node.input) > 2 else None
            if scales is None or scales.size == 0 or float(scales.min()) < 1.0:
                return (f"nearest Resize/Upsample '{node.name or node.output[0]}' shrinks or has "
                        "scales computed at run time; opset 11 has no form that rounds as the "
                        "old op does there")
            node.attribute.append(onnx.helper.make_attribute("nearest_mode", "floor"))
    return None


def initializers_not_inputs(proto: onnx.ModelProto) -> None:
    """``proto`` without the graph inputs an initializer backs, in place: constants, as the
    converter takes them (IR 3 lists every initializer as an input; PyTorch exports before 1.5
    did so at IR 4 too, its BatchNormalizations' unused ``num_batches_tracked`` among them)."""
    names = {t.name for t in proto.graph.initializer}
    keep = [i for i in proto.graph.input if i.name not in names]
    del proto.graph.input[:]
    proto.graph.input.extend(keep)


def constants_as_initializers(proto: onnx.ModelProto,
                              given_names: AbstractSet[str] = frozenset()) -> None:
    """The Constant nodes holding a tensor, but those named in ``given_names``, as
    initializers of the same name, in place (exact). Here: the unnamed ones the converter
    added (attributes that became inputs), so the report lists the model's own nodes only."""
    keep: List[onnx.NodeProto] = []
    for node in proto.graph.node:
        value = [a for a in node.attribute if a.name == "value"]
        if node.op_type == "Constant" and node.name not in given_names and value:
            tensor = onnx.TensorProto()
            tensor.CopyFrom(value[0].t)
            tensor.name = node.output[0]
            proto.graph.initializer.append(tensor)
        else:
            keep.append(node)
    del proto.graph.node[:]
    proto.graph.node.extend(keep)


def _restore_names(given: onnx.ModelProto, converted: onnx.ModelProto) -> None:
    """Node names and output tensor names of ``given`` back on ``converted`` where the
    converter replaced nodes one for one (same count, same order): the report and verify speak
    of the model's own nodes and tensors. Otherwise the converter's names stay."""
    before, after = list(given.graph.node), list(converted.graph.node)
    if len(before) != len(after):
        return
    taken = {o for n in after for o in n.output} | {i.name for i in converted.graph.input} | \
        {t.name for t in converted.graph.initializer}
    renamed: Dict[str, str] = {}
    for old, new in zip(before, after):
        new.name = new.name or old.name
        if len(old.output) != len(new.output):
            continue
        for k, (was, now) in enumerate(zip(old.output, new.output)):
            if was != now and was not in taken:
                renamed[now] = was
                new.output[k] = was
    for node in after:
        for k, name in enumerate(node.input):
            node.input[k] = renamed.get(name, name)
    for output in converted.graph.output:
        output.name = renamed.get(output.name, output.name)
