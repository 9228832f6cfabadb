"""The QDQ reference with the artifact's fp16 layers computed as the artifact computes them.

An int8 artifact runs a float op that is no int8 layer (a node ``--keep-fp16`` left in float,
a Softmax) as an fp16 Mrvl layer between quant layers: its weights and its result are rounded to
fp16 (``kernels/fp16.py``), where onnxruntime's run of the QDQ model computes in float32; its
dequantized input is ``q * scale`` in float32 as in that run (the dequantizing ``quant`` layer
is exact, ``QuantKernel``: the simulator rounds no exact layer's result). Judged against that
run, a correct conversion with kept layers "fails": an fp16 rounding moves a value across a
quantization boundary, and one int8 step early on is several at the output (issue 40). This
module gives the verdict a reference that rounds where the artifact rounds, and only there, with
onnxruntime doing the arithmetic (Cast float32 -> float16 -> float32 pairs, as the graph engine
rounds): every input of such a layer that is neither a weight nor an exact layer's result (a
stage input, an fp16 layer's result; an exact result reaches it unrounded also through the
model's Squeeze, Transpose, Reshape... the converter absorbed, a Cast to float32 of a
float16-stored model's twin, and a DequantizeLinear copy of the same quantized tensor), every weight (a rounded copy for
the layer; a Conv + BatchNormalization pair the layer folds as ``fp16_fold.py`` rounds it),
every result that leaves the layer, and a HardSigmoid's and a HardSwish's steps as the lowering
writes them (Mul2D, Sum2D, Clip[, Mul2D], each rounded), a two-input Max or Min as its Sub +
Relu and Sum2D/Sub (``layers/_minmax.py``, the gap rounded), and a Div by a constant c as the
Mul2D it is lowered to (times fp16(1/c), ``layers/mul2d.py``). Shapes, indices and integers are never
rounded (``value_tensors.py``). The weights stay the QDQ model's own: a wrong weight in the
artifact still fails.

- requires: the QDQ model (a copy: changed in place) and the int8 artifact's session;
- ensures: the same model, its unnamed nodes named as the converter names them, with Cast
  pairs inserted at the fp16 layers' edges and their weights rounded (a Div by a constant as
  the Mul by its reciprocal the layer holds, a Power's exponent as written), every tensor
  name of the model kept (consumers read the rounded value under the old name); the list of the node names rounded (empty: the model is unchanged). What is left
  between the two runs is the order of the float32 sums inside a layer: it can still move a
  value that lies within float32 rounding of a quantization boundary by one step.
"""
from __future__ import annotations

from typing import AbstractSet, Any, Container, Dict, List, Sequence, Set, Tuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

from mrvl_convert.frontend.load import name_nodes
from mrvl_convert.kernels.fp16 import round_to_fp16
from mrvl_convert.runtime.session import HybridSession
from mrvl_convert.verify.fp16_chains import chains_as_written, mean_as_laid_out
from mrvl_convert.verify.fp16_fold import round_folded
from mrvl_convert.verify.minmax_pools import pooled_minmax
from mrvl_convert.verify.kept_graph import WorkingGraph, topologically_sorted
from mrvl_convert.verify.kept_inputs import moves_unrounded, rounded_results
from mrvl_convert.verify.kept_moves import moved, unrounded_moves
from mrvl_convert.verify.norms_written import norms_as_written
from mrvl_convert.verify.value_tensors import never_rounded

_QDQ = ("QuantizeLinear", "DequantizeLinear")
_SUFFIX = "__as_fp16"


def fp16_layer_groups(session: HybridSession, proto: onnx.ModelProto) -> List[List[str]]:
    """The source nodes (in ``proto``) of each fp16 layer of the artifact's Mrvl stages: no
    scale attribute, no QuantizeLinear/DequantizeLinear among its sources."""
    return [group for group, _ in _fp16_layers(session, proto)]


