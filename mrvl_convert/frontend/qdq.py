"""QDQ models (onnxruntime's QuantFormat.QDQ): one DequantizeLinear per consumer, and the
quantized pairs of paths that are constant.

quantize_static writes one QuantizeLinear -> DequantizeLinear pair per tensor, and the
DequantizeLinear's output feeds every consumer (a residual branch, a weight shared by two
convolutions). The int8 rules (``rules/marvell/qnn.yaml``) fuse each consumer with the
DequantizeLinear in front of it, so each consumer gets its own copy here: exact, since a
DequantizeLinear is a pure elementwise function of its inputs (onnxruntime's
``DedicatedQDQPair`` option writes models this way to begin with).

graphsurgeon never folds a QuantizeLinear or a DequantizeLinear, so that a QDQ weight (the
DequantizeLinear of an int8 initializer) stays one. But a path that becomes constant only
once the input shapes are fixed (the anchors a detection head computes from its feature maps'
shapes) was quantized as an activation, and its pairs would stop folding there: the rest of
the path, on CPU, then held tensors the device check takes for a batch of 2100.
``fold_quantized_constants`` computes such a pair, a QuantizeLinear of a constant and the
DequantizeLinears reading it, with onnxruntime, so the value is the QDQ model's own. In a
weight-only int8 model (``weight_only``: no activation quantized, as ``torch.ao``'s and
onnxruntime's weight-only quantizers write them) every weight's DequantizeLinear is computed so:
its layers are float layers of the float weight onnxruntime computes at run time, bit for bit.
Where such a constant is read by an int8 layer (a reader of a dequantized activation whose
outputs only QuantizeLinears read: the strides a YOLOv8 head multiplies its boxes by, computed
from the feature maps' shapes), only its QuantizeLinear is computed: the DequantizeLinear of
that int8 constant is the QDQ weight the int8 rules take, and computes the same values.
"""
from __future__ import annotations

from typing import AbstractSet, Dict, List, Tuple

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import const_value, is_const


def dedicate_dequantize(graph: gs.Graph) -> Dict[str, str]:
    """Give every consumer of a shared DequantizeLinear its own copy (named
    ``<node>_for_<consumer>``); returns new node name -> the node it copies. A graph output
    counts as a consumer: the original keeps writing it (a layer's input dequantized for it
    too, deepfilternet enc's ``e0``), and every node reading it gets a copy, since a rule
    cannot absorb a DequantizeLinear whose output leaves the graph. A node reading it in two
    inputs (an int8 ``Mul(x, x)``) gets a copy per input (``<node>_for_<consumer>_in<k>`` from
    the second on): an int8 rule absorbs each operand's DequantizeLinear as its own, and
    ``core.graph.same_value`` takes the copies for one x where a form needs it."""
    outputs = {t.name for t in graph.outputs}
    copies: Dict[str, str] = {}
    for node in list(graph.nodes):
        out = node.outputs[0] if node.op == "DequantizeLinear" and node.outputs else None
        reads = [] if out is None else _reads(out)
        kept = 0 if out is not None and out.name in outputs else 1
        if len(reads) + (1 - kept) < 2:
            continue
        for consumer, i, suffix in reads[kept:]:
            name = f"{node.name}_for_{consumer.name}{suffix}"
            copy = gs.Variable(f"{out.name}_for_{consumer.name}{suffix}", dtype=out.dtype,
                               shape=out.shape)
            consumer.inputs[i] = copy
            graph.nodes.append(gs.Node(node.op, name, dict(node.attrs), list(node.inputs),
                                       [copy], domain=node.domain))
            copies[name] = node.name
    return copies


def _reads(out: gs.Tensor) -> List[Tuple[gs.Node, int, str]]:
    """(consumer, input index, name suffix) for every input reading ``out``: the suffix is
    empty for a consumer's first such input (the names a one-input reader always had)."""
    reads, seen = [], set()
    for consumer in out.outputs:
        if id(consumer) in seen:
            continue
        seen.add(id(consumer))
        slots = [i for i, t in enumerate(consumer.inputs) if t is out]
        reads += [(consumer, i, "" if k == 0 else f"_in{i}") for k, i in enumerate(slots)]
    return reads


