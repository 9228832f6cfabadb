"""QDQ pairs around ops with no int8 form dropped, so those ops run as the float composites they
spell (LayerNorm, GELU, attention's scores and Softmax), fp16 layers inside the int8 region
(issue 45: a QDQ transformer stays as whole as its float twin).

A quantizer puts a QuantizeLinear -> DequantizeLinear pair on every tensor, also between the
pieces of a LayerNorm or GELU decomposition (ReduceMean, Sub, Pow, Sqrt, Div, Erf...). No int8
layer takes those pieces, and with a pair between each two no float composite does either: each
piece was a region of its own, on CPU. Here:

- *float* nodes: an op type no int8 rule has (``rules/int8_forms.py``, given by the caller), or
  a MatMul/Conv/Gemm with no int8 form (``int8_mac``); then, until nothing changes, a non-MAC
  node whose readers (through pairs) are all float, or which reads a float node (through a
  pair) and either has no other activation input (a GELU's ``* 0.5``, a LayerNorm's ``+ beta``)
  or feeds no int8 MAC and no graph output (an elementwise piece between them: the ``x - mean``
  of a LayerNorm, the ``1 + erf`` of a GELU); an op whose int8 form is exact (Reshape,
  Transpose, MaxPool, Relu...: ``EXACT_IN_INT8``) never;
- a node of a float composite the rules recognise in the model read through its pairs
  (``spans``, given by the caller: ``rules/float_spans.py``; one holding an op of no int8
  form, e.g. a GELU whose ``0.5 * x`` a quantizer rounded before the gate's Mul) is float too,
  its MACs and exact ops excepted: the pairs inside the span go, those at its ends stay;
- a pair is dropped when the node it quantizes and every node reading it are float: the
  readers read the float tensor itself. Pairs at an int8 MAC's output or input, at the graph's
  inputs and outputs, stay, so every int8 MAC keeps its int8 input and output.

Contract.
  Requires: a QDQ model (scales and zero points initializers), shapes inferred (a MatMul's rank
  tells an int8 FC from attention's product of two activations).
  Ensures: the same model (in place) without the dropped pairs, a float node's dequantized
  constants as float constants (exact), the nodes nothing reads any more gone; every other
  tensor name kept. Bound: not exact against the QDQ model given; each dropped pair was a
  rounding to its grid (at most half its step ``s/2``) and a clamp to its range ``[(qmin - zp)
  s, (qmax - zp) s]``, now gone (the float op reads the unrounded value). What that costs at the
  outputs is measured by the caller (``foreign_cost.py``, verify's quantization cost) against the
  given model; the model kept for verify is this one, so the int8 layers stay bit-equal to it.
"""
from __future__ import annotations

from typing import AbstractSet, Callable, Dict, Iterable, List, Optional, Set

import onnx

from mrvl_convert.core.macs import MAC_OPS
from mrvl_convert.frontend.qdq_graph import QdqGraph, dequantized

# Ops whose int8 form is exact (they move, select or clamp values, computing none): a pair
# around one costs nothing, so they stay int8 layers and a float node's pairs end at them.
EXACT_IN_INT8 = frozenset({"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Slice",
                           "Identity", "Split", "Concat", "MaxPool", "Relu", "Clip", "Min",
                           "Max"})
_FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE)
# A QDQ model -> the node sets of the float composites of its ``read_through`` view, each node
# named by its index in the model.
Spans = Callable[[onnx.ModelProto], Iterable[AbstractSet[str]]]


def drop_float_pairs(model: onnx.ModelProto, int8_ops: AbstractSet[str],
                     spans: Optional[Spans] = None) -> List[str]:
    """Drop (in place) the QDQ pairs between float nodes (module docstring); the names of the
    QuantizeLinears dropped. ``spans``: the float composites of ``read_through(model)``."""
    graph = QdqGraph(model)
    pairs = _pairs(graph)
    seeds = set() if spans is None else {int(i) for span in spans(model) for i in span}
    floats = _float_nodes(graph, int8_ops, [graph.g.node[i] for i in sorted(seeds)])
    dropped = [q for q, (source, readers) in pairs.items()
               if readers and (source is not None and id(source) in floats)
               and all(id(r) in floats for r in readers)]
    _float_weights(graph, [n for n in graph.g.node if id(n) in floats])
    _bypass(graph, dropped)
    graph.commit()
    return dropped


