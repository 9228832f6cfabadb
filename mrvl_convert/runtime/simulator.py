"""The fp16 Mrvl simulator: an execution-provider-like object for Nodes-JSON + Constants-JSON.

``MrvlSimulator.get_capability`` says which layers it can run, ``compile`` reads exactly the two
JSON files into steps (``program.py``: one kernel per layer), ``CompiledSubgraph.run`` executes
them in order with the fp16 number model of ``fp16.py``. With ``engine="graph"`` (the default)
compile also groups the runs of layers that have an ONNX form into onnxruntime sessions
(``graph_engine.py``), which ``run`` uses unless every layer's output is asked for (``trace``)
or a layer leaves the float16 range.

- requires: a program ``read_program`` validated, and per call the subgraph's inputs (float32,
  or any numeric dtype, of the input nodes' shapes);
- ensures: float32 outputs in heads order, every non-exact layer's output rounded to float16;
  a layer whose output holds inf or NaN raises ``Fp16RangeError`` or warns
  (``Fp16RangeWarning``) by the range policy, naming the layer and its ONNX source nodes
  (``RangeEvent``).
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from mrvl_convert.errors import Fp16RangeError, InputFeedError
from mrvl_convert.core.artifact import first_value
from mrvl_convert.kernels.fp16 import round_to_fp16
from mrvl_convert.kernels.gemm import GemmEngine
from mrvl_convert.runtime import graph_engine
from mrvl_convert.runtime.program import InputNode, Step, read_program
from mrvl_convert.layers import CATALOGUE
from mrvl_convert.kernels.layerspec import LayerSpec, Shape

RANGE_POLICIES = ("raise", "warn")
Feed = Union[Mapping[str, Any], Sequence[Any]]


class Fp16RangeWarning(UserWarning):
    """Issued instead of Fp16RangeError when on_range_error='warn'."""


@dataclass(frozen=True)
class RangeEvent:
    """A layer whose float16 output held inf or NaN."""

    layer: str
    layer_name: str
    source_nodes: Tuple[str, ...]
    n_inf: int
    n_nan: int
    # True when the layer is a partial result of a decomposition (a LayerNorm's variance, a
    # GELU's cube): ``source_nodes`` are then the nodes the decomposition's last layer stands for
    partial: bool = False

    def describe(self) -> str:
        origin = ", ".join(self.source_nodes) or "(no ONNX source)"
        where = f"a partial result of the layers for ONNX nodes {origin}" if self.partial \
            else f"from ONNX nodes {origin}"
        return (f"Mrvl layer {self.layer} ({self.layer_name}, {where}): "
                f"float16 output has {self.n_inf} inf and {self.n_nan} NaN values "
                f"(|x| > 65504 overflows float16); rescale the model or keep these nodes on CPU")


class CompiledSubgraph:
    """A compiled Mrvl subgraph; ``run`` may be called any number of times."""

    def __init__(self, symbol: str, file: str, inputs: List[InputNode], steps: List[Step],
                 heads: List[Tuple[int, int]], shapes: Dict[int, Tuple[Shape, ...]],
                 on_range_error: str) -> None:
        self.symbol = symbol
        self.file = file
        self.inputs = inputs
        self.steps = steps
        self.heads = [h for h, _ in heads]
        self.head_slots = [slot for _, slot in heads]
        self.output_shapes = [shapes[h][slot] for h, slot in heads]
        self.on_range_error = on_range_error
        self.last_range_events: List[RangeEvent] = []
        # The graph engine's plan (graph_engine.py); None runs every layer in numpy.
        self.graph: Optional[graph_engine.GraphPlan] = None

    def use_graph_engine(self, consts: Dict[str, np.ndarray], threads: int,
                         alone: bool = False) -> None:
        """Compile the runs of layers that have an ONNX form into onnxruntime sessions."""
        self.open_graph(self.plan_graph(consts, threads, alone))

    def plan_graph(self, consts: Dict[str, np.ndarray], threads: int,
                   alone: bool = False) -> graph_engine.GraphPlan:
        """The graph engine's segments, emitted but not opened (``open_graph``): the caller
        may let ``consts`` go in between, the segments hold what they need of it."""
        rounded = {node.index for node in self.inputs if node.fp16}
        return graph_engine.GraphPlan(self.steps, self.heads, rounded, consts, threads,
                                      self.file, alone)

    def open_graph(self, plan: graph_engine.GraphPlan) -> None:
        plan.open()
        self.graph = plan

    @property
    def input_names(self) -> List[str]:
        return [node.name for node in self.inputs]

    @property
    def layers(self) -> List[LayerSpec]:
        return [step.spec for step in self.steps]

    def run(self, inputs: Feed, *, on_range_error: Optional[str] = None) -> List[np.ndarray]:
        """Inputs by input-node name (dict) or in arg_nodes order (list); float32 outputs in
        heads order. ``last_range_events`` then holds this run's range events."""
        events: List[RangeEvent] = []
        try:
            return self.execute(inputs, events, on_range_error=on_range_error)
        finally:
            self.last_range_events = events

    def execute(self, inputs: Feed, events: List[RangeEvent], *,
                on_range_error: Optional[str] = None,
                trace: Optional[List[Tuple[LayerSpec, np.ndarray]]] = None) -> List[np.ndarray]:
        """``run`` with this call's range events appended to ``events``, the caller's list, and
        (if ``trace`` is a list) every layer's fp16 output appended to it with its LayerSpec.

        Nothing of a call is kept on the object, so calls may overlap in several threads (as
        onnxruntime's ``InferenceSession.run`` may): kernels hold only what compile built, and
        numpy's errstate is per thread.
        """
        policy = _check_policy(on_range_error or self.on_range_error)
        # A trace needs every layer's output: the per-layer path gives them. A range hit in
        # the graph engine is named by running the call again per layer (graph_engine.py).
        if self.graph is not None and trace is None:
            arrays = {node.index: self._checked(node, a) for node, a in
                      zip(self.inputs, self._arrays(inputs))}
            values = self.graph.run(arrays, _compute, _pick)
            if values is not None:
                return [np.array(_pick(values[h], s), dtype=np.float32, copy=True)
                        for h, s in zip(self.heads, self.head_slots)]
        values = self._feed(inputs, policy, events)
        # Overflow and NaN are the simulator's to report, with source_nodes (_range_error);
        # one errstate for the whole run, as entering it costs more than a small layer.
        with np.errstate(over="ignore", invalid="ignore"):
            for step in self.steps:
                self._run_step(step, values, policy, events, trace)
        # Activations are already fp16-valued float32 (fp16.py): hand back float32 copies.
        return [np.array(_pick(values[h], s), dtype=np.float32, copy=True)
                for h, s in zip(self.heads, self.head_slots)]

    def _run_step(self, step: Step, values: Dict[int, Any], policy: str,
                  events: List[RangeEvent],
                  trace: Optional[List[Tuple[LayerSpec, np.ndarray]]] = None) -> None:
        out, in_range = _compute(step, values)
        if not in_range:
            self._range_error(step.spec, out, policy, events)
        values[step.node] = out
        if trace is not None:  # no copy: no later step writes into an earlier output
            trace.append((step.spec, _pick(out, 0)))
        for index in step.release:
            del values[index]

    def _feed(self, inputs: Feed, policy: str,
              events: List[RangeEvent]) -> Dict[int, np.ndarray]:
        return {node.index: self._one_input(node, a, policy, events)
                for node, a in zip(self.inputs, self._arrays(inputs))}

    def _arrays(self, inputs: Feed) -> List[Any]:
        """The fed values in input-node order (not yet checked)."""
        if isinstance(inputs, Mapping):
            unknown = sorted(set(inputs) - set(self.input_names))
            if unknown:
                raise InputFeedError(f"{self.file}: unknown input(s) {unknown}; this subgraph "
                                     f"takes {self.input_names}", tensor=unknown[0])
            missing = [n for n in self.inputs if n.name not in inputs]
            if missing:
                raise InputFeedError(f"{self.file}: input missing; expected float32 of shape "
                                     f"{list(missing[0].shape)}", tensor=missing[0].name)
            arrays = [inputs[node.name] for node in self.inputs]
        else:
            arrays = list(inputs)
            if len(arrays) != len(self.inputs):
                raise InputFeedError(f"{self.file}: got {len(arrays)} inputs, expected "
                                     f"{len(self.inputs)} ({self.input_names})")
        return arrays

    def _one_input(self, node: InputNode, value: Any, policy: str,
                   events: List[RangeEvent]) -> np.ndarray:
        array = self._checked(node, value)
        if not node.fp16:
            return array.astype(np.float32)
        # Inputs go in as float16; astype copies, so rounding in place leaves the caller's data.
        rounded, in_range = round_to_fp16(array.astype(np.float32), inplace=True)
        if not in_range:
            spec = LayerSpec(node.index, node.name, "input", {}, (), node.shape, (), self.file)
            self._range_error(spec, rounded, policy, events)
        return rounded

    def _checked(self, node: InputNode, value: Any) -> np.ndarray:
        """A fed value as an array, its dtype numeric and its shape the node's."""
        array = np.asarray(value)
        if array.dtype.kind not in "fiu":
            raise InputFeedError(f"{self.file}: dtype {array.dtype} is not numeric; expected "
                                 f"float32 of shape {list(node.shape)}", tensor=node.name)
        if tuple(array.shape) != node.shape:
            raise InputFeedError(f"{self.file}: shape {list(array.shape)}, expected "
                                 f"{list(node.shape)}", tensor=node.name)
        return array

    def _range_error(self, spec: LayerSpec, out: np.ndarray, policy: str,
                     events: List[RangeEvent]) -> None:
        sources, partial = self._origin(spec)
        event = RangeEvent(spec.name, spec.layer_name, sources,
                           int(np.count_nonzero(np.isinf(out))),
                           int(np.count_nonzero(np.isnan(out))), partial)
        events.append(event)
        if policy == "raise":
            raise Fp16RangeError(f"{self.file}: {event.describe()}", layer=spec.name,
                                 source_nodes=sources)
        warnings.warn(Fp16RangeWarning(f"{self.file}: {event.describe()}"), stacklevel=4)

    def _origin(self, spec: LayerSpec) -> Tuple[Tuple[str, ...], bool]:
        """The ONNX nodes a layer stands for, and whether it is a partial result: a layer of a
        decomposition before its last has none of its own (the per-layer comparison skips it),
        so its error names those of the first layer after it that has some."""
        if spec.source_nodes or spec.layer_name == "input":
            return tuple(spec.source_nodes), False
        readers: Dict[int, List[Step]] = {}
        for step in self.steps:
            for ref in step.inputs:
                readers.setdefault(ref, []).append(step)
        queue, seen = [spec.index], {spec.index}
        while queue:
            for step in readers.get(queue.pop(0), ()):
                if step.spec.source_nodes:
                    return tuple(step.spec.source_nodes), True
                if step.node not in seen:
                    seen.add(step.node)
                    queue.append(step.node)
        return (), False