def fold_quantized_constants(graph: gs.Graph, opset: int, max_bytes: int,
                             weights: AbstractSet[str]) -> bool:
    """Replace by the constants onnxruntime computes for them the DequantizeLinears of
    constants (directly or through a QuantizeLinear; each constant at most ``max_bytes``)
    where the constant was computed here (not one of the model's initializers or Constant
    nodes, ``weights``),
    or where every reader reads nothing but constants and such values (a constant the
    quantizer took for a weight, on a path that is constant). True when one was: fold the graph
    again, what follows may be constant now. A QDQ weight read by a layer with an activation
    input stays as it is, whether written as an int8 initializer or as a float one with its
    QuantizeLinear."""
    only_weights = weight_only(graph)
    computable = [node for node in graph.nodes if node.op == "DequantizeLinear" and node.outputs
                  and _computable(node, max_bytes)
                  and not any(node.outputs[0] is out for out in graph.outputs)]
    chosen, quantized = [], []
    for node in computable:
        computed_here = _source(node).name not in weights
        if only_weights or _read_with_constants(node, max_bytes) or (
                computed_here and not _int8_readers(node, max_bytes)):
            chosen.append(node)
        elif computed_here and not is_const(node.inputs[0]):
            quantized.append(node.inputs[0].inputs[0])  # its QuantizeLinear: an int8 weight
    if not chosen and not quantized:
        return False
    values = _computed(chosen + quantized, opset)
    for node in chosen + quantized:
        out = node.outputs[0]
        if out.name in values:  # a QuantizeLinear two DequantizeLinears read: once
            node.outputs.clear()
            out.to_constant(values.pop(out.name))
    graph.cleanup(remove_unused_graph_inputs=False)
    return True


def weight_only(graph: gs.Graph) -> bool:
    """Weight-only int8: every QuantizeLinear and DequantizeLinear reads a constant (no
    activation is quantized), so no layer is an int8 one and a weight's DequantizeLinear is
    its float weight, the one onnxruntime computes at run time."""
    return all(_constant_inputs(node) for node in graph.nodes
               if node.op in ("QuantizeLinear", "DequantizeLinear"))


def _source(dequantize: gs.Node) -> gs.Tensor:
    """The constant a ``_computable`` DequantizeLinear computes from."""
    source = dequantize.inputs[0]
    return source if is_const(source) else source.inputs[0].inputs[0]


def _computable(dequantize: gs.Node, max_bytes: int) -> bool:
    """A DequantizeLinear of constants, or of a QuantizeLinear of constants."""
    if not _constant_inputs(dequantize, skip=1):
        return False
    source = dequantize.inputs[0]
    if is_const(source):
        return source.values.nbytes <= max_bytes
    producer = source.inputs[0] if source.inputs else None
    return (producer is not None and producer.op == "QuantizeLinear"
            and _constant_inputs(producer) and producer.inputs[0].values.nbytes <= max_bytes)


def _read_with_constants(dequantize: gs.Node, max_bytes: int) -> bool:
    """Every reader of this DequantizeLinear of a constant reads only constants and values
    ``_computable`` DequantizeLinears give: the reader is constant once they are."""
    readers = dequantize.outputs[0].outputs
    return bool(readers) and all(
        reader.op not in ("QuantizeLinear", "DequantizeLinear") and all(
            is_const(t) or not t.name or (t.inputs and t.inputs[0].op == "DequantizeLinear"
                                          and _computable(t.inputs[0], max_bytes))
            for t in reader.inputs) for reader in readers)


def _int8_readers(dequantize: gs.Node, max_bytes: int) -> bool:
    """Every reader of this DequantizeLinear is an int8 layer of the QDQ model: it also reads
    a dequantized activation, and only QuantizeLinears read its outputs."""
    readers = dequantize.outputs[0].outputs
    return bool(readers) and all(
        any(t.inputs and t.inputs[0].op == "DequantizeLinear"
            and not _computable(t.inputs[0], max_bytes) for t in reader.inputs)
        and all(out.outputs and all(r.op == "QuantizeLinear" for r in out.outputs)
                for out in reader.outputs)
        for reader in readers)


def _constant_inputs(node: gs.Node, skip: int = 0) -> bool:
    return all(is_const(t) or not t.name for t in node.inputs[skip:])


def _computed(chosen: List[gs.Node], opset: int) -> Dict[str, np.ndarray]:
    """The outputs of the nodes ``chosen``, DequantizeLinears (with the QuantizeLinears they
    read) and QuantizeLinears of constants, by one onnxruntime run of them alone."""
    import onnxruntime as ort

    nodes, inits, seen = [], [], set()
    for dequantize in chosen:
        source = dequantize.inputs[0]
        steps = [dequantize] if is_const(source) or dequantize.op == "QuantizeLinear" \
            else [source.inputs[0], dequantize]
        for node in steps:
            for tensor in node.inputs:
                if is_const(tensor) and tensor.name not in seen:
                    seen.add(tensor.name)
                    inits.append(onnx.numpy_helper.from_array(const_value(tensor), tensor.name))
            if node.outputs[0].name not in seen:
                seen.add(node.outputs[0].name)
                nodes.append(onnx.helper.make_node(node.op, [t.name for t in node.inputs],
                                                   [t.name for t in node.outputs], **node.attrs))
    outputs = [onnx.helper.make_empty_tensor_value_info(name)
               for name in dict.fromkeys(d.outputs[0].name for d in chosen)]
    graph = onnx.helper.make_graph(nodes, "quantized_constants", [], outputs, inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # idle workers sleep
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, {})))
