"""The fp16 Mrvl simulator: an execution-provider-like object for Nodes-JSON + Constants-JSON.

``MrvlSimulator.get_capability`` says which layers it can run, ``compile`` reads exactly the two
JSON files (nothing else: if they are not enough to run a layer, the artifact is incomplete) and
builds one kernel per layer, ``CompiledSubgraph.run`` executes them in order with the fp16
number model of ``fp16.py``. With ``engine="graph"`` (the default) compile also groups the runs
of layers that have an ONNX form into onnxruntime sessions (``graph_engine.py``), which ``run``
uses unless every layer's output is asked for (``trace``) or a layer leaves the float16 range.
"""
from __future__ import annotations

import dataclasses
import os
import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from mrvl_convert.errors import ArtifactError, Fp16RangeError, InputFeedError
from mrvl_convert.core.artifact import decode_consts, first_value, node_entries, read_json, require, shape_of
from mrvl_convert.kernels.fp16 import round_to_fp16
from mrvl_convert.kernels.gemm import GemmEngine
from mrvl_convert.runtime import graph_engine
from mrvl_convert.layers import CATALOGUE
from mrvl_convert.layers import r4_shape
from mrvl_convert.kernels.base import Kernel
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

    def describe(self) -> str:
        origin = ", ".join(self.source_nodes) or "(no ONNX source)"
        return (f"Mrvl layer {self.layer} ({self.layer_name}, from ONNX nodes {origin}): "
                f"float16 output has {self.n_inf} inf and {self.n_nan} NaN values "
                f"(|x| > 65504 overflows float16); rescale the model or keep these nodes on CPU")


@dataclass(frozen=True)
class InputNode:
    index: int
    name: str
    shape: Shape
    # False when only quant layers read it: an int8 region quantizes the float32 input itself,
    # as onnxruntime's QuantizeLinear does, without a float16 rounding first.
    fp16: bool = True


@dataclass(frozen=True)
class _Step:
    node: int
    spec: LayerSpec
    kernel: Kernel
    inputs: Tuple[int, ...]
    release: Tuple[int, ...]  # values no later step needs: freed to keep the working set small
    slots: Tuple[int, ...] = ()  # the output slot of each input (all 0 unless a Split feeds it)