def rounded_as_artifact(proto: onnx.ModelProto, session: HybridSession) -> List[str]:
    """Round ``proto`` where the artifact's fp16 layers round (module docstring), in place;
    the names of the nodes rounded."""
    name_nodes(proto)  # an unnamed node has the name the converter gave it (Div_94)
    # tf's LayerNorm spelling rewritten as the converter rewrote it: its layers' steps
    norms_as_written(proto, session, _opset(proto))
    layers = _fp16_layers(session, proto)
    _exponents_as_written(proto, session, {n for g, _ in layers for n in g})
    _divisions_as_written(proto, {n for g, _ in layers for n in g})
    done = round_groups(proto, [g for g, _ in layers], [f for _, f in layers])
    if _means_as_laid_out(proto, session, set(done)):
        topologically_sorted(proto)
    return done


def _means_as_laid_out(proto: onnx.ModelProto, session: HybridSession,
                       rounded: AbstractSet[str]) -> bool:
    """Each fp16 ReduceMean layer over the channels of a 4-D NHWC tensor reduced in the
    reference as the layer reduces it (``fp16_chains.mean_as_laid_out``); whether any was.
    Opset >= 18 (axes as an input) is left as it is."""
    nodes = {n.name: n for n in proto.graph.node if n.op_type == "ReduceMean"
             and n.name in rounded}
    changed = False
    for stage in session.stages:
        for step in stage.runner.steps if stage.kind == "mrvl" else ():
            spec = step.spec
            layout = spec.attrs.get("data_layout") or [""]
            if (spec.kind.name != "ReduceMean" or len(spec.source_nodes) != 1
                    or layout[0] != "NHWC" or len(spec.input_shapes[0]) != 4
                    or spec.value("axis") != 3):
                continue
            node = nodes.get(spec.source_nodes[0])
            if node is not None:
                changed |= mean_as_laid_out(proto.graph, node, spec.input_shapes[0])
    return changed


def _exponents_as_written(proto: onnx.ModelProto, session: HybridSession,
                          rounded: AbstractSet[str]) -> None:
    """Each fp16 Power layer's Pow given the exponent the artifact holds: an attribute written
    with six decimals (``layers/power.py``: 1/3 is 0.333333), not an fp16 weight; a copy for
    that node alone (``_round_group`` leaves a Pow's exponent unrounded)."""
    nodes = {n.name: n for n in proto.graph.node if n.op_type == "Pow" and n.name in rounded}
    inits = {t.name for t in proto.graph.initializer}
    for stage in session.stages:
        for step in stage.runner.steps if stage.kind == "mrvl" else ():
            if step.spec.kind.name != "Power":
                continue
            for name in step.spec.source_nodes:
                node = nodes.get(name)
                if node is not None and len(node.input) > 1 and node.input[1] in inits:
                    copy = f"{node.input[1]}__{name}__as_written"
                    value = np.float32(step.spec.value("exponent"))
                    proto.graph.initializer.append(numpy_helper.from_array(value, copy))
                    node.input[1] = copy


def _divisions_as_written(proto: onnx.ModelProto, rounded: AbstractSet[str]) -> None:
    """Each rounded Div by a constant made the Mul by its reciprocal that the artifact's Mul2D
    holds (``layers/mul2d.py``: float32(1 / float64(c)), then rounded to fp16 as a weight by
    ``_round_group``), not a division by c rounded to fp16 (sscd_distilled's pixel scaling);
    a copy for that node alone."""
    inits = {t.name: t for t in proto.graph.initializer}
    for node in proto.graph.node:
        if node.op_type != "Div" or node.name not in rounded or node.input[1] not in inits:
            continue
        divisor = numpy_helper.to_array(inits[node.input[1]])
        if divisor.dtype != np.float32:
            continue
        copy = f"{node.input[1]}__{node.name}__reciprocal"
        reciprocal = (1.0 / divisor.astype(np.float64)).astype(np.float32)
        proto.graph.initializer.append(numpy_helper.from_array(reciprocal, copy))
        node.op_type, node.input[1] = "Mul", copy


