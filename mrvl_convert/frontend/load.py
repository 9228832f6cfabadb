"""Stage 1, load: bytes on disk (or a ModelProto) to a checked, fully shaped ONNX model.

Requires: a path to an ONNX file or an ``onnx.ModelProto``.
Ensures: the returned ``LoadedModel.proto`` passes ``onnx.checker``, uses an opset in the
supported range and an IR version onnxruntime accepts, has every node named uniquely, has no
dynamic dimension left on its inputs, and carries inferred shapes for every tensor that shape
inference can reach (strict inference; where it fails inside a Loop/If/Scan, non-strict
inference of the rest and the node in ``shape_failures``: ``shape_failures.py``); a model older than opset 11 is at opset 11 where onnx's converter can bring
it (``opset_upgrade.py``, exact), and no float16 is left (``float16_model.py``: the float32
twin, the float16 inputs/outputs in ``boundary_dtypes``). Anything else raises a ``MrvlConvertError`` subclass naming the model.
"""
from __future__ import annotations

import copy
import hashlib
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import onnx

from mrvl_convert.core.tensors import (all_tensors, check_sizes, external_files, is_external, load_external,
                       model_dir)
from mrvl_convert.errors import (InvalidModelError, ModelLoadError, ShapeError,
                     UnsupportedModelError)
from mrvl_convert.frontend.float16_model import widen_float16
from mrvl_convert.frontend.input_shapes import check_channels, fix_input_shapes
from mrvl_convert.frontend.input_values import Values, input_values
from mrvl_convert.frontend.names import name_source, safe_name
from mrvl_convert.frontend.opset_upgrade import upgrade_opset
from mrvl_convert.frontend.shape_arithmetic import infer_model_shapes
from mrvl_convert.frontend.shape_failures import Inferred, PlainFailure, infer_around

MIN_OPSET = 7
MAX_OPSET = onnx.defs.onnx_opset_version()
# onnxruntime 1.31 refuses IR > 13 and onnx 1.23 writes 14 by default.
MAX_RUNTIME_IR = 10
# Domains onnxruntime can execute out of the box; anything else would leave a CPU stage nobody runs.
KNOWN_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "com.microsoft")

# Shape inference reads a constant's values only where it is a shape, axes, pads or scales (a few
# elements): a larger initializer is given to it without its data, as an external one already is.
INFERENCE_READS = 1024

# Element types with a plain numpy dtype (bfloat16, float8 and 4-bit types have none).
NUMPY_ELEM_TYPES = tuple(getattr(onnx.TensorProto, n) for n in (
    "FLOAT", "FLOAT16", "DOUBLE", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32",
    "UINT64", "BOOL"))

ModelLike = Union[str, os.PathLike, onnx.ModelProto]


@dataclass
class LoadedModel:
    name: str                     # safe for file names: [A-Za-z0-9_.-]
    label: str                    # what error messages call the model (its path, or its name)
    sha256: str
    proto: onnx.ModelProto        # normalised, shaped
    original_names: Dict[str, str] = field(default_factory=dict)  # our unique name -> name in file
    input_shapes: Dict[str, List[int]] = field(default_factory=dict)
    name_original: Optional[str] = None  # the text ``name`` was made from, when it differs
    # input -> {"declared": [...], "used": [...]} for inputs whose static dims were replaced
    input_shape_overrides: Dict[str, Dict[str, List[Any]]] = field(default_factory=dict)
    # input -> the value it is pinned to for the conversion (``input_values.py``)
    values: Dict[str, Any] = field(default_factory=dict)
    # model input/output -> its dtype as given, where the model computes it as float32
    # (``float16_model.py``): the manifest's ``computed_as``
    boundary_dtypes: Dict[str, str] = field(default_factory=dict)
    # an old-opset model's {"given", "used", "note"} (``opset_upgrade.py``): report.json's opset
    opset: Dict[str, Any] = field(default_factory=dict)
    # node -> its op type in the file, where the opset upgrade changed it (Upsample -> Resize)
    given_ops: Dict[str, str] = field(default_factory=dict)
    # control-flow node -> onnx's message, where strict shape inference fails inside it
    # (``shape_failures.py``: the rest is inferred, it and what its shapes decide run on CPU)
    shape_failures: Dict[str, str] = field(default_factory=dict)