def int8_mac(graph: QdqGraph, node: onnx.NodeProto) -> bool:
    """A MAC layer an int8 rule can take: not a MatMul, a 2-D one (or of unknown rank), or a
    3-D one by a dequantized constant 2-D weight (the int8 FC on tokens); attention's MatMuls
    of two activations are not."""
    rank = rank_of(graph, node.output[0])
    if node.op_type != "MatMul" or rank in (None, 2):
        return True
    source = graph.producer.get(node.input[1])
    weight = (graph.const(source.input[0]) if source is not None
              and source.op_type == "DequantizeLinear" else None)
    return rank == 3 and weight is not None and weight.ndim == 2


def rank_of(graph: QdqGraph, name: str) -> Optional[int]:
    info = graph.infos.get(name)
    if info is None or not info.type.tensor_type.HasField("shape"):
        return None
    return len(info.type.tensor_type.shape.dim)


def _pairs(graph: QdqGraph) -> Dict[str, tuple]:
    """QuantizeLinear name -> (the node it quantizes or None, the nodes reading its
    DequantizeLinears), for activation pairs a drop can bypass: every reader of the Q a DQ, no
    Q or DQ output a graph output."""
    outputs = {o.name for o in graph.g.output}
    pairs = {}
    for q in graph.g.node:
        if q.op_type != "QuantizeLinear" or graph.const(q.input[0]) is not None:
            continue
        dqs = graph.readers.get(q.output[0], [])
        if (not dqs or q.output[0] in outputs
                or any(d.op_type != "DequantizeLinear" or d.output[0] in outputs for d in dqs)):
            continue
        readers = [r for d in dqs for r in graph.readers.get(d.output[0], [])]
        pairs[q.name] = (graph.producer.get(q.input[0]), readers)
    return pairs