def _fp16_layers(session: HybridSession, proto: onnx.ModelProto
                 ) -> List[Tuple[List[str], Set[str]]]:
    """Each fp16 layer's source nodes (``fp16_layer_groups``) and the tensors of ``proto`` it
    reads unrounded: those an exact layer of its stage gives it (``_exact_results``)."""
    ops = {n.name: n.op_type for n in proto.graph.node}
    outputs = {n.name: list(n.output) for n in proto.graph.node}
    moves = unrounded_moves(proto)
    layers: List[Tuple[List[str], Set[str]]] = []
    seen: Set[Tuple[str, ...]] = set()  # a layer's group once (a set: thousands of layers)
    for stage in session.stages:
        if stage.kind != "mrvl":
            continue
        steps = {step.node: step for step in stage.runner.steps}
        rounded = {node.index for node in stage.runner.inputs if node.fp16}
        holding = rounded_results(stage.runner.steps, rounded)
        for step in stage.runner.steps:
            spec = step.spec
            # an int8 layer: scales, or a QDQ node among its sources (a pool, a flatten
            # moving int8 values)
            if spec.kind.name == "quant" or any("scale" in k for k in spec.attrs) or any(
                    ops.get(n) in _QDQ for n in spec.source_nodes):
                continue
            if moves_unrounded(step, steps, rounded, holding):
                continue
            group = [n for n in spec.source_nodes if n in ops]
            if group and tuple(group) not in seen:
                seen.add(tuple(group))
                layers.append((group, moved(_exact_results(step, steps, outputs), moves)))
    return layers


def _exact_results(step: Any, steps: Dict[int, Any], outputs: Dict[str, List[str]]
                   ) -> Set[str]:
    """The tensors the layers before ``step`` that are ``exact`` hand it: the simulator does
    not round an exact layer's result (``runtime/simulator.py``, ``graph_engine.py``), and a
    dequantizing ``quant`` layer's is ``q * scale`` in float32, no fp16 value. An exact layer
    with no source node (a layout_transform the layout pass put in front of a BatchMatmul) hands
    on its own input's tensor as it is: the one behind it is looked up instead; so does a
    layer of the same chain (a LayerNorm's nine, a GELU's five: only the last names its
    source nodes)."""
    names: Set[str] = set()
    pending = list(step.inputs)
    while pending:
        producer = steps.get(pending.pop())  # None: a subgraph input, which goes in as fp16
        if producer is not None and not producer.kernel.exact and not producer.spec.source_nodes:
            pending.extend(producer.inputs)  # a partial result of the same chain (a LayerNorm's
            continue                         # first layers read what the chain reads)
        if producer is None or not producer.kernel.exact:
            continue
        if producer.spec.source_nodes:
            names.update(o for n in producer.spec.source_nodes for o in outputs.get(n, ()))
        else:
            pending.extend(producer.inputs)
    return names



def round_groups(proto: onnx.ModelProto, groups: List[List[str]],
                 unrounded: Sequence[AbstractSet[str]] = ()) -> List[str]:
    """Round each group of nodes (one fp16 layer's source nodes) as the artifact computes
    that layer (module docstring), in place, nodes left in an order onnxruntime accepts; the
    names of the nodes rounded. ``unrounded[k]``: the tensors group ``k`` reads as they are
    (an exact layer's result, ``_exact_results``); none when not given. Linear in the model's
    size: the look-ups are indexes kept up to date across the groups (``kept_graph.py``)."""
    done: List[str] = []
    protected = never_rounded(proto)  # shapes, indices, integers: never rounded
    pools = pooled_minmax(proto)  # before any input is renamed to its rounded copy
    graph = WorkingGraph(proto.graph)
    opset = _opset(proto)
    for k, group in enumerate(groups):
        # either set, not their union: a copy of ``protected`` per group was quadratic
        _round_group(proto, graph, group, _Both(unrounded[k] if k < len(unrounded)
                                                else frozenset(), protected), opset, pools)
        done += group
    if done:
        graph.commit()
        topologically_sorted(proto)
    return done


class _Both:
    """Membership in either of two sets."""

    def __init__(self, first: AbstractSet[str], second: AbstractSet[str]) -> None:
        self._sets = (first, second)

    def __contains__(self, name: object) -> bool:
        return any(name in s for s in self._sets)


