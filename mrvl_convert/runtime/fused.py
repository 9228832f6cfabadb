"""One onnxruntime session for a whole hybrid model, when its stages allow it.

Why: a model cut into stages (BERT's embedding Gather on CPU, then the encoder on the
accelerator) pays, per call, a session call and the Python between stages for each stage: on a
small model that is a large share of the time. When every Mrvl stage is one graph-engine segment
(``graph_engine.Segment``: no layer runs in numpy), the segments and the CPU stages are all ONNX
graphs, and they are wired by tensor names: here they become one graph, run by one session.

- requires: the session's stages, opened (``stages.py``), each Mrvl stage compiled with the
  graph engine;
- ensures: ``fuse`` gives a ``FusedModel`` or the reason there is none (``FusedModel.run`` then
  computes exactly what the stages compute, one after another: the same nodes, the same fp16
  roundings, by the same kernels); ``run`` returns None when a segment's range check fails or a
  CPU stage hands a Mrvl stage a shape other than the manifest's (onnxruntime and onnx's shape
  inference can disagree: ``session._check_cpu_results``), so that the caller runs the
  stages one by one and reports that call as it always has.

Names: each stage's own tensors and initializers get a prefix of their stage (``s<k>/``); the
tensors between stages keep the manifest's names. The CPU stages' default-domain opset is the
fused graph's; a segment (opset 13) is valid there up to opset 17 as written, and from opset 18
its Reduce nodes take their axes as an input instead of an attribute.

Memory: the fused session holds its own copy of every stage's weights in onnxruntime's forms
(the stages' sessions hold theirs, for the per-stage path), so a model whose stages hold more
than ``WEIGHT_LIMIT`` bytes of weights is not fused: there the per-call overhead is small beside
the work. (A model that is one Mrvl stage of one segment calls that segment's own session: no
second copy.)
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from mrvl_convert.runtime.graph_engine import RANGE_OUTPUT, Segment, value_name
from mrvl_convert.runtime.options import qdq_as_written, session_options

WEIGHT_LIMIT = 16 << 20
# The opsets a segment's nodes (written at opset 13) are valid in once their Reduce nodes'
# axes are inputs (``_as_opset``).
FIRST_OPSET, AXES_AS_INPUT = 13, 18
_REDUCE_WITH_AXES_ATTRIBUTE = ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                               "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                               "ReduceSumSquare")


@dataclass
class FusedModel:
    """The whole model as one onnxruntime session."""

    session: Any
    outputs: List[str]                          # the model outputs, in order
    ranges: List[str]                           # one range output per segment that checks
    shapes: List[Tuple[str, Tuple[int, ...]]]   # (a tensor a CPU stage gives a Mrvl stage,
                                                #  the manifest's shape)
    keep: Any = None                            # external initializers' arrays and OrtValues
    fetches: List[str] = field(default_factory=list)
    # (session input, model input) where they differ: a lone segment's inputs are its values
    renamed: Optional[List[Tuple[str, str]]] = None

    def run(self, feed: Dict[str, np.ndarray]) -> Optional[List[np.ndarray]]:
        """The model outputs in ``outputs`` order, or None (see the module docstring). Kept to
        a few Python steps: on a small model this call's own time is a share of the whole."""
        if self.renamed is not None:
            feed = {inner: feed[outer] for inner, outer in self.renamed}
        results = self.session.run(self.fetches, feed)
        n, checks = len(self.outputs), len(self.ranges)
        for total in results[n:n + checks]:
            if not math.isfinite(total.item()):
                return None
        for got, (_, want) in zip(results[n + checks:], self.shapes):
            if got.shape != want:
                return None
        return results[:n]


def fuse(stages: Sequence[Any], inputs: Sequence[Any], outputs: Sequence[Any], threads: int,
         log_severity: int) -> Union[FusedModel, str]:
    """The stages as one session, or why not (a sentence)."""
    reason = _why_not(stages, inputs, outputs)
    if reason:
        return reason
    if len(stages) == 1:
        return _lone_segment(stages[0], outputs)
    reason = _too_big(stages)
    if reason:
        return reason
    import onnx

    # Never the external data a file names: a stage that has some is not fused (``_why_not_cpu``)
    # and its location is the artifact's word, not ours.
    cpu = [_at_first_opset(onnx.load(stage.file, load_external_data=False))
           if stage.kind == "cpu" else None for stage in stages]
    reason = _why_not_cpu(cpu)
    if reason:
        return reason
    opsets = _opsets(cpu)
    graph = _Graph()
    for k, (stage, model) in enumerate(zip(stages, cpu)):
        if model is None:
            graph.add_segment(k, stage, opsets[""])
        else:
            graph.add_cpu(k, stage, model)
    return graph.open(stages, inputs, outputs, opsets, threads, log_severity)