def load_model(model: ModelLike, *, shapes: Optional[Mapping[str, Sequence[int]]] = None,
               name: Optional[str] = None, values: Optional[Values] = None) -> LoadedModel:
    proto, label, raw, default_name, path = _read(model)
    _check_opsets(proto, label)
    renumbered = _normalise_ir(proto)
    original_names = name_nodes(proto)
    _check_unique_tensors(proto, label)
    # Before the checker: it names the node and the tensor of a cycle or a missing initializer.
    _check_initializers(proto, label)
    # The bytes read are the model checked unless a step above changed it.
    as_read = not renumbered and all(ours == theirs for ours, theirs in original_names.items())
    _run_checker(proto, path, label, raw if as_read else None)
    _check_domains(proto, label)
    upgrade = upgrade_opset(proto, _default_opset(proto))
    given_ops = {n.name: n.op_type for n in proto.graph.node}
    if upgrade.note is not None:
        proto = upgrade.model
        renamed = name_nodes(proto)  # nodes the converter added or replaced one by several
        original_names = {ours: original_names.get(was, was) for ours, was in renamed.items()}
    fixed = fix_input_shapes(proto, shapes or {}, label)
    pinned = input_values(proto, values or {}, fixed.shapes, label)
    failures: Dict[str, str] = {}
    proto = _infer_shapes(proto, label, list(fixed.overrides), failures)
    check_channels(proto, label, list(fixed.overrides))
    _check_dtypes(proto, label)
    _check_negative_dims(proto, label)
    if path is not None:
        # Weights are read last: checks and shape inference stay cheap on a >2 GiB model.
        load_external(proto, model_dir(path), label)
    check_sizes(proto, label)
    boundary_dtypes = widen_float16(proto)  # after the weights are read: it widens them
    given_ops = {n.name: given_ops[n.name] for n in proto.graph.node
                 if given_ops.get(n.name, n.op_type) != n.op_type}
    source = name_source(name, default_name or proto.graph.name)
    model_name = safe_name(source)
    return LoadedModel(name=model_name, label=label, sha256=hashlib.sha256(raw).hexdigest(),
                       proto=proto, original_names=original_names, input_shapes=fixed.shapes,
                       name_original=source if source != model_name else None,
                       input_shape_overrides=fixed.overrides, values=pinned,
                       boundary_dtypes=boundary_dtypes, given_ops=given_ops,
                       shape_failures=failures,
                       opset={} if upgrade.note is None else
                       {"given": upgrade.given, "used": upgrade.used, "note": upgrade.note})


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _run_checker(proto: onnx.ModelProto, path: Optional[Path], label: str,
                 raw: Optional[bytes] = None) -> None:
    """``raw``: ``proto`` serialised, when the caller has it (the checker would serialise
    ``proto`` again, every weight)."""
    # Given a ModelProto the checker looks for external data files in the working directory;
    # given the path it looks next to the model (and never reads the weights).
    uses_external = path is not None and any(is_external(t) for t, _ in all_tensors(proto))
    try:
        onnx.checker.check_model(str(path) if uses_external else
                                 proto if raw is None else raw)
    except onnx.checker.ValidationError as exc:
        message = " ".join(str(exc).split())[:400]  # the checker's messages span several lines
        raise InvalidModelError(f"fails the ONNX checker: {message}", model=label) from None


def _read(model: ModelLike):
    if isinstance(model, onnx.ModelProto):
        raw = model.SerializeToString(deterministic=True)
        external_files(model, None, model.graph.name or "<ModelProto>")
        return (copy.deepcopy(model), (model.graph.name or "<ModelProto>"), raw, model.graph.name,
                None)
    path = Path(model)
    label = str(path)
    if not path.is_file():
        raise ModelLoadError("no such file", model=label)
    raw = path.read_bytes()
    try:
        proto = onnx.load_model_from_string(raw)
    except Exception as exc:  # protobuf raises DecodeError, onnx may raise others
        raise ModelLoadError(f"is not an ONNX model (protobuf does not parse: {_first_line(exc)})",
                             model=label) from None
    if not proto.HasField("graph") and not proto.opset_import:
        raise ModelLoadError("is not an ONNX model (no graph in the protobuf)", model=label)
    external_files(proto, model_dir(path), label)  # before any check reads a byte of it
    return proto, label, raw, path.stem, path