def read_through(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose activation pairs are all bypassed (each reader reads the
    quantized tensor itself) and whose non-MAC nodes' dequantized constants are float ones
    (a GELU's 0.5 and 1 as onnxruntime quantizes them), its nodes named by their index in
    ``model``: the float graph the pairs hide, for the composite rules to read
    (``rules/float_spans.py``)."""
    view = onnx.ModelProto()
    view.CopyFrom(model)
    for index, node in enumerate(view.graph.node):
        node.name = str(index)
    graph = QdqGraph(view)
    # a MAC's weights stay dequantized: no float composite holds a MAC (and they are large)
    _float_weights(graph, [n for n in graph.g.node if n.op_type not in MAC_OPS])
    _bypass(graph, [q for q, (_, readers) in _pairs(graph).items() if readers])
    graph.commit()
    return view


def _float_nodes(graph: QdqGraph, int8_ops: AbstractSet[str],
                 seeds: List[onnx.NodeProto]) -> Set[int]:
    """The ids of the float nodes (module docstring), to a fixed point; ``seeds``: the nodes
    of the float composites, float unless a MAC or exact in int8."""
    compute = [n for n in graph.g.node if n.op_type not in ("QuantizeLinear", "DequantizeLinear")]
    floats = {id(n) for n in compute if n.op_type not in int8_ops
              or (n.op_type in MAC_OPS and not int8_mac(graph, n))}
    links = {id(n): (_sources(graph, n), _readers(graph, n)) for n in compute}
    macs = {id(n) for n in compute if n.op_type in MAC_OPS and id(n) not in floats}
    floats |= {id(n) for n in seeds if id(n) not in macs and n.op_type not in EXACT_IN_INT8
               and n.op_type not in ("QuantizeLinear", "DequantizeLinear")}
    changed = True
    while changed:
        changed = False
        for node in compute:
            if id(node) in floats or id(node) in macs or node.op_type in EXACT_IN_INT8:
                continue
            sources, readers = links[id(node)]
            ids = [id(r) if r is not None else None for r in readers]
            backward = bool(ids) and all(i in floats for i in ids)
            # a float's constant scale or shift (a GELU's 0.5, a LayerNorm's beta) joins it;
            # a node of two activations does unless it feeds an int8 MAC (a residual sum)
            forward = any(id(s) in floats for s in sources) and (
                len(sources) == 1 and _unary(graph, node)
                or not any(i is None or i in macs for i in ids))
            if backward or forward:
                floats.add(id(node))
                changed = True
    return floats


def _sources(graph: QdqGraph, node: onnx.NodeProto) -> List[onnx.NodeProto]:
    """The nodes ``node``'s float activation inputs come from, through a QDQ pair."""
    found = []
    for name in node.input:
        source = graph.producer.get(name)
        if source is not None and source.op_type == "DequantizeLinear":
            q = graph.producer.get(source.input[0])
            source = graph.producer.get(q.input[0]) if (
                q is not None and q.op_type == "QuantizeLinear") else None
        elif not _is_float(graph, name):
            source = None
        if source is not None and source.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            found.append(source)
    return found


def _unary(graph: QdqGraph, node: onnx.NodeProto) -> bool:
    """Every input but one a constant (or a dequantized constant)."""
    def constant(name: str) -> bool:
        source = graph.producer.get(name)
        return graph.const(name) is not None or (
            source is not None and source.op_type == "DequantizeLinear"
            and graph.const(source.input[0]) is not None)
    return sum(not constant(name) for name in node.input if name) == 1


def _readers(graph: QdqGraph, node: onnx.NodeProto) -> List[Optional[onnx.NodeProto]]:
    """The nodes reading ``node``'s outputs, through a QDQ pair; None for a graph output."""
    outputs = {o.name for o in graph.g.output}
    found: List[Optional[onnx.NodeProto]] = []
    for name in node.output:
        for reader in _through_pairs(graph, name):
            found.append(reader)
        if name in outputs:
            found.append(None)
    return found


def _through_pairs(graph: QdqGraph, name: str) -> List[Optional[onnx.NodeProto]]:
    outputs = {o.name for o in graph.g.output}
    found: List[Optional[onnx.NodeProto]] = []
    for reader in graph.readers.get(name, []):
        if reader.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            found.append(reader)
            continue
        for dq in graph.readers.get(reader.output[0], []):
            found.extend(graph.readers.get(dq.output[0], []))
            if dq.output[0] in outputs:
                found.append(None)
        if reader.output[0] in outputs:
            found.append(None)
    return found


def _float_weights(graph: QdqGraph, nodes: List[onnx.NodeProto]) -> None:
    """A float node's DequantizeLinear'd constants (a LayerNorm's gamma, a GELU's 1/sqrt(2))
    read as the float values onnxruntime dequantizes them to (exact): a float composite takes
    constants, not int8 ones."""
    for node in nodes:
        for index, name in enumerate(node.input):
            dq = graph.producer.get(name)
            source = graph.const(dq.input[0]) if (
                dq is not None and dq.op_type == "DequantizeLinear") else None
            if source is not None and graph.params(dq) is not None:
                node.input[index] = graph.add_const(f"{name}_float_for_{node.name}",
                                                    dequantized(graph, dq, source))


def _is_float(graph: QdqGraph, name: str) -> bool:
    info = graph.infos.get(name)
    return info is not None and info.type.tensor_type.elem_type in _FLOAT_TYPES


def _bypass(graph: QdqGraph, quantizes: List[str]) -> None:
    """The pairs of these QuantizeLinears removed: their DequantizeLinears' readers read the
    quantized tensor itself."""
    chosen = set(quantizes)
    for q in [n for n in graph.g.node if n.name in chosen]:
        for dq in graph.readers.get(q.output[0], []):
            for reader in graph.readers.get(dq.output[0], []):
                for index, name in enumerate(reader.input):
                    if name == dq.output[0]:
                        reader.input[index] = q.input[0]
            graph.dropped.add(id(dq))
        graph.dropped.add(id(q))