def _lone_segment(stage: Any, outputs: Sequence[Any]) -> Union[FusedModel, str]:
    """A model that is one Mrvl stage of one segment: that segment's own session, called
    directly (what the stages would do, without the Python between), asked for the model
    outputs in the model's order (the stage may list them in another)."""
    compiled = stage.runner
    segment: Segment = compiled.graph.parts[0]
    by_node = {node.index: spec.name for node, spec in zip(compiled.inputs, stage.inputs)}
    heads = {spec.name: value_name((h, s))
             for spec, h, s in zip(stage.outputs, compiled.heads, compiled.head_slots)}
    fused = FusedModel(segment.session, [t.name for t in outputs],
                       [RANGE_OUTPUT] if segment.checks else [], [])
    fused.fetches = [heads[t.name] for t in outputs] + fused.ranges
    fused.renamed = [(name, by_node[node]) for name, node, _ in segment.feeds]
    made = {o.name for o in segment.session.get_outputs()}
    if not made.issuperset(fused.fetches):
        return "an output of the Mrvl stage is one of its inputs"
    return fused


def _why_not(stages: Sequence[Any], inputs: Sequence[Any], outputs: Sequence[Any]) -> str:
    if stages and stages[0].kind == "cpu" and len(stages) == 1:
        return "one CPU stage: onnxruntime runs it as it is"
    for stage in stages:
        if stage.kind != "mrvl":
            continue
        if getattr(stage.runner, "runs", 1) > 1:
            return f"Mrvl stage {stage.name} runs its batch in {stage.runner.runs} chunks"
        plan = stage.runner.graph
        if plan is None:
            return f"Mrvl stage {stage.name} runs layer by layer (engine 'layers')"
        if len(plan.parts) != 1 or not isinstance(plan.parts[0], Segment) or \
                plan.numpy_rounded:
            return f"Mrvl stage {stage.name} has layers that run in numpy"
        if any(t.dtype != "float32" for t in stage.inputs + stage.outputs):
            return f"Mrvl stage {stage.name} takes or gives int8 at its boundary"
    names = {t.name for t in inputs}
    if any(t.name in names for t in outputs):
        return "a model input is also a model output"
    return ""


def _too_big(stages: Sequence[Any]) -> str:
    """Why a second copy of the weights is not made (module docstring), read from the files'
    and the segments' sizes before anything is loaded."""
    size = 0
    for stage in stages:
        if stage.kind == "cpu":
            size += os.path.getsize(stage.file)
        else:
            segment: Segment = stage.runner.graph.parts[0]
            size += len(segment.model) + segment.weights.nbytes
    if size > WEIGHT_LIMIT:
        return (f"the stages hold {size} bytes of weights, more than the {WEIGHT_LIMIT} "
                "a second copy in one session may take")
    return ""


def _why_not_cpu(models: Sequence[Any]) -> str:
    from onnx import TensorProto

    for model in models:
        if model is None:
            continue
        g = model.graph
        if model.functions or g.sparse_initializer:
            return "a CPU stage has model functions or sparse initializers"
        if any(a.g.node or a.graphs for n in g.node for a in n.attribute):
            return "a CPU stage has control flow (If, Loop, Scan)"
        if any(t.data_location == TensorProto.EXTERNAL for t in g.initializer):
            return "a CPU stage keeps its weights in external data"
        default = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
        if default and default[0] < FIRST_OPSET:  # ``_at_first_opset`` could not convert it
            return (f"a CPU stage is at opset {default[0]}, which onnx's version converter "
                    f"cannot bring to the fused session's {FIRST_OPSET}")
    return ""


def _at_first_opset(model: Any) -> Any:
    """A CPU stage below ``FIRST_OPSET`` converted to it by onnx's version converter (exact:
    an opset-11 Softmax(axis=1) of a 4-D tensor becomes the Flatten/Softmax/Reshape that means
    the same at 13; read as it is at 13 it would mean another thing); as it is otherwise."""
    default = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not default or default[0] >= FIRST_OPSET:
        return model
    from onnx import version_converter
    try:
        return version_converter.convert_version(model, FIRST_OPSET)
    except Exception:  # onnx's ConvertError and others: then the stages run one by one
        return model


def _opsets(models: Sequence[Any]) -> Dict[str, int]:
    opsets: Dict[str, int] = {"": FIRST_OPSET}
    for model in models:
        for entry in [] if model is None else model.opset_import:
            domain = "" if entry.domain == "ai.onnx" else entry.domain
            opsets[domain] = max(opsets.get(domain, 0), entry.version)
    return opsets