class MrvlSimulator:
    """Execution-provider-like front end of the simulator."""

    def __init__(self, on_range_error: str = "raise", *,
                 gemm: "str | GemmEngine" = "numpy", engine: str = "graph",
                 threads: int = 0) -> None:
        """``gemm``: which library runs the Conv2D / FC matrix products of the per-layer path
        (gemm.py), by name or as a ``GemmEngine`` with an onnxruntime thread count.
        ``engine``: "graph" (default) runs each run of layers that have an ONNX form as one
        onnxruntime session with ``threads`` intra-op threads (graph_engine.py); "layers" runs
        every layer in numpy, one kernel at a time (the specification). The fp16 number model
        is the same; per layer the two agree to one float16 ulp (to float32's own error where
        a sum cancels to far below the layer's scale: tests/runtime/test_graph_engine.py)."""
        self.on_range_error = _check_policy(on_range_error)
        self.gemm = GemmEngine.of(gemm)
        self.engine = graph_engine.check_engine(engine)
        self.threads = threads

    def get_capability(self, nodes_json: Dict[str, Any]) -> List[Dict[str, Any]]:
        """Per layer node: index, name, layer_name, supported and (if not) the reason."""
        rows = []
        for index, node in enumerate(nodes_json.get("nodes", [])):
            if not isinstance(node, dict) or node.get("op") == "input":
                continue
            attrs = node.get("attrs") if isinstance(node.get("attrs"), dict) else {}
            layer_name = first_value(attrs.get("layer_name"))
            kind = CATALOGUE.get(layer_name) if isinstance(layer_name, str) else None
            if kind is None:
                reason = f"no simulator kernel for layer_name {layer_name!r}"
            else:
                reason = kind.capability_issue(attrs)
            rows.append({"index": index, "name": node.get("name"), "layer_name": layer_name,
                         "supported": reason is None, "reason": reason})
        return rows

    def compile(self, nodes_json_path: "str | os.PathLike[str]",
                consts_json_path: "str | os.PathLike[str]", *,
                alone: bool = False) -> CompiledSubgraph:
        """Read exactly these two files, validate them and build the kernels. ``alone``: the
        caller runs nothing else in a call (a one-stage model), so a subgraph that is one
        onnxruntime session may let its idle workers spin, as onnxruntime does by default."""
        program = read_program(str(nodes_json_path), str(consts_json_path), self.gemm)
        compiled = CompiledSubgraph(program.symbol, program.file, program.inputs, program.steps,
                                    program.heads, program.shapes, self.on_range_error)
        if self.engine == "graph":
            plan = compiled.plan_graph(program.consts, self.threads, alone)
            # The raw constants die here (the kernels hold the few the segments do not), before
            # onnxruntime makes its own copies of the weights: not all three at the peak.
            del program
            compiled.open_graph(plan)
        return compiled


def _compute(step: Step, values: Dict[int, Any]) -> Tuple[Any, bool]:
    """One layer in numpy, its output rounded to float16 unless the kernel is exact; and
    whether it stayed in float16's range."""
    out = step.kernel.run(*(_pick(values[i], s) for i, s in
                            zip(step.inputs, step.slots or (0,) * len(step.inputs))))
    if step.kernel.exact:
        return out, True
    return round_to_fp16(out, inplace=True)


def _pick(value: Any, slot: int) -> np.ndarray:
    """Output ``slot`` of a node's value: a multi-output kernel returns a tuple of arrays."""
    return value[slot] if isinstance(value, tuple) else value


def _check_policy(policy: str) -> str:
    if policy not in RANGE_POLICIES:
        raise ValueError(f"on_range_error must be one of {RANGE_POLICIES}, got {policy!r}")
    return policy