def _check_opsets(proto: onnx.ModelProto, label: str) -> None:
    if not proto.graph.node:
        raise InvalidModelError("the graph is empty (no nodes)", model=label)
    if not proto.graph.output:
        raise InvalidModelError("the graph has no outputs: there is nothing to compute",
                                model=label)
    default = [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")]
    if not default:
        raise UnsupportedModelError("declares no default-domain opset", model=label)
    version = default[0]
    if not MIN_OPSET <= version <= MAX_OPSET:
        raise UnsupportedModelError(
            f"uses opset {version}; supported opsets are {MIN_OPSET} to {MAX_OPSET} "
            "(convert it with onnx.version_converter first)", model=label)


def _default_opset(proto: onnx.ModelProto) -> int:
    return next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))


def _normalise_ir(proto: onnx.ModelProto) -> bool:
    """Whether it changed ``proto``."""
    before = proto.ir_version
    # IR < 4 lists initializers as graph inputs; the exporters keep them out from IR 4 on.
    if proto.ir_version < 4:
        init_names = {t.name for t in proto.graph.initializer}
        keep = [i for i in proto.graph.input if i.name not in init_names]
        del proto.graph.input[:]
        proto.graph.input.extend(keep)
        proto.ir_version = 4
    if proto.ir_version > MAX_RUNTIME_IR:
        needed = max(onnx.helper.find_min_ir_version_for(list(proto.opset_import), True), 4)
        proto.ir_version = min(proto.ir_version, max(needed, MAX_RUNTIME_IR))
    return proto.ir_version != before


def name_nodes(proto: onnx.ModelProto) -> Dict[str, str]:
    """Give every node a unique name so the report can speak about each one; returns
    {our name: name in the file}. Deterministic: ``compare`` names the original model's nodes
    the same way to find a layer's ``source_nodes``."""
    seen: set = set()
    original: Dict[str, str] = {}
    for index, node in enumerate(proto.graph.node):
        name = node.name
        if not name or name in seen:
            base = f"{node.op_type}_{index}" if not name else f"{name}_{index}"
            name = base
            suffix = 1
            while name in seen:
                name = f"{base}_{suffix}"
                suffix += 1
        seen.add(name)
        original[name] = node.name
        node.name = name
    return original


def _check_unique_tensors(proto: onnx.ModelProto, label: str) -> None:
    graph = proto.graph
    produced: Dict[str, str] = {}
    for init in graph.initializer:
        produced[init.name] = "initializer"
    for inp in graph.input:
        if inp.name in produced and produced[inp.name] != "initializer":
            raise InvalidModelError("is declared twice as a graph input", model=label,
                                    tensor=inp.name)
        produced.setdefault(inp.name, "graph input")
    for node in graph.node:
        for out in node.output:
            if not out:
                continue
            if out in produced:
                raise InvalidModelError(
                    f"is produced twice (by {produced[out]} and by node {node.name!r}); "
                    "tensor names must be unique", model=label, tensor=out)
            produced[out] = f"node {node.name!r}"


def _check_domains(proto: onnx.ModelProto, label: str) -> None:
    local = {f.domain for f in proto.functions}
    for node in proto.graph.node:
        if node.domain not in KNOWN_DOMAINS and node.domain not in local:
            raise UnsupportedModelError(
                f"uses op {node.op_type!r} from the unknown domain {node.domain!r}; neither the "
                "accelerator nor onnxruntime can run it", model=label, node=node.name)


def _check_initializers(proto: onnx.ModelProto, label: str) -> None:
    """Every node input must come from somewhere: onnx.checker does not look at this."""
    available = {i.name for i in proto.graph.input} | {t.name for t in proto.graph.initializer}
    available |= {t.values.name for t in proto.graph.sparse_initializer}
    for node in proto.graph.node:
        for name in node.input:
            if name and name not in available:
                producer = _producer_of(proto, name)
                if producer is None:
                    raise InvalidModelError(
                        "is read but never produced: no graph input, initializer or node makes it "
                        "(a missing initializer?)", model=label, node=node.name, tensor=name)
                raise InvalidModelError(
                    f"is read before node {producer!r} produces it: the graph has a cycle or is "
                    "not in topological order", model=label, node=node.name, tensor=name)
        available.update(o for o in node.output if o)