def _round_group(proto: onnx.ModelProto, graph: WorkingGraph, group: List[str],
                 unrounded: Container[str], opset: int, pools: Container[str]) -> None:
    members = graph.members(group)
    inits = graph.inits()
    folded = set()
    if round_folded(proto, group, graph.named, inits):
        folded = {i for n in members for i in n.input[1:]}  # weights hold the fold's values
        for node in members:
            graph.refresh(node)
    inside = {o for n in members for o in n.output}
    _divisions_as_products(graph, members, inits, unrounded)
    for node in members:
        for k, name in enumerate(node.input):
            if not name or name in folded or name in unrounded:
                continue
            if node.op_type == "Pow" and k == 1 and name in inits:
                continue  # the layer's exponent attribute (_exponents_as_written)
            if name in inits:
                node.input[k] = _rounded_weight(graph, inits, name, node.name)
            elif name not in inside and name not in unrounded:
                node.input[k] = _cast_pair(graph, name, name + _SUFFIX)
        graph.refresh(node)
    for node in members:
        for k, name in enumerate(node.output):
            if name and name not in unrounded and graph.leaves(name, group):
                node.output[k] = name + "__fp32"
                graph.refresh(node)
                _cast_pair(graph, node.output[k], name)
    for node in [n for n in members if n.op_type in ("HardSigmoid", "HardSwish")]:
        _gate_steps(graph, node)
    for node in [n for n in members if n.op_type in ("Max", "Min") and len(n.input) == 2
                 and n.name not in pools]:
        minmax_steps(graph, node, full_operand(proto, node))
    chains_as_written(graph, members, _cast_pair, opset)  # Rsqrt, GELU, LayerNorm
    for node in members:
        graph.refresh(node)  # a chain may have rewired a member (Rsqrt's Div)


def _divisions_as_products(graph: WorkingGraph, members: List[onnx.NodeProto],
                           inits: Dict[str, onnx.TensorProto], unrounded: Container[str]
                           ) -> None:
    """A Mul2D layer made of a Div by a constant c multiplies by fp16(1/c) (``mul2d.lower``:
    the reciprocal in float64, then float32, then fp16): its Div becomes that Mul here, the
    reciprocal a weight of its own (rounded with the others). Only a layer whose one product is
    that Div: a GELU's or a LayerNorm's Div is inside its kernel, not a Mul2D."""
    ops = [n.op_type for n in members]
    if ops.count("Div") != 1 or any(op in ("Mul", "Erf", "Sqrt", "HardSwish") for op in ops):
        return
    div = next(n for n in members if n.op_type == "Div")
    divisor = inits.get(div.input[1])
    if divisor is None or div.output[0] in unrounded or divisor.data_type != onnx.TensorProto.FLOAT:
        return
    name = f"{div.input[1]}__{div.name}__reciprocal"
    value = (1.0 / numpy_helper.to_array(divisor).astype(np.float64)).astype(np.float32)
    graph.initializer.append(numpy_helper.from_array(value, name))
    inits[name] = graph.initializer[-1]
    div.op_type = "Mul"
    div.input[1] = name
    graph.refresh(div)


def _opset(proto: onnx.ModelProto) -> int:
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 17)


def _rounded_weight(graph: WorkingGraph, inits: Dict[str, onnx.TensorProto], name: str,
                    reader: str) -> str:
    """A copy of the weight ``name`` rounded to fp16, for ``reader`` alone (the QDQ model may
    share it with an int8 layer, which must keep it)."""
    array = numpy_helper.to_array(inits[name])
    if array.dtype != np.float32:
        return name
    copy = f"{name}__{reader}{_SUFFIX}"
    if copy not in inits:
        rounded = round_to_fp16(np.ascontiguousarray(array))[0]
        graph.initializer.append(numpy_helper.from_array(rounded, copy))
        inits[copy] = graph.initializer[-1]
    return copy


