"""The graph engine: runs of layers of a compiled Mrvl subgraph as one onnxruntime session each.

Why: the per-layer simulator makes a few numpy calls per layer, and on a small network that
Python overhead, not arithmetic, is the time. Here every maximal run of consecutive layers whose
kernels have an ONNX form (``Kernel.to_onnx``) becomes ONE ``InferenceSession`` ("segment"),
built in memory at compile time from what the kernels read from the Nodes-JSON and
Constants-JSON; layers without a form (the int8 kernels, anything exotic) run in numpy between
segments, exactly as in the per-layer path.

Numbers: the fp16 model of ``fp16.py`` holds by construction. Weights are the kernels'
fp16-rounded constants, stored as float32; every layer that is not ``exact`` is followed by
``Cast(to=FLOAT16) -> Cast(to=FLOAT)``, which rounds to nearest even exactly as the per-layer
path's rounding does (fp16.py uses the same Cast pair); ``exact`` layers (selections and
rearrangements) are not rounded there either. Products are still summed in float32, but by
onnxruntime's kernels (MLAS Conv / Gemm, its own exp and tanh) in their own order: a layer's
float32 result can differ from numpy's in the last bits, which after rounding to float16 gives
the same value or its neighbour (one fp16 ulp). Layers that are one float32 operation per
element (Add, Mul, Relu, Clip, max/min, copies) give identical values.
``tests/runtime/test_graph_engine.py`` checks both, layer by layer.

Range check: each rounded layer output also feeds a ``ReduceSum``; the segment's extra output
"range" is the sum of those sums. A sum of float16-range values is finite exactly when every
value is (fp16.py's argument), so one float32 scalar per segment says whether any layer
overflowed to inf or made a NaN. Only then does the engine look further: it runs the call again
on the per-layer path, which names the layer and its ``source_nodes`` (and warns or raises by
the policy) exactly as before.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Sequence, Set, Tuple

import numpy as np

from ..errors import ArtifactError
from .kernel_base import Kernel
from .onnx_form import OnnxBuilder

ENGINES = ("graph", "layers")
RANGE_OUTPUT = "mrvl_range"

#: (producing node index, output slot) of one activation value.
ValueKey = Tuple[int, int]


def has_onnx_form(kernel: Kernel) -> bool:
    """Whether ``kernel.to_onnx`` describes the ``run`` in use: the class that defines the form
    must be the one defining ``run`` (or ``compute``), or a subclass of it."""
    mro = type(kernel).__mro__
    owner = next(k for k in mro if "to_onnx" in vars(k))
    runner = next(k for k in mro if "run" in vars(k) or "compute" in vars(k))
    return owner is not Kernel and issubclass(owner, runner)


@dataclass
class Segment:
    """Consecutive steps run as one onnxruntime session."""

    steps: List[Any]                     # simulator._Step, in order
    inputs: List[ValueKey]               # values read from outside, in session-input order
    outputs: List[Tuple[int, int]]       # (node, number of slots) handed out after the run
    session: Any = None
    keep: Any = None                     # arrays onnxruntime reads as external initializers
    checks_range: bool = False


def value_name(key: ValueKey) -> str:
    return f"v{key[0]}_{key[1]}"


def plan(steps: Sequence[Any], heads: Sequence[int]) -> List[Any]:
    """The steps grouped: each element is a numpy step or a ``Segment`` (not yet compiled)."""
    parts: List[Any] = []
    run: List[Any] = []
    for step in steps:
        if has_onnx_form(step.kernel):
            run.append(step)
            continue
        if run:
            parts.append(run)
            run = []
        parts.append(step)
    if run:
        parts.append(run)
    return [_segment(part, parts, heads) if isinstance(part, list) else part for part in parts]


def _segment(steps: List[Any], parts: List[Any], heads: Sequence[int]) -> Segment:
    inside = {step.node for step in steps}
    inputs: List[ValueKey] = []
    for step in steps:
        for ref, slot in zip(step.inputs, step.slots or (0,) * len(step.inputs)):
            if ref not in inside and (ref, slot) not in inputs:
                inputs.append((ref, slot))
    needed = _read_after(steps, parts) | set(heads)
    outputs = [(step.node, len(step.spec.out_shapes or (step.spec.shape,)))
               for step in steps if step.node in needed]
    return Segment(steps, inputs, outputs)


def _read_after(steps: List[Any], parts: List[Any]) -> Set[int]:
    """Nodes read by steps outside ``steps`` (the other parts)."""
    read: Set[int] = set()
    for part in parts:
        if part is steps:
            continue
        for step in part if isinstance(part, list) else [part]:
            read.update(step.inputs)
    return read


def compile_segment(segment: Segment, consts: Dict[str, np.ndarray], threads: int,
                    file: str) -> None:
    """Build the segment's model from its kernels' ONNX forms and open its session."""
    import onnxruntime as ort

    builder = OnnxBuilder(consts)
    names: Dict[ValueKey, str] = {key: value_name(key) for key in segment.inputs}
    sums: List[str] = []
    for step in segment.steps:
        slots = step.slots or (0,) * len(step.inputs)
        outs = step.kernel.to_onnx(builder, [names[(r, s)] for r, s in zip(step.inputs, slots)])
        if outs is None:
            raise ArtifactError(f"{file}: layer {step.spec.name}: its kernel declined an ONNX "
                                "form after offering one")  # a kernel bug, not user input
        for slot, out in enumerate(outs):
            if not step.kernel.exact:
                out = _rounded(builder, out, sums)
            names[(step.node, slot)] = out
    model = _model(segment, builder, names, sums)
    options = session_options(threads)
    if builder.external:
        values = [ort.OrtValue.ortvalue_from_numpy(a) for _, a in builder.external]
        options.add_external_initializers([n for n, _ in builder.external], values)
        segment.keep = (builder.external, values)
    segment.session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    segment.checks_range = bool(sums)


def _rounded(builder: OnnxBuilder, out: str, sums: List[str]) -> str:
    """``out`` rounded to float16 and back, its ReduceSum appended to ``sums``."""
    from onnx import TensorProto

    half = builder.op("Cast", [out], to=TensorProto.FLOAT16)
    back = builder.op("Cast", [half], to=TensorProto.FLOAT)
    sums.append(builder.op("ReduceSum", [back], keepdims=0))
    return back


def _model(segment: Segment, builder: OnnxBuilder, names: Dict[ValueKey, str],
           sums: List[str]) -> bytes:
    from onnx import TensorProto, helper

    shapes = {}
    for step in segment.steps:
        for slot, shape in enumerate(step.spec.out_shapes or (step.spec.shape,)):
            shapes[(step.node, slot)] = shape
    graph_inputs = [helper.make_tensor_value_info(value_name(k), TensorProto.FLOAT,
                                                  list(_input_shape(segment, k)))
                    for k in segment.inputs]
    outputs = []
    for node, count in segment.outputs:
        for slot in range(count):
            # Name the output as the value it is: an Identity when the producer's name differs.
            builder.nodes.append(helper.make_node("Identity", [names[(node, slot)]],
                                                  [value_name((node, slot))]))
            outputs.append(helper.make_tensor_value_info(value_name((node, slot)),
                                                         TensorProto.FLOAT,
                                                         list(shapes[(node, slot)])))
    if sums:
        builder.nodes.append(helper.make_node("Sum", sums, [RANGE_OUTPUT]))
        outputs.append(helper.make_tensor_value_info(RANGE_OUTPUT, TensorProto.FLOAT, []))
    graph = helper.make_graph(builder.nodes, "mrvl_sim_segment", graph_inputs, outputs,
                              builder.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7  # what every onnxruntime this project supports accepts
    return model.SerializeToString()


def _input_shape(segment: Segment, key: ValueKey) -> Tuple[int, ...]:
    for step in segment.steps:
        for (ref, slot), shape in zip(zip(step.inputs, step.slots or (0,) * len(step.inputs)),
                                      step.spec.input_shapes):
            if (ref, slot) == key:
                return shape
    raise AssertionError(key)  # pragma: no cover - every input is read by some step


def session_options(threads: int) -> Any:
    """One intra-op budget, idle workers asleep (as the CPU stages), no inter-op pool."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return options


def run_segment(segment: Segment, values: Dict[int, Any],
                pick: Callable[[Any, int], np.ndarray]) -> bool:
    """Run one segment on ``values`` (node -> array, or tuple for several outputs), storing its
    outputs there; False when some layer went out of the float16 range."""
    feed = {value_name(k): pick(values[k[0]], k[1]) for k in segment.inputs}
    results = segment.session.run(None, feed)
    position = 0
    for node, count in segment.outputs:
        got = results[position:position + count]
        values[node] = got[0] if count == 1 else tuple(got)
        position += count
    return not segment.checks_range or bool(np.isfinite(results[-1]))


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    return engine


def released_after(parts: Sequence[Any], heads: Sequence[int]) -> List[Tuple[int, ...]]:
    """Per part, the values no later part reads (never the subgraph outputs)."""
    last: Dict[int, int] = {}
    for position, part in enumerate(parts):
        for step in part.steps if isinstance(part, Segment) else [part]:
            for ref in step.inputs:
                last[ref] = position
    keep = set(heads)
    out: List[List[int]] = [[] for _ in parts]
    for ref, position in last.items():
        if ref not in keep:
            out[position].append(ref)
    return [tuple(sorted(r)) for r in out]
