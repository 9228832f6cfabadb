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

Range check: rounded layer outputs feed a ``ReduceSum``; the segment's extra output "range" is
the sum of those sums. A sum of float16-range values is finite exactly when every value is
(fp16.py's argument), so one float32 scalar per segment says whether any layer overflowed to
inf or made a NaN. A value some reader of which passes inf and NaN on (a Conv2D with no fused
activation, an Add, a reshape: ``Kernel.passes_nonfinite``) into
a covered value is not summed itself, nor is the output of a layer that cannot overflow on a
finite input whose input is covered (``range_checks``). Only when the range is not finite does
the engine look further: it runs the call again on the per-layer path, which names the layer
and its ``source_nodes`` (and warns or raises by the policy) exactly as before.

Memory: a segment with ``SPILL_BYTES`` of weights or more writes them to one file in a private
temporary directory (``TMPDIR``) and onnxruntime opens the segment from there, so that our
arrays are freed before onnxruntime builds its own form of them (``_session``); the kernels'
numpy path reads them back from that file, kept open, when it first needs them. A segment
whose values are few (``PATTERN_BYTES``) has onnxruntime plan them in one block (its memory
pattern: an allocation less per node, which counts on a small network).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from mrvl_convert.errors import ArtifactError
from mrvl_convert.kernels.fp16 import round_to_fp16
from mrvl_convert.kernels.base import Kernel
from mrvl_convert.kernels.onnx_form import OnnxBuilder
from mrvl_convert.kernels.weight_store import WeightStore
from mrvl_convert.runtime.options import session_options
from mrvl_convert.runtime.range_checks import ValueKey, range_checks

ENGINES = ("graph", "layers")
# From this many bytes of weights a segment's session reads them from a file (``_session``).
SPILL_BYTES = 4 << 20
# Up to this many bytes of values (three per rounded layer: its float32 result, the float16
# and the float32 rounded one) a segment's session plans them in one block (memory pattern).
PATTERN_BYTES = 16 << 20
RANGE_OUTPUT = "mrvl_range"


def has_onnx_form(kernel_class: type) -> bool:
    """Whether ``to_onnx`` describes the ``run`` this kernel class uses: the class that defines
    the form must be the one defining ``run`` (or ``compute``), or a subclass of it."""
    mro = kernel_class.__mro__
    owner = next(k for k in mro if "to_onnx" in vars(k))
    runner = next(k for k in mro if "run" in vars(k) or "compute" in vars(k))
    return owner is not Kernel and issubclass(owner, runner)


def onnx_form(kernel: Kernel) -> Optional[Callable[[OnnxBuilder, Sequence[str]],
                                                   Optional[List[str]]]]:
    """How to emit ``kernel`` into a segment: its class's own ``to_onnx``, or None (it runs in
    numpy)."""
    return kernel.to_onnx if has_onnx_form(type(kernel)) else None


@dataclass
class Segment:
    """Consecutive steps run as one onnxruntime session."""

    steps: List[Any]                     # program.Step, in order
    inputs: List[ValueKey]               # values read from outside, in session-input order
    outputs: List[Tuple[int, int]] = field(default_factory=list)  # (node, slots) handed out
    session: Any = None
    weights: Any = None                  # WeightStore: its external initializers
    keep: Any = None                     # the OrtValues onnxruntime reads, when in memory
    checks: List[ValueKey] = field(default_factory=list)  # values summed into the range
    # made once when the session opens, not on every call: (name, node, slot) per input, and
    # the names of the outputs onnxruntime is asked for
    feeds: List[Tuple[str, int, int]] = field(default_factory=list)
    fetches: List[str] = field(default_factory=list)
    model: bytes = b""                   # the serialized graph, for fused.py to merge
    pattern: bool = False                # whether its values are few enough for one block


def value_name(key: ValueKey) -> str:
    return f"v{key[0]}_{key[1]}"


class _Emitter:
    """A segment being built: steps are added while their kernels give an ONNX form."""

    def __init__(self, consts: Dict[str, np.ndarray], rounded_inputs: Set[int]) -> None:
        self.builder = OnnxBuilder(consts)
        self.rounded_inputs = rounded_inputs
        self.names: Dict[ValueKey, str] = {}
        self.rounded: Dict[ValueKey, str] = {}  # values rounded here: where overflow shows
        self.segment = Segment([], [])

    def add(self, step: Any) -> bool:
        """Emit ``step``; False (and nothing emitted) when its kernel has no ONNX form here."""
        form = onnx_form(step.kernel)
        if form is None:
            return False
        b, seg = self.builder, self.segment
        mark = (len(b.nodes), len(b.initializers), len(b.weights), dict(self.rounded),
                len(seg.inputs), dict(self.names))
        keys = list(zip(step.inputs, step.slots or (0,) * len(step.inputs)))
        outs = form(b, [self._name(key) for key in keys])
        if outs is None:  # undo the input names this step made
            del b.nodes[mark[0]:], b.initializers[mark[1]:]
            b.weights.drop_after(mark[2])
            del seg.inputs[mark[4]:]
            self.rounded, self.names = mark[3], mark[5]
            return False
        for slot, out in enumerate(outs):
            self.names[(step.node, slot)] = out if step.kernel.exact else \
                self._round((step.node, slot), out)
        seg.steps.append(step)
        return True

    def _name(self, key: ValueKey) -> str:
        """The tensor holding value ``key``: a segment input the first time it is read
        (rounded to float16 here if it is a subgraph input that goes in as float16)."""
        if key not in self.names:
            self.segment.inputs.append(key)
            self.names[key] = self._round(key, value_name(key)) \
                if key[0] in self.rounded_inputs else value_name(key)
        return self.names[key]

    def _round(self, key: ValueKey, out: str) -> str:
        """``out`` rounded to float16 and back (the Cast pair rounds to nearest even)."""
        from onnx import TensorProto

        half = self.builder.op("Cast", [out], to=TensorProto.FLOAT16)
        self.rounded[key] = self.builder.op("Cast", [half], to=TensorProto.FLOAT)
        return self.rounded[key]


class GraphPlan:
    """A subgraph's steps as numpy steps and compiled segments, in run order."""

    def __init__(self, steps: Sequence[Any], heads: Sequence[int], rounded_inputs: Set[int],
                 consts: Dict[str, np.ndarray], threads: int, file: str,
                 alone: bool = False, spill_bytes: int = SPILL_BYTES) -> None:
        """Emit the segments (``open`` opens them). ``rounded_inputs``: the subgraph input
        nodes that go in as float16 (the others feed only int8 layers); a segment rounds those
        it reads itself. ``alone``: nothing but this subgraph runs in a call (one stage), so if
        it is one segment, its workers may spin. ``consts`` is not kept. A segment with at
        least ``spill_bytes`` of weights hands them to onnxruntime through a file (``_session``).
        """
        parts: List[Any] = []
        current: Optional[_Emitter] = None
        for step in steps:
            emitter = current or _Emitter(consts, rounded_inputs)
            if emitter.add(step):
                current = emitter
                continue
            if current is not None:
                parts.append(current)
                current = None
            parts.append(step)
        if current is not None:
            parts.append(current)
        for part in parts:  # emitted: nothing reads the raw constants any more
            if isinstance(part, _Emitter):
                part.builder.consts = {}
        self._emitted = (parts, heads, rounded_inputs, threads, file, alone and len(parts) == 1,
                         spill_bytes)
        self.parts: List[Any] = []
        self.release: List[Tuple[int, ...]] = []
        self.numpy_rounded: List[int] = []

    def open(self) -> None:
        """Open the segments' onnxruntime sessions. Apart from emitting them (the constructor)
        so that the caller can let the raw constants go in between: onnxruntime copies the
        weights here, and the raw ones would add to that peak (``MrvlSimulator.compile``)."""
        parts, heads, rounded_inputs, threads, file, spin, spill_bytes = self._emitted
        self.parts = [_finish(p, parts, heads, threads, file, spin, spill_bytes)
                      if isinstance(p, _Emitter)
                      else p for p in parts]
        self._emitted = None
        self.release = released_after(self.parts, heads)
        read_by_numpy = {ref for part in self.parts if not isinstance(part, Segment)
                         for ref in part.inputs}
        self.numpy_rounded = sorted(rounded_inputs & read_by_numpy)

    def run(self, values: Dict[int, Any], compute: Callable[[Any, Dict[int, Any]], Any],
            pick: Callable[[Any, int], np.ndarray]) -> Optional[Dict[int, Any]]:
        """Run on the checked inputs ``values`` (node -> array); the values at the end (heads
        included), or None as soon as a layer or an input leaves the float16 range.
        ``compute(step, values)`` runs a numpy step: ``(output, in_range)``."""
        for index, value in values.items():
            values[index] = np.asarray(value, dtype=np.float32)
        for index in self.numpy_rounded:  # a copy: the caller's array stays as it was
            values[index], in_range = round_to_fp16(np.array(values[index]), inplace=True)
            if not in_range:
                return None
        for part, release in zip(self.parts, self.release):
            if isinstance(part, Segment):
                if not run_segment(part, values, pick):
                    return None
            else:
                with np.errstate(over="ignore", invalid="ignore"):  # reported by the rerun
                    values[part.node], in_range = compute(part, values)
                if not in_range:
                    return None
            for index in release:
                values.pop(index, None)
        return values


def _finish(emitter: _Emitter, parts: List[Any], heads: Sequence[int], threads: int,
            file: str, spin: bool = False, spill_bytes: int = SPILL_BYTES) -> Segment:
    """The emitted segment with its outputs (what later parts and the heads read), opened."""
    segment, builder = emitter.segment, emitter.builder
    read_later: Set[int] = set(heads)
    for part in parts:
        if part is not emitter:
            for step in part.segment.steps if isinstance(part, _Emitter) else [part]:
                read_later.update(step.inputs)
    segment.outputs = [(step.node, _output_count(step))
                       for step in segment.steps if step.node in read_later]
    checks = range_checks(segment.steps, set(emitter.rounded), read_later)
    # keepdims=0: the transpose optimizer then drops the layout of what is summed, where a
    # kept [1, 1, 1, 1] would keep a Transpose per check.
    sums = [builder.op("ReduceSum", [emitter.rounded[key]], keepdims=0) for key in checks]
    total = None if not sums else sums[0] if len(sums) == 1 else builder.op("Sum", sums)
    model = _model(segment, builder, emitter.names, total)
    segment.weights = builder.weights
    segment.pattern = 3 * sum(4 * int(np.prod(shape)) for step in segment.steps
                              for shape in _output_shapes(step)) <= PATTERN_BYTES
    options = session_options(threads, spin=spin, mem_pattern=segment.pattern)
    try:
        segment.session = _session(segment, model, options, spill_bytes)
    except Exception as exc:  # onnxruntime's own untyped errors: a kernel's form is wrong
        first, last = segment.steps[0].spec.name, segment.steps[-1].spec.name
        raise ArtifactError(f"{file}: onnxruntime refuses the graph engine's segment of layers "
                            f"{first} .. {last}: {str(exc).splitlines()[0]}; "
                            "engine='layers' runs them in numpy") from None
    segment.checks = checks
    segment.model = model
    segment.feeds = [(value_name(k), k[0], k[1]) for k in segment.inputs]
    segment.fetches = [o.name for o in segment.session.get_outputs()]
    return segment


def _session(segment: Segment, model: bytes, options: Any, spill_bytes: int) -> Any:
    """The segment's onnxruntime session. Weights of ``spill_bytes`` or more go through a
    file in a private temporary directory (``WeightStore.spill``): onnxruntime then reads them
    itself and ours are dropped before it builds its own form, the peak of opening. Where no
    such directory can be written, or below that size, onnxruntime reads our arrays in place."""
    import tempfile

    import onnxruntime as ort

    store: WeightStore = segment.weights
    if store.nbytes >= spill_bytes:
        try:
            with tempfile.TemporaryDirectory(prefix="mrvl-segment-",
                                             ignore_cleanup_errors=True) as tmp:
                path = store.spill(tmp, model)
                return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        except OSError:  # no writable temporary directory: the arrays stay ours
            if store.spilled:
                raise
    arrays = store.arrays()
    if arrays:
        segment.keep = [ort.OrtValue.ortvalue_from_numpy(a) for a in arrays.values()]
        options.add_external_initializers(list(arrays), segment.keep)
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _output_shapes(step: Any) -> Tuple[Tuple[int, ...], ...]:
    return tuple(step.spec.out_shapes or (step.spec.shape,))


def _output_count(step: Any) -> int:
    return len(_output_shapes(step))


def _model(segment: Segment, builder: OnnxBuilder, names: Dict[ValueKey, str],
           total: Optional[str]) -> bytes:
    from onnx import TensorProto, helper

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
                                                         list(_value_shape(segment,
                                                                           (node, slot)))))
    if total is not None:
        builder.nodes.append(helper.make_node("Identity", [total], [RANGE_OUTPUT]))
        outputs.append(helper.make_tensor_value_info(RANGE_OUTPUT, TensorProto.FLOAT, []))
    graph = helper.make_graph(builder.nodes, "mrvl_sim_segment", graph_inputs, outputs,
                              builder.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7  # what every onnxruntime this project supports accepts
    return model.SerializeToString()


def _value_shape(segment: Segment, key: ValueKey) -> Tuple[int, ...]:
    """The shape of a value the segment makes, or reads from outside."""
    for step in segment.steps:
        if step.node == key[0]:
            return tuple(_output_shapes(step)[key[1]])
    return _input_shape(segment, key)


def _input_shape(segment: Segment, key: ValueKey) -> Tuple[int, ...]:
    for step in segment.steps:
        for (ref, slot), shape in zip(zip(step.inputs, step.slots or (0,) * len(step.inputs)),
                                      step.spec.input_shapes):
            if (ref, slot) == key:
                return shape
    raise AssertionError(key)  # pragma: no cover - every input is read by some step


def run_segment(segment: Segment, values: Dict[int, Any],
                pick: Callable[[Any, int], np.ndarray]) -> bool:
    """Run one segment on ``values`` (node -> array, or tuple for several outputs), storing its
    outputs there; False when some layer went out of the float16 range."""
    feed = {name: pick(values[node], slot) for name, node, slot in segment.feeds}
    results = segment.session.run(segment.fetches, feed)
    position = 0
    for node, count in segment.outputs:
        got = results[position:position + count]
        values[node] = got[0] if count == 1 else tuple(got)
        position += count
    return not segment.checks or bool(np.isfinite(results[-1]))


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    return engine


def released_after(parts: Sequence[Any], heads: Sequence[int]) -> List[Tuple[int, ...]]:
    """Per part, the values no later part reads (never the subgraph outputs). A segment reads
    only its ``inputs`` from the values: what its steps make and read inside it never leaves
    onnxruntime, and releasing it would be a dictionary miss per value on every call."""
    last: Dict[int, int] = {}
    for position, part in enumerate(parts):
        reads = [node for node, _ in part.inputs] if isinstance(part, Segment) else part.inputs
        for ref in reads:
            last[ref] = position
    keep = set(heads)
    out: List[List[int]] = [[] for _ in parts]
    for ref, position in last.items():
        if ref not in keep:
            out[position].append(ref)
    return [tuple(sorted(r)) for r in out]