def _producer_of(proto: onnx.ModelProto, tensor: str) -> Optional[str]:
    for node in proto.graph.node:
        if tensor in node.output:
            return node.name
    return None


def _check_dtypes(proto: onnx.ModelProto, label: str) -> None:
    """Tensors of the main graph must have a numpy dtype: any of them may become a stage
    boundary, which the manifest, graphsurgeon and HybridSession describe by numpy dtype."""
    graph = proto.graph
    typed = [(v.name, v.type.tensor_type.elem_type) for v in
             list(graph.input) + list(graph.output) + list(graph.value_info)
             if v.type.HasField("tensor_type")]
    typed += [(t.name, t.data_type) for t in graph.initializer]
    for name, elem in typed:
        if elem not in NUMPY_ELEM_TYPES:
            kind = onnx.TensorProto.DataType.Name(elem) if elem in \
                onnx.TensorProto.DataType.values() else str(elem)
            raise UnsupportedModelError(
                f"has element type {kind}; supported are "
                f"{', '.join(onnx.TensorProto.DataType.Name(e) for e in NUMPY_ELEM_TYPES)}",
                model=label, tensor=name)


def _check_negative_dims(proto: onnx.ModelProto, label: str) -> None:
    """A negative size from shape inference (a pool window larger than its padded input...)
    is a model onnxruntime refuses: say so here, naming the node, not in a schema error later."""
    graph = proto.graph
    for value in list(graph.value_info) + list(graph.output):
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
        if any(d < 0 for d in dims):
            raise InvalidModelError(
                f"shape inference gives it the negative shape {dims} (e.g. a window larger than "
                "its padded input); onnxruntime refuses such a model",
                model=label, node=_producer_of(proto, value.name), tensor=value.name)


def _infer_shapes(proto: onnx.ModelProto, label: str, overridden: Sequence[str] = (),
                  failures: Optional[Dict[str, str]] = None) -> onnx.ModelProto:
    """``failures``: filled with the control-flow nodes strict inference fails inside, where
    non-strict inference of the rest is taken instead (``shape_failures.py``)."""
    # Value infos written by exporters can carry stale symbolic dims: infer from scratch.
    del proto.graph.value_info[:]
    for output in proto.graph.output:
        # A declared -1 would survive inference (and reach the manifest): make it unknown. So
        # would a static size declared for the input shape the given one replaced.
        for dim in output.type.tensor_type.shape.dim:
            if overridden or (dim.HasField("dim_value") and dim.dim_value <= 0):
                dim.Clear()
    light = _without_weights(proto)
    try:
        inferred = infer_model_shapes(light, check_type=True, strict_mode=True)
    except Exception as exc:
        around = infer_around(light, exc, infer_model_shapes)
        if isinstance(around, Inferred) and failures is not None:
            failures.update(around.failures)
            return _with_weights(around.model, proto)
        text = _first_line(exc)
        found = re.search(r"node name: ([^)]*)\)", text)
        node = found[1] if found else None
        if isinstance(around, PlainFailure):  # the node to fix, not the Loop before it
            text, node = around.message, around.node
        if overridden:
            raise ShapeError(f"the given shape of input(s) {', '.join(map(repr, overridden))} "
                             f"replaces static dims, and the model does not fit it: shape "
                             f"inference fails: {text}", model=label, node=node) from None
        raise InvalidModelError(f"shape inference fails: {text}", model=label,
                                node=node) from None
    return _with_weights(inferred, proto)


def _without_weights(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` whose large initializers hold no data: shape inference serialises
    the model it is given and parses the one it returns, every weight each time."""
    light = onnx.ModelProto()
    light.CopyFrom(proto)
    for tensor in light.graph.initializer:
        if tensor.HasField("raw_data") and math.prod(tensor.dims) > INFERENCE_READS:
            tensor.ClearField("raw_data")
    return light


def _with_weights(inferred: onnx.ModelProto, proto: onnx.ModelProto) -> onnx.ModelProto:
    """``inferred`` with the initializers of ``proto`` back (inference leaves them as they are)."""
    del inferred.graph.initializer[:]
    inferred.graph.initializer.extend(proto.graph.initializer)
    return inferred