def _cast_pair(graph: "onnx.GraphProto | WorkingGraph", source: str, target: str) -> str:
    """``target`` = ``source`` rounded to fp16 (two Casts), once per target name."""
    produced = graph.produces(target) if isinstance(graph, WorkingGraph) else any(
        target in n.output for n in graph.node)
    if not produced:
        half = target + "__half"
        graph.node.extend([
            helper.make_node("Cast", [source], [half], name=half, to=onnx.TensorProto.FLOAT16),
            helper.make_node("Cast", [half], [target], name=target + "__cast",
                             to=onnx.TensorProto.FLOAT)])
    return target


def _gate_steps(graph: WorkingGraph, node: onnx.NodeProto) -> None:
    """HardSigmoid and HardSwish as the lowering writes them (``mrvl.hardsigmoid``,
    ``mrvl.hardswish``): Mul2D by alpha, Sum2D with beta, Clip(0, 1) and, for HardSwish, Mul2D
    by x; each result rounded to fp16, the constants fp16 too. ``node``'s input is rounded
    already, its output is rounded after it."""
    attrs = {a.name: a.f for a in node.attribute}
    swish = node.op_type == "HardSwish"
    alpha, beta = (float(np.float16(v)) for v in (
        (1.0 / 6.0, 0.5) if swish else (attrs.get("alpha", 0.2), attrs.get("beta", 0.5))))
    x, y, base = node.input[0], node.output[0], node.name + _SUFFIX
    names = [f"{base}_alpha", f"{base}_beta", f"{base}_lo", f"{base}_hi"]
    graph.initializer.extend(numpy_helper.from_array(np.array(v, np.float32), n)
                             for n, v in zip(names, (alpha, beta, 0.0, 1.0)))
    gate = f"{base}_c" if swish else y
    steps = [helper.make_node("Mul", [x, names[0]], [f"{base}_m"], name=f"{base}_mul"),
             helper.make_node("Add", [_cast_pair(graph, f"{base}_m", f"{base}_m16"), names[1]],
                              [f"{base}_a"], name=f"{base}_add"),
             helper.make_node("Clip", [_cast_pair(graph, f"{base}_a", f"{base}_a16"),
                                       names[2], names[3]], [gate], name=f"{base}_clip")]
    if swish:
        steps.append(helper.make_node("Mul", [x, _cast_pair(graph, gate, f"{base}_c16")], [y],
                                      name=f"{base}_gate"))
    graph.node.remove(node)
    graph.node.extend(steps)


def full_operand(proto: onnx.ModelProto, node: onnx.NodeProto) -> int:
    """Which input of a two-input Max/Min has the output's shape, as ``layers/_minmax.py``
    chooses it: 0 unless the model's value infos say input 0 broadcasts."""
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in [*proto.graph.value_info, *proto.graph.input, *proto.graph.output]
            if v.name in (node.input[0], node.output[0])}
    first, out = dims.get(node.input[0]), dims.get(node.output[0])
    return 1 if first is not None and out is not None and first != out else 0


def minmax_steps(graph: WorkingGraph, node: onnx.NodeProto, full: int) -> None:
    """Max and Min as the lowering writes them (``layers/_minmax.py``, the device has no such
    layer): Sub(f, o) with Relu fused, rounded to fp16, then Sum2D(that, o) for Max or
    Sub(f, that) for Min. ``node``'s inputs are rounded already where the layer rounds them
    (a dequantized input is not: ``f - o`` then rounds where Max's own result would not),
    its output is rounded after it."""
    f, o, base = node.input[full], node.input[1 - full], node.name + _SUFFIX
    steps = [helper.make_node("Sub", [f, o], [f"{base}_d"], name=f"{base}_sub"),
             helper.make_node("Relu", [f"{base}_d"], [f"{base}_r"], name=f"{base}_relu")]
    gap = _cast_pair(graph, f"{base}_r", f"{base}_r16")
    steps.append(helper.make_node("Add", [o, gap], [node.output[0]], name=f"{base}_sum")
                 if node.op_type == "Max" else
                 helper.make_node("Sub", [f, gap], [node.output[0]], name=f"{base}_last"))
    graph.node.remove(node)
    graph.node.extend(steps)