class CompiledSubgraph:
    """A compiled Mrvl subgraph; ``run`` may be called any number of times."""

    def __init__(self, symbol: str, file: str, inputs: List[InputNode], steps: List[_Step],
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
        rounded = {node.index for node in self.inputs if node.fp16}
        self.graph = graph_engine.GraphPlan(self.steps, self.heads, rounded, consts, threads,
                                            self.file, alone)

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

    def _run_step(self, step: _Step, values: Dict[int, Any], policy: str,
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
        event = RangeEvent(spec.name, spec.layer_name, spec.source_nodes,
                           int(np.count_nonzero(np.isinf(out))),
                           int(np.count_nonzero(np.isnan(out))))
        events.append(event)
        if policy == "raise":
            raise Fp16RangeError(f"{self.file}: {event.describe()}", layer=spec.name,
                                 source_nodes=spec.source_nodes)
        warnings.warn(Fp16RangeWarning(f"{self.file}: {event.describe()}"), stacklevel=4)


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
        nodes_path, consts_path = str(nodes_json_path), str(consts_json_path)
        doc = read_json(nodes_path, "Nodes-JSON")
        consts = decode_consts(consts_path, read_json(consts_path, "Constants-JSON",
                                                      max_bytes=None))
        compiled = _GraphBuilder(nodes_path, doc, consts, self.gemm).build(self.on_range_error)
        if self.engine == "graph":
            compiled.use_graph_engine(consts, self.threads, alone)
        return compiled


class _GraphBuilder:
    """Validates a Nodes-JSON document node by node and turns it into steps."""

    def __init__(self, path: str, doc: Any, consts: Dict[str, np.ndarray],
                 gemm: GemmEngine) -> None:
        if not isinstance(doc, dict):
            raise ArtifactError(f"{path}: a Nodes-JSON must be a JSON object")
        self.path, self.doc, self.consts, self.gemm = path, doc, consts, gemm
        self.shapes: Dict[int, Tuple[Shape, ...]] = {}   # node -> the shape of each output
        self.dtypes: Dict[int, str] = {}                 # node -> its element type

    def build(self, policy: str) -> CompiledSubgraph:
        nodes = require(self.doc, "nodes", list, self.path, "top level")
        arg_nodes = require(self.doc, "arg_nodes", list, self.path, "top level")
        inputs, steps = [], []
        for index, node in enumerate(nodes):
            if not isinstance(node, dict):
                raise ArtifactError(f"{self.path}: nodes[{index}] must be an object")
            if node.get("op") == "input":
                inputs.append(self._input(index, node))
            else:
                steps.append(self._layer(index, node))
        if arg_nodes != [node.index for node in inputs]:
            raise ArtifactError(f"{self.path}: field 'arg_nodes' is {arg_nodes}, but the input "
                                f"nodes are {[node.index for node in inputs]}")
        heads = self._entries(require(self.doc, "heads", list, self.path, "top level"),
                              "field 'heads'", len(nodes))
        self._check_summary(nodes, inputs, heads)
        inputs = _quantized_inputs(inputs, steps)
        return CompiledSubgraph(str(self.doc.get("symbol", "")), self.path, inputs,
                                _with_release(steps, [h for h, _ in heads]), heads, self.shapes,
                                policy)

    def _input(self, index: int, node: Dict[str, Any]) -> InputNode:
        where = f"input node #{index}"
        name = require(node, "name", str, self.path, where)
        attrs = require(node, "attrs", dict, self.path, where)
        shape = self._shape_attr(attrs, f"{where} ({name})")
        dtype = first_value(attrs.get("dtype", ["float32"]))
        if dtype not in ("float32", "int8"):
            raise ArtifactError(f"{self.path}: {where} ({name}): field 'attrs.dtype' is "
                                f"{dtype!r}; only float32 and int8 inputs are defined")
        self.shapes[index] = (shape,)
        self.dtypes[index] = dtype
        return InputNode(index, name, shape)

    def _layer(self, index: int, node: Dict[str, Any]) -> _Step:
        where = f"layer node #{index}"
        if node.get("op") != "tvm_op":
            raise ArtifactError(f"{self.path}: {where}: field 'op' is {node.get('op')!r}, "
                                f"expected 'input' or 'tvm_op'")
        name = require(node, "name", str, self.path, where)
        attrs = require(node, "attrs", dict, self.path, f"{where} ({name})")
        entries = self._entries(require(node, "inputs", list, self.path, f"{where} ({name})"),
                                f"{where} ({name}), field 'inputs'", index)
        layer_name = first_value(attrs.get("layer_name"))
        # A JSON object or list here is malformed input, not a lookup key.
        kind = CATALOGUE.get(layer_name) if isinstance(layer_name, str) else None
        if kind is None:
            raise ArtifactError(f"{self.path}: {where} ({name}): field 'attrs.layer_name' is "
                                f"{layer_name!r}, which has no simulator kernel (known: "
                                f"{sorted(CATALOGUE)})", node=name)
        sources = attrs.get("source_nodes", [])
        if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
            raise ArtifactError(f"{self.path}: {where} ({name}): field 'attrs.source_nodes' "
                                f"must be a list of strings", node=name)
        out_shapes = self._shape_attrs(attrs, f"{where} ({name})")
        spec = LayerSpec(index, name, layer_name, attrs,
                         tuple(self.shapes[r][s] for r, s in entries), out_shapes[0],
                         tuple(sources), self.path, kind, out_shapes)
        self._check_layout_shapes(spec)
        self._check_dtypes(spec, attrs, [r for r, _ in entries])
        issue = kind.capability_issue(attrs)
        if issue:
            raise spec.error("attrs", f"not supported by the simulator: {issue}")
        kernel = kind.kernel_for(attrs)(spec, self.consts, self.gemm)
        self.shapes[index] = out_shapes
        return _Step(index, spec, kernel, tuple(r for r, _ in entries), (),
                     tuple(s for _, s in entries))

    def _entries(self, value: Any, where: str, limit: int) -> List[Tuple[int, int]]:
        """Node references whose output slot the referenced node has."""
        entries = node_entries(value, self.path, where, limit)
        for node, slot in entries:
            count = len(self.shapes.get(node, ()))
            if slot >= max(count, 1):
                raise ArtifactError(f"{self.path}: {where}: node {node} has {count} output(s), "
                                    f"no output {slot}")
        return entries

    def _shape_attrs(self, attrs: Dict[str, Any], where: str) -> Tuple[Shape, ...]:
        """attrs.shape of a layer: one shape per output (``num_outputs``, 1 by default)."""
        count = attrs.get("num_outputs", "1")
        value = attrs.get("shape")
        if str(count) == "1" or not isinstance(value, list) or len(value) < 2:
            return (self._shape_attr(attrs, where),)
        if str(count) != str(len(value)):
            raise ArtifactError(f"{self.path}: {where}: field 'attrs.shape' holds {len(value)} "
                                f"shapes, num_outputs is {count!r}")
        return tuple(shape_of(v, self.path, f"{where}: attrs.shape[{k}]")
                     for k, v in enumerate(value))

    def _shape_attr(self, attrs: Dict[str, Any], where: str) -> Shape:
        value = attrs.get("shape")
        if not (isinstance(value, list) and len(value) == 1):
            raise ArtifactError(f"{self.path}: {where}: field 'attrs.shape' must be "
                                f"[[d0, d1, ...]], got {value!r}")
        return shape_of(value[0], self.path, f"{where}: attrs.shape")

    @staticmethod
    def _check_layout_shapes(spec: LayerSpec) -> None:
        """data_layout_shape / out_layout_shape, when present, must agree with the graph, as
        they are, padded to 4-D the way the newer codegen writes R4 layers, or padded in front
        as it writes BatchMatmul."""
        checks = (("data_layout_shape", spec.input_shapes[0] if spec.input_shapes else None),
                  ("out_layout_shape", spec.shape))
        for key, actual in checks:
            if key in spec.attrs and actual is not None:
                stated = spec.ints(key)
                lead = (1,) * (4 - len(actual)) + tuple(actual)  # BatchMatmul pads in front
                if stated not in (tuple(actual), tuple(r4_shape(list(actual))), lead):
                    raise spec.error(f"attrs.{key}", f"is {list(stated)} but the graph gives "
                                                     f"{list(actual)}")

    def _check_dtypes(self, spec: LayerSpec, attrs: Dict[str, Any], inputs: List[int]) -> None:
        """A layer computes in one element type, its inputs' (only ``quant`` converts)."""
        dtype = first_value(attrs.get("dtype", ["float32"]))
        if dtype not in ("float32", "int8"):
            raise spec.error("attrs.dtype", f"is {dtype!r}; only float32 and int8 are defined")
        if spec.layer_name != "quant":
            for ref in inputs:
                if self.dtypes[ref] != dtype:
                    raise spec.error("inputs", f"node {ref} has dtype {self.dtypes[ref]} but the "
                                               f"layer computes in {dtype}; only a quant layer "
                                               "converts")
        self.dtypes[spec.index] = dtype

    def _check_summary(self, nodes: list, inputs: List[InputNode], heads: List[int]) -> None:
        """Top-level attrs.shape and the num_subgraph_* strings must agree with the nodes."""
        listed = self.doc.get("attrs", {}).get("shape") if isinstance(
            self.doc.get("attrs"), dict) else None
        if listed is not None:
            shapes = listed[1] if isinstance(listed, list) and len(listed) == 2 else None
            if not isinstance(shapes, list) or len(shapes) != len(nodes):
                raise ArtifactError(f"{self.path}: field 'attrs.shape' must be ['list_shape', "
                                    f"[one shape per node ({len(nodes)})]]")
            for index, shape in enumerate(shapes):
                if not isinstance(shape, list) or tuple(shape) != self.shapes[index][0]:
                    raise ArtifactError(f"{self.path}: field 'attrs.shape'[{index}] is {shape}, "
                                        f"node {index} says {list(self.shapes[index][0])}")
        for key, count in (("num_subgraph_inputs", len(inputs)),
                           ("num_subgraph_outputs", len(heads))):
            if key in self.doc and str(self.doc[key]) != str(count):
                raise ArtifactError(f"{self.path}: field '{key}' is {self.doc[key]!r}, the graph "
                                    f"has {count}")


def _quantized_inputs(inputs: List[InputNode], steps: List[_Step]) -> List[InputNode]:
    """The inputs, those that reach only quant layers (through layers that only move bytes)
    marked as not rounded to float16."""
    readers: Dict[int, List[_Step]] = {}
    for step in steps:
        for ref in step.inputs:
            readers.setdefault(ref, []).append(step)

    def quantized_only(index: int) -> bool:
        found = readers.get(index, [])
        return bool(found) and all(
            step.spec.layer_name == "quant" or (_moves_bytes(step) and quantized_only(step.node))
            for step in found)

    return [dataclasses.replace(node, fp16=False) if quantized_only(node.index) else node
            for node in inputs]


def _moves_bytes(step: _Step) -> bool:
    kind = step.spec.kind
    return step.kernel.exact and kind is not None and (
        kind.reshape_like or kind.name == "layout_transform")


def _with_release(steps: List[_Step], heads: List[int]) -> List[_Step]:
    """Attach to each step the values that die after it (never the subgraph outputs)."""
    last_use: Dict[int, int] = {}
    for position, step in enumerate(steps):
        for ref in step.inputs:
            last_use[ref] = position
    keep = set(heads)
    released: Dict[int, List[int]] = {}
    for ref, position in last_use.items():
        if ref not in keep:
            released.setdefault(position, []).append(ref)
    return [_Step(s.node, s.spec, s.kernel, s.inputs, tuple(sorted(released.get(p, []))),
                  s.slots) for p, s in enumerate(steps)]


def _compute(step: _Step, values: Dict[int, Any]) -> Tuple[Any, bool]:
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