class _Graph:
    """The fused graph being built."""

    def __init__(self) -> None:
        self.nodes: List[Any] = []
        self.initializers: List[Any] = []
        self.external: List[Tuple[str, np.ndarray]] = []
        self.ranges: List[str] = []
        self.pattern = True  # every segment's values are few enough for one block

    def add_cpu(self, k: int, stage: Any, model: Any) -> None:
        boundary = {t.name for t in stage.inputs + stage.outputs}
        rename = _Renamer(f"s{k}/", boundary)
        for tensor in model.graph.initializer:
            tensor.name = rename(tensor.name)
            self.initializers.append(tensor)
        for node in model.graph.node:
            _rename_node(node, rename)
            self.nodes.append(node)

    def add_segment(self, k: int, stage: Any, opset: int) -> None:
        import onnx

        compiled = stage.runner
        segment: Segment = compiled.graph.parts[0]
        self.pattern = self.pattern and segment.pattern
        graph = onnx.load_from_string(segment.model).graph
        outer = {value_name((node.index, 0)): spec.name
                 for node, spec in zip(compiled.inputs, stage.inputs)}
        prefix = f"s{k}/"
        rename = _Renamer(prefix, set(), outer)
        for tensor in graph.initializer:
            tensor.name = rename(tensor.name)
            for entry in tensor.external_data:
                if entry.key == "location":
                    entry.value = f"{tensor.name}.bin"
            self.initializers.append(tensor)
        # Read back from the segment's file if it spilled them: a fused model is small.
        self.external += [(rename(name), array) for name, array in segment.weights.items()]
        for node in graph.node:
            _rename_node(node, rename)
            self.nodes.extend(_as_opset(node, opset, rename))
        for (head, slot), spec in zip(zip(compiled.heads, compiled.head_slots), stage.outputs):
            self.nodes.append(onnx.helper.make_node(
                "Identity", [rename(value_name((head, slot)))], [spec.name]))
        if any(o.name == RANGE_OUTPUT for o in graph.output):
            self.ranges.append(rename(RANGE_OUTPUT))

    def open(self, stages: Sequence[Any], inputs: Sequence[Any], outputs: Sequence[Any],
             opsets: Dict[str, int], threads: int, log_severity: int) -> Union[FusedModel, str]:
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper

        from mrvl_convert.runtime.stages import DTYPES

        # What CPU stages hand to Mrvl stages is fetched, not a Shape node's output: onnxruntime
        # folds Shape to the shape onnx infers, which is what might be wrong.
        shapes = []
        model_inputs = {t.name for t in inputs}
        for stage in stages:
            if stage.kind == "mrvl":
                shapes += [(t.name, t.shape) for t in stage.inputs if t.name not in model_inputs]

        def info(spec: Any) -> Any:
            elem = helper.np_dtype_to_tensor_dtype(np.dtype(DTYPES[spec.dtype][0]))
            return helper.make_tensor_value_info(spec.name, elem, list(spec.shape))

        graph_outputs = [info(t) for t in outputs]
        graph_outputs += [helper.make_tensor_value_info(r, TensorProto.FLOAT, [])
                          for r in self.ranges]
        model_outputs = {t.name for t in outputs}
        graph_outputs += [helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
                          for name, _ in shapes if name not in model_outputs]
        graph = helper.make_graph(self.nodes, "mrvl_fused", [info(t) for t in inputs],
                                  graph_outputs, self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v)
                                                        for d, v in sorted(opsets.items())])
        model.ir_version = max(7, min(onnx.IR_VERSION, 9))
        options = qdq_as_written(session_options(threads, log_severity, spin=True,
                                                 mem_pattern=self.pattern))
        keep = None
        if self.external:
            values = [ort.OrtValue.ortvalue_from_numpy(a) for _, a in self.external]
            options.add_external_initializers([n for n, _ in self.external], values)
            keep = (self.external, values)
        try:
            session = ort.InferenceSession(model.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime's own untyped errors: run stage by stage
            return f"onnxruntime refuses the fused graph: {str(exc).splitlines()[0][:200]}"
        fused = FusedModel(session, [t.name for t in outputs], list(self.ranges), shapes, keep)
        fused.fetches = fused.outputs + fused.ranges + [name for name, _ in shapes]
        return fused


class _Renamer:
    """A stage's own names, prefixed; the names it shares with other stages, kept (or mapped:
    a segment's input ``v<node>_0`` is the stage's input tensor)."""

    def __init__(self, prefix: str, keep: set, mapped: Optional[Dict[str, str]] = None) -> None:
        self.prefix, self.keep, self.mapped = prefix, keep, mapped or {}

    def __call__(self, name: str) -> str:
        if not name or name in self.keep:
            return name
        return self.mapped.get(name, self.prefix + name)


def _rename_node(node: Any, rename: _Renamer) -> None:
    node.input[:] = [rename(i) for i in node.input]
    node.output[:] = [rename(o) for o in node.output]
    if node.name:
        node.name = rename.prefix + node.name


def _as_opset(node: Any, opset: int, rename: _Renamer) -> List[Any]:
    """``node`` (opset 13) as valid at ``opset``: from opset 18 a Reduce node's axes are an
    input (a Constant before it), not an attribute."""
    from onnx import helper

    axes = [a for a in node.attribute if a.name == "axes"]
    if opset < AXES_AS_INPUT or node.op_type not in _REDUCE_WITH_AXES_ATTRIBUTE or not axes:
        return [node]
    name = f"{node.output[0]}/axes"
    constant = helper.make_node("Constant", [], [name], value=helper.make_tensor(
        name, 7, [len(axes[0].ints)], list(axes[0].ints)))
    node.attribute.remove(axes[0])
    node.input.append(name)
    return [constant, node]
