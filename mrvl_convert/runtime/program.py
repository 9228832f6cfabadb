"""Reading a Nodes-JSON + Constants-JSON into the simulator's step program.

``read_program`` is the simulator's compile stage without the running:

- requires: the paths of a Nodes-JSON and its Constants-JSON (nothing else is read: if the two
  files are not enough to run a layer, the artifact is incomplete);
- ensures: every node validated (op, fields, shapes, element types, the top-level summary) and
  every layer's kernel built, in node order; each input marked whether it goes in as float16 or
  only feeds int8 layers; each step carrying the values no later step reads (``release``), so a
  run frees them as it goes. Anything malformed raises ``ArtifactError`` naming the file, the
  node and the field.

Running the program is ``simulator.py`` (per layer) and ``graph_engine.py`` (segments).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

import numpy as np

from mrvl_convert.core.artifact import (decode_consts, first_value, node_entries, read_json,
                                        require, shape_of)
from mrvl_convert.errors import ArtifactError
from mrvl_convert.kernels.base import Kernel
from mrvl_convert.kernels.gemm import GemmEngine
from mrvl_convert.kernels.layerspec import LayerSpec, Shape
from mrvl_convert.layers import CATALOGUE, r4_shape


@dataclass(frozen=True)
class InputNode:
    index: int
    name: str
    shape: Shape
    # False when only quant layers read it: an int8 region quantizes the float32 input itself,
    # as onnxruntime's QuantizeLinear does, without a float16 rounding first.
    fp16: bool = True


@dataclass(frozen=True)
class Step:
    """One layer node: its kernel, what it reads and the values that die after it."""

    node: int
    spec: LayerSpec
    kernel: Kernel
    inputs: Tuple[int, ...]
    release: Tuple[int, ...]  # values no later step needs: freed to keep the working set small
    slots: Tuple[int, ...] = ()  # the output slot of each input (all 0 unless a Split feeds it)


@dataclass(frozen=True)
class Program:
    """A validated Nodes-JSON as steps in run order, with the constants its kernels read."""

    symbol: str
    file: str
    inputs: List[InputNode]
    steps: List[Step]
    heads: List[Tuple[int, int]]              # (node, output slot) of each subgraph output
    shapes: Dict[int, Tuple[Shape, ...]]      # node -> the shape of each output
    consts: Dict[str, np.ndarray]


def read_program(nodes_path: str, consts_path: str, gemm: GemmEngine) -> Program:
    """Read exactly these two files, validate them and build one kernel per layer."""
    doc = read_json(nodes_path, "Nodes-JSON")
    consts = decode_consts(consts_path, read_json(consts_path, "Constants-JSON", max_bytes=None))
    return _ProgramReader(nodes_path, doc, consts, gemm).build()


class _ProgramReader:
    """Validates a Nodes-JSON document node by node and turns it into steps."""

    def __init__(self, path: str, doc: Any, consts: Dict[str, np.ndarray],
                 gemm: GemmEngine) -> None:
        if not isinstance(doc, dict):
            raise ArtifactError(f"{path}: a Nodes-JSON must be a JSON object")
        self.path, self.doc, self.consts, self.gemm = path, doc, consts, gemm
        self.shapes: Dict[int, Tuple[Shape, ...]] = {}   # node -> the shape of each output
        self.dtypes: Dict[int, str] = {}                 # node -> its element type

    def build(self) -> Program:
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
        inputs = quantized_inputs(inputs, steps)
        return Program(str(self.doc.get("symbol", "")), self.path, inputs,
                       with_release(steps, [h for h, _ in heads]), heads, self.shapes,
                       self.consts)

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

    def _layer(self, index: int, node: Dict[str, Any]) -> Step:
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
        return Step(index, spec, kernel, tuple(r for r, _ in entries), (),
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
        they are, padded to 4-D the way the newer codegen writes R4 layers (a Softmax's 3-D
        [B, T, C] as [B, 1, T, C], ``r4_keeps_last``), or padded in front as it writes
        BatchMatmul."""
        checks = (("data_layout_shape", spec.input_shapes[0] if spec.input_shapes else None),
                  ("out_layout_shape", spec.shape))
        for key, actual in checks:
            if key in spec.attrs and actual is not None:
                stated = spec.ints(key)
                lead = (1,) * (4 - len(actual)) + tuple(actual)  # BatchMatmul pads in front
                keeps_last = bool(getattr(spec.kind, "r4_keeps_last", False))
                r4 = tuple(r4_shape(list(actual), keep_last=keeps_last))
                if stated not in (tuple(actual), r4, lead):
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


def quantized_inputs(inputs: List[InputNode], steps: List[Step]) -> List[InputNode]:
    """The inputs, those that reach only quant layers (through layers that only move bytes)
    marked as not rounded to float16."""
    readers: Dict[int, List[Step]] = {}
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


def _moves_bytes(step: Step) -> bool:
    kind = step.spec.kind
    return step.kernel.exact and kind is not None and (
        kind.reshape_like or kind.name == "layout_transform")


def with_release(steps: List[Step], heads: List[int]) -> List[Step]:
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
    return [Step(s.node, s.spec, s.kernel, s.inputs, tuple(sorted(released.get(p, []))),
                 s.slots) for p, s in enumerate(steps)]
